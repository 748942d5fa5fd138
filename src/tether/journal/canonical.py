"""The one canonical-JSON function (RFC 8785) and the content keys built on it."""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable
from typing import Any

import rfc8785
from pydantic import BaseModel

from tether.contracts.errors import NonSerializableValueError

_SAFE_INT = 2**53 - 1
"""RFC 8785 numbers are IEEE-754 doubles: integers past this are refused (the rfc8785 package's rule)."""


def _plain_copy(value: Any, depth: int = 0) -> Any:
    """A copy of plain JSON data built from exact dict/list/str/int/bool/None/finite-float types, or
    `_NOT_PLAIN` for anything else (subclasses, tuples, models, non-str keys, NaN), which then takes
    the JSON round trip."""
    t = type(value)
    if t is str or t is int or t is bool or value is None:
        return value
    if t is float:
        return value if math.isfinite(value) else _NOT_PLAIN
    if depth > 64:
        return _NOT_PLAIN
    if t is list:
        out = []
        for v in value:
            c = _plain_copy(v, depth + 1)
            if c is _NOT_PLAIN:
                return _NOT_PLAIN
            out.append(c)
        return out
    if t is dict:
        copied = {}
        for k, v in value.items():
            c = _plain_copy(v, depth + 1)
            if type(k) is not str or c is _NOT_PLAIN:
                return _NOT_PLAIN
            copied[k] = c
        return copied
    return _NOT_PLAIN


_NOT_PLAIN: Any = object()


def to_jsonable(value: Any, *, what: str = "value") -> Any:
    """Turn pydantic models into plain JSON data and check the rest is JSON; raise a typed error if not."""
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    plain = _plain_copy(value)
    if plain is not _NOT_PLAIN:
        return plain  # already plain JSON data: the copy is what the round trip below would build
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


def _stdlib_canonical(value: Any, depth: int = 0) -> bool:
    """Whether `json.dumps(sort_keys=True)` writes exactly RFC 8785's bytes for `value`.

    True for plain data without floats (whose ECMAScript formatting differs from Python's repr), with
    integers in the double-precision range and ASCII keys (code-point order is then UTF-16 order).
    Strings need no check: both escape exactly `"`, `\\` and the controls below U+0020, with the
    same short forms and lowercase `\\u00xx`, and leave everything else as UTF-8.
    """
    t = type(value)
    if t is str or t is bool or value is None:
        return True
    if t is int:
        return bool(-_SAFE_INT <= value <= _SAFE_INT)
    if depth > 64:
        return False  # deep (or cyclic) data: the general path handles it, and names a cycle
    if t is dict:
        for k, v in value.items():
            if type(k) is not str or not k.isascii():
                return False
            tv = type(v)
            if tv is str or (tv is list and not v):  # strings and empty lists need no call
                continue
            if not _stdlib_canonical(v, depth + 1):
                return False
        return True
    if t is list:
        for v in value:  # noqa: SIM110 (a loop, not all(): no generator per call on the hot path)
            if type(v) is not str and not _stdlib_canonical(v, depth + 1):
                return False
        return True
    return False


_CANONICAL = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), sort_keys=True, allow_nan=False)
"""Stateless (built once so each call skips constructing an encoder)."""


def _make_encoder() -> Callable[[Any], str]:
    """`_CANONICAL.encode`, minus the C encoder it builds on every call (when the C accelerator exists)."""
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None:
        return _CANONICAL.encode
    # markers=None skips cycle detection: `_stdlib_canonical` already bounded the depth.
    encoder = make(None, _CANONICAL.default, json.encoder.encode_basestring, None, ":", ",", True, False, False)

    def encode(value: Any) -> str:
        if type(value) is str:
            return json.encoder.encode_basestring(value)
        return "".join(encoder(value, 0))

    return encode


_ENCODE = _make_encoder()
_ENCODE_STR: Callable[[str], str] = json.encoder.encode_basestring
"""How `_ENCODE` writes a string (quoted, escaped as RFC 8785 escapes, the rest left as it is)."""


def canonical_json(value: Any) -> bytes:
    """RFC 8785 canonical bytes of a JSON value (pydantic models are dumped first).

    The stdlib encoder writes the same bytes as the rfc8785 package for data `_stdlib_canonical`
    accepts, about ten times faster; everything else (floats, non-ASCII keys) goes to rfc8785. A
    property test holds the two equal.
    """
    plain = _stdlib_canonical(value)
    data = value if plain else to_jsonable(value)
    if plain or _stdlib_canonical(data):
        try:
            return _ENCODE(data).encode()
        except UnicodeEncodeError:
            pass  # a lone surrogate: rfc8785 refuses it with its own message below
    try:
        return rfc8785.dumps(data)
    except rfc8785.CanonicalizationError as exc:
        raise NonSerializableValueError(f"value cannot be canonicalized: {exc}") from None


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def content_key(identity: Any) -> str:
    """sha256 hex of the canonical JSON of an identity object."""
    return hashlib.sha256(canonical_json(identity)).hexdigest()  # sha256_hex, inlined (every replayed call)


_STEP_HEAD, _STEP_TAIL = b'{"deps":[],"key":', b',"kind":"step"}'


def step_key(name: str) -> str:
    """`content_key({"kind": "step", "key": name, "deps": []})`: the key of a step without deps.

    Its canonical bytes are `{"deps":[],"key":<name>,"kind":"step"}` (RFC 8785 sorts the members), so
    they are written without walking a dict; a string `canonical_json` would hand to rfc8785 (one
    with a lone surrogate) and anything not a string take `content_key` itself. A property test holds
    the two equal.
    """
    if type(name) is str:
        try:
            return hashlib.sha256(_STEP_HEAD + _ENCODE_STR(name).encode() + _STEP_TAIL).hexdigest()
        except UnicodeEncodeError:
            pass
    return content_key({"kind": "step", "key": name, "deps": []})


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
