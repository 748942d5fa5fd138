"""Structured output: the three request tiers, extraction from a reply, and validation.

Tiers come from `ModelCaps.structured_output`: `native` (the provider enforces a strict schema),
`tool` (a forced `emit_result` tool whose arguments are the output), `prompt` (the schema in the
system prompt, JSON parsed from the text). Validation never casts silently: a failure is a list of
issues the loop re-prompts with. A JSON-schema dict is enforced by `jsonschema` (Draft 2020-12).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ValidationError

from tether.agents.host import OutputSpec
from tether.contracts.messages import ChatRequest, OutputFormat, ToolCallPart, ToolSpec
from tether.journal.canonical import canonical_json
from tether.tools.definition import format_issue, pydantic_issues
from tether.tools.schema import Issue, check_schema, json_schema_issues

StructuredTier = Literal["native", "tool", "prompt"]
EMIT_RESULT = "emit_result"
_WRAP_KEY = "result"
PROMPT_NOTE = "reply with only a JSON value (no prose) that matches this JSON schema:"
"""The prompt tier's words in the system prompt (what tells a prompt-tier request from a plain one)."""


def output_spec(output: type[BaseModel] | Mapping[str, Any], *, name: str = "result") -> OutputSpec:
    """An `OutputSpec` from a pydantic model class or a JSON-schema dict (checked: Draft 2020-12)."""
    if isinstance(output, type) and issubclass(output, BaseModel):
        return OutputSpec(schema=output.model_json_schema(), model_cls=output, name=name)
    if isinstance(output, Mapping):
        check_schema(output, what="output=")
        return OutputSpec(schema=dict(output), model_cls=None, name=name)
    raise TypeError(f"output must be a pydantic model class or a JSON schema dict, not {output!r}")


@dataclass(frozen=True)
class OutputPlan:
    """What one request carries for structured output under a tier."""

    tools: tuple[ToolSpec, ...] = ()
    tool_choice: str | None = None
    output_format: OutputFormat | None = None
    system_note: str | None = None


@dataclass(frozen=True)
class Extraction:
    """A reply's structured output: `ok` with the validated `value`, or the `issues`."""

    ok: bool
    value: Any = None
    issues: list[Issue] = field(default_factory=list)


def plan(spec: OutputSpec, tier: StructuredTier, *, has_tools: bool) -> OutputPlan:
    """The request additions for `tier`; beside other tools the forced tier requires *a* call."""
    if tier == "native":
        return OutputPlan(output_format=OutputFormat(name=spec.name, schema=spec.schema))
    if tier == "tool":
        emit = ToolSpec(
            name=EMIT_RESULT,
            description="Return the final result. Call this exactly once, when you are done.",
            parameters=_tool_schema(spec.schema),
        )
        return OutputPlan(tools=(emit,), tool_choice="required" if has_tools else EMIT_RESULT)
    note = f"When you give your final answer, {PROMPT_NOTE}\n{canonical_json(spec.schema).decode()}"
    return OutputPlan(system_note=note)


def asks_for_output(request: ChatRequest) -> bool:
    """Whether `request` asks for structured output, under any tier (an output format, the `emit_result`
    tool, or the prompt tier's note in the system prompt)."""
    return (request.output_format is not None or any(t.name == EMIT_RESULT for t in request.tools)
            or PROMPT_NOTE in request.system)


def _wrapped(schema: Mapping[str, Any]) -> bool:
    return schema.get("type") != "object"


def _tool_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """Tool arguments must be an object: a non-object schema is wrapped under `result`."""
    if not _wrapped(schema):
        return schema
    return {"type": "object", "properties": {_WRAP_KEY: schema}, "required": [_WRAP_KEY]}


def from_call(spec: OutputSpec, call: ToolCallPart) -> Extraction:
    """The output carried by an `emit_result` call."""
    value: Any = call.args
    if _wrapped(spec.schema):
        if _WRAP_KEY not in call.args:
            return Extraction(False, issues=[_issue([_WRAP_KEY], "Field required", "missing")])
        got = validate(spec, call.args[_WRAP_KEY])
        # Issue locations follow the arguments the model wrote, which nest under `result`.
        issues = [{**i, "loc": [_WRAP_KEY, *i.get("loc", [])]} for i in got.issues]
        return Extraction(got.ok, value=got.value, issues=issues)
    return validate(spec, value)


def from_text(spec: OutputSpec, text: str) -> Extraction:
    """The output carried by a text reply (native and prompt tiers); code fences are tolerated."""
    found, value = parse_json(text)
    if not found:
        return Extraction(
            False, issues=[_issue([], "the reply holds no JSON value", "json_invalid")]
        )
    return validate(spec, value)


def validate(spec: OutputSpec, value: Any) -> Extraction:
    """Validate against the pydantic class (an instance results) or, for a dict, with `jsonschema`."""
    if spec.model_cls is not None:
        try:
            return Extraction(True, value=spec.model_cls.model_validate(value))
        except ValidationError as exc:
            return Extraction(False, issues=pydantic_issues(exc))
    issues = json_schema_issues(value, spec.schema)
    return Extraction(not issues, value=value if not issues else None, issues=issues)


_FENCE = re.compile(r"```[a-zA-Z0-9_-]*\s*\n?(.*?)```", re.DOTALL)


def parse_json(text: str) -> tuple[bool, Any]:
    """`(True, value)` for the first JSON found: whole text, a fenced block, a brace span."""
    candidates = [text.strip(), *(m.strip() for m in _FENCE.findall(text))]
    for opener, closer in (("{", "}"), ("[", "]")):
        start, end = text.find(opener), text.rfind(closer)
        if 0 <= start < end:
            candidates.append(text[start : end + 1])
    for candidate in candidates:
        if not candidate:
            continue
        try:
            return True, json.loads(candidate)
        except ValueError:
            continue
    return False, None


def reprompt_text(issues: list[Issue], tier: StructuredTier) -> str:
    """The message that asks the model to fix its output, listing every issue."""
    listed = "\n".join(f"- {format_issue(i)}" for i in issues) or "- (no details)"
    how = (
        f"Call the `{EMIT_RESULT}` tool with corrected arguments."
        if tier == "tool"
        else "Reply with only the corrected JSON value."
    )
    return f"Your output did not match the required schema:\n{listed}\n{how}"


def _issue(loc: list[Any], msg: str, type_: str) -> Issue:
    return {"loc": loc, "msg": msg, "type": type_}
