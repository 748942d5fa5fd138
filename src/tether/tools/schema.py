"""JSON-schema validation (Draft 2020-12, via `jsonschema`) reported as pydantic-shaped issues.

One checker for every JSON schema tether enforces: hand-written tool parameters, `output=` dicts
and `await_external` schemas of settled runs. An issue is `{"loc": [...], "msg": str, "type": str}`
with `loc` pointing at the offending value (a missing or extra key included, like pydantic).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError, ValidationError

from tether.contracts.errors import ConfigError

Issue = dict[str, Any]
"""One validation problem: `{"loc": [...], "msg": str, "type": str}` (pydantic's shape)."""

_TYPES = {"type": "type_error", "required": "missing", "additionalProperties": "extra_forbidden"}


def check_schema(schema: Mapping[str, Any], *, what: str) -> None:
    """Refuse a schema that is not valid Draft 2020-12 (`ConfigError` naming `what`)."""
    try:
        Draft202012Validator.check_schema(dict(schema))
    except SchemaError as exc:
        where = "/".join(str(p) for p in exc.absolute_path) or "(root)"
        raise ConfigError(
            f"{what} is not a valid JSON schema (Draft 2020-12) at {where}: {exc.message}; fix the schema",
            where=where,
        ) from None


def json_schema_issues(value: Any, schema: Mapping[str, Any]) -> list[Issue]:
    """Every way `value` violates `schema`, in document order; [] when it conforms."""
    validator = Draft202012Validator(dict(schema), format_checker=Draft202012Validator.FORMAT_CHECKER)
    issues = [issue for error in validator.iter_errors(value) for issue in _issues(error)]
    return sorted(issues, key=lambda i: [str(p) for p in i["loc"]])  # stable: schema order within a loc


def _issues(error: ValidationError) -> Iterator[Issue]:
    loc = list(error.absolute_path)
    kind = str(error.validator)
    instance = error.instance
    if kind == "required" and isinstance(instance, dict):
        # One error per missing key, none naming it: point each issue at the key, like pydantic.
        required = error.validator_value if isinstance(error.validator_value, list) else []
        named = [k for k in required if k not in instance and repr(k) in error.message]
        yield {"loc": [*loc, *named[:1]], "msg": "Field required", "type": "missing"}
        return
    if kind == "additionalProperties" and isinstance(instance, dict):
        for key in _extra_keys(instance, error.schema):
            yield {"loc": [*loc, key], "msg": "Extra inputs are not permitted", "type": "extra_forbidden"}
        return
    yield {"loc": loc, "msg": _message(error), "type": _TYPES.get(kind, kind)}


def _extra_keys(instance: Mapping[str, Any], schema: Any) -> list[str]:
    if not isinstance(schema, Mapping):
        return []
    props = schema.get("properties") or {}
    patterns = [re.compile(p) for p in (schema.get("patternProperties") or {})]
    return [k for k in instance if k not in props and not any(p.search(k) for p in patterns)]


def _message(error: ValidationError) -> str:
    """jsonschema's message, plus what was expected where the message alone does not say."""
    if error.validator in ("anyOf", "oneOf") and isinstance(error.validator_value, list):
        options = ", ".join(describe(s) for s in error.validator_value)
        return f"{error.message}; expected one of: {options}"
    return str(error.message)


def describe(schema: Any) -> str:
    """A short human name for a (sub)schema: its type, const, enum or `$ref`."""
    if not isinstance(schema, Mapping):
        return "anything" if schema is True else "nothing"
    if "const" in schema:
        return repr(schema["const"])
    if "enum" in schema:
        return "one of " + ", ".join(repr(v) for v in schema["enum"])
    if "type" in schema:
        t = schema["type"]
        return " or ".join(t) if isinstance(t, list) else str(t)
    if "$ref" in schema:
        return str(schema["$ref"]).rsplit("/", 1)[-1]
    for combinator in ("anyOf", "oneOf", "allOf"):
        if isinstance(schema.get(combinator), list):
            return f"{combinator}(" + ", ".join(describe(s) for s in schema[combinator]) + ")"
    return "a value matching the schema"
