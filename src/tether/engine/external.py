"""Declared schemas of `await_external`, checked before any resolution is journaled.

`ctx.await_external(key, schema=...)` stores the schema as JSON Schema in its suspended entry
(pydantic types through `TypeAdapter.json_schema()`, dicts as given), so a settled run can be
validated from any process with `jsonschema`; while the branch is parked in this process the live
`TypeAdapter` checks too (validators JSON Schema cannot express). The value checked is the JSON
form that would be journaled, so a live check and a settled one agree.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import PydanticUserError, TypeAdapter, ValidationError

from tether.contracts.entries import JournalEntry
from tether.contracts.errors import InvalidResolutionError
from tether.engine.budget_suspension import is_budget_suspension
from tether.journal.canonical import canonical_json, to_jsonable
from tether.tools.definition import format_issue, pydantic_issues
from tether.tools.schema import Issue, check_schema, json_schema_issues

_SCHEMA_SHOWN = 240  # characters of the expected schema quoted in the error message


@dataclass(frozen=True)
class ExternalSchema:
    """What a suspension accepts: its JSON Schema (None if the type has none) and live adapter."""

    json_schema: dict[str, Any] | None
    adapter: TypeAdapter[Any] | None = None

    @classmethod
    def of(cls, schema: Any, key: str) -> ExternalSchema | None:
        if schema is None:
            return None
        if isinstance(schema, Mapping):
            check_schema(schema, what=f"the schema of await_external({key!r})")
            return cls(dict(schema))
        adapter: TypeAdapter[Any] = TypeAdapter(schema)
        try:
            return cls(adapter.json_schema(), adapter)
        except PydanticUserError:  # no JSON Schema for this type: only the live adapter checks
            return cls(None, adapter)

    def issues(self, data: Any) -> list[Issue]:
        issues = json_schema_issues(data, self.json_schema) if self.json_schema is not None else []
        if not issues and self.adapter is not None:
            try:
                self.adapter.validate_python(data)
            except ValidationError as exc:
                issues = pydantic_issues(exc)
        return issues

    def load(self, value: Any, *, run_id: str, key: str) -> Any:
        """The journaled value as the workflow sees it (typed when the schema is a type)."""
        if self.adapter is None:
            return value
        try:
            return self.adapter.validate_python(value)
        except ValidationError as exc:
            raise _invalid(
                run_id, key, pydantic_issues(exc), self.json_schema,
                after="The journaled value predates validation or the schema changed; abandon the "
                "suspension or resume with invalidate=[its seq]",
            ) from None


APPROVAL_VALUES = ("allow", "deny")
"""The only values a new resolution of a tool approval may carry (journals written before this rule are
read as they were: see `loop_host.is_allow`)."""


def check_resolution(target: JournalEntry, value: Any, live: ExternalSchema | None, *, run_id: str) -> Any:
    """The JSON form of `value` to journal for `target`, or `InvalidResolutionError` (nothing written)."""
    key = str(target.value.get("key") if isinstance(target.value, dict) else target.label)
    if is_budget_suspension(target):
        raise InvalidResolutionError(
            f"{key!r} of run {run_id!r} is a budget suspension: it is resolved by raising the run's USD ceiling "
            f"between segments (engine.raise_budget, `tether resolve {run_id} {key} USD`, or `tether resume "
            f"{run_id} --raise-budget USD`), not by a value handed to a running segment. Nothing was journaled.",
            run_id=run_id, key=key,
        )
    data = to_jsonable(value, what=f"the value for {key!r}")
    if target.kind == "approval" and data not in APPROVAL_VALUES:
        raise InvalidResolutionError(
            f"invalid value for {key!r} of run {run_id!r}: a tool approval takes exactly 'allow' or 'deny', "
            f"got {data!r}. Nothing was journaled; the approval stays open.",
            run_id=run_id, key=key, accepted=list(APPROVAL_VALUES),
        )
    spec = live or stored_schema(target)
    if spec is None:
        return data
    issues = spec.issues(data)
    if issues:
        raise _invalid(run_id, key, issues, spec.json_schema,
                       after="Nothing was journaled; the suspension stays open for a valid value")
    return data


def stored_schema(target: JournalEntry) -> ExternalSchema | None:
    """The schema written into a suspended entry (None when it declared none)."""
    schema = target.value.get("schema") if isinstance(target.value, dict) else None
    return ExternalSchema(schema) if isinstance(schema, dict) else None


def _invalid(
    run_id: str, key: str, issues: list[Issue], schema: dict[str, Any] | None, *, after: str
) -> InvalidResolutionError:
    listed = "; ".join(format_issue(i) or "(value)" for i in issues)
    expected = ""
    if schema is not None:
        shown = canonical_json(schema).decode()
        expected = f"; expected {shown if len(shown) <= _SCHEMA_SHOWN else shown[:_SCHEMA_SHOWN] + '…'}"
    return InvalidResolutionError(
        f"invalid value for {key!r} of run {run_id!r}: {listed}{expected}. {after}.",
        run_id=run_id, key=key, issues=issues, schema=schema,
    )
