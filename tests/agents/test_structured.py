"""Structured output on each tier, re-prompts with issues, and exhaustion as schema-mismatch."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from loopkit import HooksDouble, HostDouble, make_spec, tool_results
from pydantic import BaseModel, Field, create_model

import tether
from tether.agents.loop import run_agent
from tether.agents.structured import EMIT_RESULT, output_spec, parse_json
from tether.contracts.errors import ConfigError
from tether.journal.canonical import schema_hash
from tether.models.fake import FakeModel, Reply, ToolCall
from tether.tools.definition import tool


class Verdict(BaseModel):
    score: float
    rationale: str


GOOD = {"score": 7.5, "rationale": "solid"}
GOOD_TEXT = '{"score": 7.5, "rationale": "solid"}'


async def test_native_tier_sends_the_schema_and_validates_the_text() -> None:
    fake = FakeModel(script=[Reply(text=GOOD_TEXT)], structured_output="native")
    result = await run_agent(
        make_spec(fake, output=output_spec(Verdict)), HostDouble(), HooksDouble()
    )
    assert result.status == "ok" and result.output == Verdict(**GOOD)
    request = fake.requests[0]
    assert request.output_format is not None
    assert request.output_format.schema_["required"] == ["score", "rationale"]
    assert request.tools == () and request.tool_choice == "auto"


async def test_tool_tier_forces_emit_result() -> None:
    fake = FakeModel(script=[Reply(tool_calls=[ToolCall(EMIT_RESULT, GOOD)])])
    result = await run_agent(
        make_spec(fake, output=output_spec(Verdict)), HostDouble(), HooksDouble()
    )
    assert result.status == "ok" and result.output == Verdict(**GOOD)
    request = fake.requests[0]
    assert request.tool_choice == EMIT_RESULT
    assert [t.name for t in request.tools] == [EMIT_RESULT]
    assert request.output_format is None


async def test_tool_tier_beside_other_tools_requires_a_call_and_keeps_the_tool_loop() -> None:
    @tool
    def lookup(q: str) -> str:
        """Look something up."""
        return "facts"

    script = [
        Reply(tool_calls=[ToolCall("lookup", {"q": "x"})]),
        Reply(tool_calls=[ToolCall(EMIT_RESULT, GOOD)]),
    ]
    fake = FakeModel(script=script)
    spec = make_spec(fake, output=output_spec(Verdict), tools=[lookup])
    result = await run_agent(spec, HostDouble(), HooksDouble())
    assert result.output == Verdict(**GOOD) and result.turns == 2
    assert fake.requests[0].tool_choice == "required"
    assert [t.name for t in fake.requests[0].tools] == ["lookup", EMIT_RESULT]


async def test_prompt_tier_puts_the_schema_in_the_system_prompt_and_tolerates_fences() -> None:
    fake = FakeModel(
        script=[Reply(text=f"Here you go:\n```json\n{GOOD_TEXT}\n```")], structured_output="prompt"
    )
    spec = make_spec(fake, output=output_spec(Verdict), system="You judge.")
    result = await run_agent(spec, HostDouble(), HooksDouble())
    assert result.output == Verdict(**GOOD)
    system = fake.requests[0].system
    assert system.startswith("You judge.") and '"rationale"' in system


async def test_a_dict_schema_is_validated_by_jsonschema() -> None:
    schema = {"type": "array", "items": {"type": "integer"}}
    script = [
        Reply(tool_calls=[ToolCall(EMIT_RESULT, {"result": [1, "two"]})]),
        Reply(tool_calls=[ToolCall(EMIT_RESULT, {"result": [1, 2]})]),
    ]
    fake = FakeModel(script=script)
    result = await run_agent(
        make_spec(fake, output=output_spec(schema)), HostDouble(), HooksDouble()
    )
    assert (result.status, result.output) == ("ok", [1, 2])
    assert fake.requests[0].tools[0].parameters["required"] == ["result"]
    retry = tool_results(fake.requests[1].messages)[0]
    assert retry.is_error and "result.1" in retry.content


async def test_an_invalid_output_is_re_prompted_with_its_issues_then_accepted() -> None:
    script = [Reply(text='{"score": "high"}'), Reply(text=GOOD_TEXT)]
    fake = FakeModel(script=script, structured_output="native")
    host = HostDouble()
    result = await run_agent(make_spec(fake, output=output_spec(Verdict)), host, HooksDouble())
    assert result.status == "ok" and result.output == Verdict(**GOOD)
    reprompt = fake.requests[1].messages[-1]
    assert reprompt.role == "user"
    assert "score" in reprompt.text_content and "rationale: Field required" in reprompt.text_content
    [event] = host.of_type("agent:schema-retry")
    assert event.attempt == 1 and {tuple(i.loc) for i in event.issues} == {
        ("score",),
        ("rationale",),
    }


async def test_an_invalid_emit_result_gets_the_issues_as_its_tool_result() -> None:
    script = [
        Reply(tool_calls=[ToolCall(EMIT_RESULT, {"score": 1})]),
        Reply(tool_calls=[ToolCall(EMIT_RESULT, GOOD)]),
    ]
    fake = FakeModel(script=script)
    result = await run_agent(
        make_spec(fake, output=output_spec(Verdict)), HostDouble(), HooksDouble()
    )
    assert result.output == Verdict(**GOOD)
    [feedback] = tool_results(fake.requests[1].messages)
    assert feedback.is_error and "rationale: Field required" in feedback.content


async def test_a_text_reply_on_the_tool_tier_is_re_prompted() -> None:
    script = [Reply(text="I think 7"), Reply(tool_calls=[ToolCall(EMIT_RESULT, GOOD)])]
    fake = FakeModel(script=script)
    result = await run_agent(
        make_spec(fake, output=output_spec(Verdict)), HostDouble(), HooksDouble()
    )
    assert result.output == Verdict(**GOOD)
    assert EMIT_RESULT in fake.requests[1].messages[-1].text_content


async def test_schema_retries_exhausted_settle_schema_mismatch_with_issues() -> None:
    fake = FakeModel(script=[Reply(text='{"score": "x"}')] * 5, structured_output="prompt")
    spec = make_spec(fake, output=output_spec(Verdict), schema_retries=2)
    result = await run_agent(spec, HostDouble(), HooksDouble())
    assert result.status == "error" and result.error is not None
    assert result.error.kind == "schema-mismatch"
    assert result.error.issues and {tuple(i["loc"]) for i in result.error.issues} == {
        ("score",),
        ("rationale",),
    }
    assert fake.calls == 3  # the answer plus two re-prompts; never a silent cast
    assert result.error.message == (
        "output failed validation after 2 re-prompts: score: Input should be a valid number, unable to parse "
        "string as a number; rationale: Field required"
    )


async def test_schema_mismatch_says_why_the_last_reply_failed_in_its_message() -> None:
    fake = FakeModel(script=[Reply(text="Paris, of course.")] * 3, structured_output="prompt")
    result = await run_agent(make_spec(fake, output=output_spec(Verdict)), HostDouble(), HooksDouble())
    assert result.error is not None and result.error.kind == "schema-mismatch"
    assert result.error.message == "output failed validation after 2 re-prompts: the reply holds no JSON value"


async def test_a_long_validation_reason_is_cut_to_300_characters_and_the_issues_keep_it_all() -> None:
    many = create_model("Many", **{f"field_{n:02}": (str, ...) for n in range(40)})  # type: ignore[call-overload]
    fake = FakeModel(script=[Reply(text="{}")] * 3, structured_output="prompt")
    result = await run_agent(make_spec(fake, output=output_spec(many)), HostDouble(), HooksDouble())
    assert result.error is not None and result.error.issues is not None and len(result.error.issues) == 40
    head = "output failed validation after 2 re-prompts: "
    assert result.error.message.startswith(head + "field_00: Field required; field_01: Field required")
    assert len(result.error.message) == len(head) + 300 and result.error.message.endswith("…")


async def test_a_budget_refusal_on_a_re_prompt_turn_names_the_extract_stage() -> None:
    fake = FakeModel(
        script=[Reply(text="not json"), Reply(text=GOOD_TEXT)], structured_output="native"
    )
    hooks = HooksDouble(refuse_on_turn=2)
    result = await run_agent(make_spec(fake, output=output_spec(Verdict)), HostDouble(), hooks)
    assert result.error is not None
    assert (result.status, result.error.kind, result.error.stage) == ("error", "budget", "extract")


async def test_the_tier_follows_the_model_that_serves() -> None:
    native = FakeModel("n", script=[Reply(error="transport")], structured_output="native")
    forced = FakeModel("t", script=[Reply(tool_calls=[ToolCall(EMIT_RESULT, GOOD)])])
    spec = make_spec(native, forced, output=output_spec(Verdict), retry=_one_attempt())
    result = await run_agent(spec, HostDouble(), HooksDouble())
    assert (result.output, result.served_by) == (Verdict(**GOOD), "t:m")
    assert native.requests[0].output_format is not None
    assert forced.requests[0].tool_choice == EMIT_RESULT


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"a": 1}', {"a": 1}),
        ('```json\n{"a": 1}\n```', {"a": 1}),
        ('Sure! {"a": 1} hope that helps', {"a": 1}),
        ("[1, 2]", [1, 2]),
    ],
)
def test_parse_json_tolerates_fences_and_prose(text: str, expected: Any) -> None:
    assert parse_json(text) == (True, expected)


def test_parse_json_reports_no_json() -> None:
    assert parse_json("no json here") == (False, None)


def test_schema_annotations_do_not_change_schema_hash() -> None:
    class A(BaseModel):
        score: float = Field(description="how good")
        rationale: str

    class B(BaseModel):
        """A differently documented twin."""

        score: float = Field(description="a completely different description", examples=[1.0])
        rationale: str = Field(title="Why")

    class C(BaseModel):
        score: int
        rationale: str

    def h(cls: type[BaseModel]) -> str | None:
        return schema_hash(output_spec(cls).schema)

    assert h(A) == h(B) == h(Verdict)
    assert h(C) != h(A)


def _one_attempt() -> Any:
    from tether.agents.host import RetryPolicy

    return RetryPolicy(attempts=1)


SCORED = {
    "type": "object",
    "properties": {
        "score": {"type": "integer", "maximum": 10},
        "kind": {"anyOf": [{"type": "string"}, {"type": "null"}]},
    },
    "required": ["score", "kind"],
}


@pytest.mark.parametrize(
    ("answer", "loc", "words"),
    [
        ({"score": 999, "kind": "bug"}, ["score"], "999 is greater than the maximum of 10"),
        ({"score": 3, "kind": 42}, ["kind"], "42 is not valid under any of the given schemas"),
    ],
)
async def test_a_dict_output_schema_enforces_bounds_and_combinators(
    answer: dict[str, Any], loc: list[str], words: str, tmp_path: Path
) -> None:
    fake = tether.models.fake("fake", script=[Reply(text=json.dumps(answer))] * 3, structured_output="prompt")
    engine = tether.Engine(models=[fake], routing={"loop": "fake:m"}, store=f"sqlite:///{tmp_path}/t.db")
    retries: list[Any] = []

    @tether.workflow
    async def scored(ctx: tether.Ctx) -> object:
        result = await ctx.agent("score it", output=SCORED, full=True)
        return result.model_dump(mode="json")

    handle = engine.start(scored, run_id="s")
    handle.on("agent:schema-retry", retries.append)
    out = await handle
    await engine.close()
    result = out.value
    assert result["status"] == "error" and result["error"]["kind"] == "schema-mismatch"
    assert [i["loc"] for i in result["error"]["issues"]] == [loc]
    assert words in result["error"]["issues"][0]["msg"]
    assert fake.calls == 3 and len(retries) == 2  # re-prompted twice with the issue, never accepted
    assert words in fake.requests[1].messages[-1].text_content


async def test_jsonschema_issues_keep_pydantic_locations_for_missing_and_extra_keys() -> None:
    schema = {**SCORED, "additionalProperties": False}
    script = [Reply(text='{"kind": null, "extra": 1}'), Reply(text='{"score": 2, "kind": null}')]
    fake = FakeModel(script=script, structured_output="native")
    host = HostDouble()
    result = await run_agent(make_spec(fake, output=output_spec(schema)), host, HooksDouble())
    assert (result.status, result.output) == ("ok", {"score": 2, "kind": None})
    [event] = host.of_type("agent:schema-retry")
    assert {(tuple(i.loc), i.type) for i in event.issues} == {
        (("score",), "missing"),
        (("extra",), "extra_forbidden"),
    }


def test_an_invalid_output_schema_is_refused_before_any_call() -> None:
    with pytest.raises(ConfigError, match="not a valid JSON schema"):
        output_spec({"type": "object", "properties": {"a": {"type": "integr"}}})
