"""The one canonical-JSON function (RFC 8785) and the content keys built on it."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import rfc8785
from pydantic import BaseModel

from tether.contracts.errors import NonSerializableValueError


def to_jsonable(value: Any, *, what: str = "value") -> Any:
    """Turn pydantic models into plain JSON data and check the rest is JSON; raise a typed error if not."""
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    try:
        # A round trip proves JSON-ability (and copies, so later mutation cannot reach the journal).
        return json.loads(json.dumps(value, allow_nan=False, default=_model_default))
    except (TypeError, ValueError) as exc:
        raise NonSerializableValueError(
            f"{what} is not JSON-serializable ({exc}). Return plain data (dict, list, str, "
            f"numbers, bool, None) or a pydantic model.",
            type=type(value).__name__,
        ) from None


def _model_default(obj: Any) -> Any:
    if isinstance(obj, BaseModel):
        return obj.model_dump(mode="json")
    raise TypeError(f"Object of type {type(obj).__name__} is not JSON serializable")


def canonical_json(value: Any) -> bytes:
    """RFC 8785 canonical bytes of a JSON value (pydantic models are dumped first)."""
    try:
        return rfc8785.dumps(to_jsonable(value))
    except rfc8785.CanonicalizationError as exc:
        raise NonSerializableValueError(f"value cannot be canonicalized: {exc}") from None


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def content_key(identity: Any) -> str:
    """sha256 hex of the canonical JSON of an identity object."""
    return sha256_hex(canonical_json(identity))


_ANNOTATION_KEYWORDS = frozenset({"title", "description", "examples", "default", "$comment"})


def strip_annotations(schema: Any) -> Any:
    """A JSON schema without annotation keywords, so renaming a description never changes identity."""
    if isinstance(schema, dict):
        out: dict[str, Any] = {}
        for k, v in schema.items():
            if k in _ANNOTATION_KEYWORDS:
                continue
            if k in ("properties", "$defs", "definitions", "patternProperties") and isinstance(v, dict):
                out[k] = {name: strip_annotations(sub) for name, sub in v.items()}
            else:
                out[k] = strip_annotations(v)
        return out
    if isinstance(schema, list):
        return [strip_annotations(s) for s in schema]
    return schema


def schema_hash(schema: dict[str, Any] | None) -> str | None:
    return None if schema is None else content_key(strip_annotations(schema))
