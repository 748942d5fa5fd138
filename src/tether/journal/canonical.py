"""The one canonical-JSON function (RFC 8785) and the content keys built on it."""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable
from typing import Any

import rfc8785
from pydantic import BaseModel
from pydantic_core import PydanticSerializationError

from tether.contracts.errors import NonSerializableValueError

_SAFE_INT = 2**53 - 1
"""RFC 8785 numbers are IEEE-754 doubles: integers past this are refused (the rfc8785 package's rule)."""


MAX_DEPTH = 128
"""The deepest nesting of lists and objects a journaled value may have (`[]` is one level, `[[]]` two).

Every store reads entries back with pydantic's JSON parser, which refuses input nested past 200 levels,
and the entry's own object and the member that holds the value (`value.output`, `value.value`) add
levels of their own. 128 (serde_json's default limit) leaves that room with plenty to spare; no
ordinary data comes near it."""


class _Deep(Exception):
    """`_plain_copy` or `_check_depth` went past `MAX_DEPTH` (deep data, or a cycle)."""


def _plain_copy(value: Any, depth: int = 0) -> Any:
    """A copy of plain JSON data built from exact dict/list/str/int/bool/None/finite-float types, or
    `_NOT_PLAIN` for anything else (subclasses, tuples, models, non-str keys, NaN), which then takes
    the JSON round trip. Raises `_Deep` for a container more than `MAX_DEPTH` levels down (the walk
    that copies is the walk that measures: the depth costs no second pass)."""
    t = type(value)
    if t is str or t is int or t is bool or value is None:
        return value
    if t is float:
        return value if math.isfinite(value) else _NOT_PLAIN
    if depth >= 128:  # MAX_DEPTH, spelled out: a global lookup per container would cost on the hot path
        raise _Deep
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
    """Turn pydantic models into plain JSON data and check the rest is JSON, nested at most `MAX_DEPTH`
    levels; raise `NonSerializableValueError` if not (so nothing a store cannot read back is journaled)."""
    if isinstance(value, BaseModel):
        data = _dump_model(value, what)
        _check_depth(data, what, value)
        return data
    try:
        plain = _plain_copy(value)
    except _Deep:
        plain = _NOT_PLAIN  # deep, or a cycle: the checked path below says which
    if plain is not _NOT_PLAIN:
        return plain  # already plain JSON data: the copy is what the round trip below would build
    data = _round_trip(value, what)
    _check_depth(data, what, value)
    return data


def _round_trip(value: Any, what: str) -> Any:
    """`value` through `json.dumps` and back: proves JSON-ability and copies (later mutation cannot
    reach the journal). Any depth Python's recursion allows; deeper is a typed error too."""
    try:
        return json.loads(json.dumps(value, allow_nan=False, default=_model_default))
    except RecursionError:
        raise _too_deep(value, what) from None
    except (TypeError, ValueError) as exc:
        raise NonSerializableValueError(
            f"{what} is not JSON-serializable ({exc}). Return plain data (dict, list, str, "
            f"numbers, bool, None) or a pydantic model.",
            type=type(value).__name__,
        ) from None


def _dump_model(model: BaseModel, what: str) -> Any:
    try:
        return model.model_dump(mode="json")
    except (PydanticSerializationError, ValueError, TypeError) as exc:
        raise _model_error(model, what, exc) from None


def _model_error(model: BaseModel, what: str, exc: Exception) -> NonSerializableValueError:
    if "depth" in str(exc):  # pydantic's serializer stops at about 255 levels
        return _too_deep(model, what)
    return NonSerializableValueError(
        f"{what} ({type(model).__name__}) is not JSON-serializable ({exc}). Give its fields plain "
        f"JSON types, or a serializer that returns them.",
        type=type(model).__name__,
    )


def _model_default(obj: Any) -> Any:
    if isinstance(obj, BaseModel):
        return _dump_model(obj, f"a nested {type(obj).__name__}")
    raise TypeError(f"Object of type {type(obj).__name__} is not JSON serializable")


def _check_depth(data: Any, what: str, source: Any) -> None:
    """Refuse plain JSON data (built from `source`) nested deeper than `MAX_DEPTH`, for data no copy walked."""
    try:
        _within(data, 0)
    except _Deep:
        raise _too_deep(data, what, type(source).__name__) from None


def _within(value: Any, depth: int) -> None:
    if depth >= 128:  # MAX_DEPTH (see `_plain_copy`)
        raise _Deep
    for v in value.values() if type(value) is dict else value if type(value) is list else ():
        t = type(v)
        if t is dict or t is list:
            _within(v, depth + 1)


def _too_deep(value: Any, what: str, type_name: str | None = None) -> NonSerializableValueError:
    type_name = type_name or type(value).__name__
    depth = nesting_depth(value)
    if depth is None:
        return NonSerializableValueError(
            f"{what} contains itself (a list or dict that holds a reference to itself), which JSON "
            f"cannot hold. Return a copy without the cycle.",
            type=type_name,
        )
    return NonSerializableValueError(
        f"{what} is nested {depth} levels deep; a journaled value may nest lists and objects at most "
        f"{MAX_DEPTH} levels (the stores read nothing deeper back). Nothing was journaled. Flatten "
        f"it, or journal the deep part as a JSON string (json.dumps) and parse it where it is used.",
        type=type_name,
        depth=depth,
        limit=MAX_DEPTH,
    )


_EXIT: Any = object()


def nesting_depth(value: Any) -> int | None:
    """How many levels deep `value` nests lists, tuples, dicts and models (`[]` is 1, a scalar 0), or
    None when it contains itself. Iterative, so any depth can be measured (for messages and tests)."""
    deepest = 0
    on_path: set[int] = set()
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, level = stack.pop()
        if item is _EXIT:
            on_path.discard(level)  # `level` holds the id of the container being left
            continue
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list | tuple):
            children = item
        elif isinstance(item, BaseModel):
            children = [v for _, v in item]
        else:
            continue
        if id(item) in on_path:
            return None
        on_path.add(id(item))
        stack.append((_EXIT, id(item)))
        deepest = max(deepest, level + 1)
        stack.extend((child, level + 1) for child in children)
    return deepest


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
    data = value if plain else _hashable(value)
    if plain or _stdlib_canonical(data):
        try:
            return _ENCODE(data).encode()
        except UnicodeEncodeError:
            pass  # a lone surrogate: rfc8785 refuses it with its own message below
    try:
        return rfc8785.dumps(data)
    except rfc8785.CanonicalizationError as exc:
        raise NonSerializableValueError(f"value cannot be canonicalized: {exc}") from None
    except RecursionError:
        raise _too_deep(data, "value") from None


def _hashable(value: Any) -> Any:
    """`to_jsonable` without its depth limit: hashing reads no value back, so a content key stays what
    it was for data of any depth (journaling is what `MAX_DEPTH` guards)."""
    if isinstance(value, BaseModel):
        return _dump_model(value, "value")
    try:
        plain = _plain_copy(value)
    except _Deep:
        plain = _NOT_PLAIN
    return plain if plain is not _NOT_PLAIN else _round_trip(value, "value")


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def content_key(identity: Any) -> str:
    """sha256 hex of the canonical JSON of an identity object."""
    return hashlib.sha256(canonical_json(identity)).hexdigest()  # sha256_hex, inlined (every replayed call)


def canonical_str_size(text: str) -> int | None:
    """`len(canonical_json(text))` for a string, without encoding it twice (None for a string `canonical_json`
    hands to rfc8785: one with a lone surrogate)."""
    try:
        return len(_ENCODE_STR(text).encode())
    except UnicodeEncodeError:
        return None


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
