"""What the loop does with each finish reason: cuts, refusals, pauses, empty replies and failover."""

from __future__ import annotations

from typing import Any

from loopkit import HooksDouble, HostDouble, JournalHost, make_spec

from tether.agents.dispatch import FAILOVER_DECISION
from tether.agents.host import OutputSpec
from tether.agents.loop import MAX_PAUSE_CONTINUATIONS, run_agent
from tether.agents.tool_budget import FinalizationReserve, ToolBudget
from tether.contracts.messages import ChatRequest
from tether.models.fake import FakeModel, Reply, ToolCall
from tether.tools.definition import tool

ran: list[dict[str, Any]] = []


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    ran.append({"a": a, "b": b})
    return a + b


SCORE = OutputSpec(schema={"type": "object", "properties": {"score": {"type": "integer"}}, "required": ["score"]})


async def test_complete_tool_calls_of_a_cut_turn_never_run() -> None:
    ran.clear()
    fake = FakeModel(script=[Reply(text="Adding.", tool_calls=[ToolCall("add", {"a": 1, "b": 2})],
                                   finish_reason="max_tokens")])
    host = HostDouble()
    result = await run_agent(make_spec(fake, tools=[add]), host, HooksDouble())
    assert ran == [] and host.executed == []
    assert (result.status, result.output, result.finish_reason, result.error) == ("limit", "Adding.", "max_tokens", None)
    assert host.of_type("agent:end")[0].reason == "max-tokens"


async def test_a_cut_forced_tool_output_is_re_prompted_never_accepted() -> None:
    fake = FakeModel(script=[
        Reply(tool_calls=[ToolCall("emit_result", {"score": 3})], finish_reason="max_tokens"),
        Reply(tool_calls=[ToolCall("emit_result", {"score": 4})]),
    ])
    result = await run_agent(make_spec(fake, output=SCORE), HostDouble(), HooksDouble())
    assert (result.status, result.output, fake.calls) == ("ok", {"score": 4}, 2)
    reprompt = fake.requests[1].messages[-1]
    assert reprompt.role == "user" and "cut by the output limit" in reprompt.text_content


async def test_cut_structured_output_settles_schema_mismatch_once_the_re_prompts_are_spent() -> None:
    fake = FakeModel(script=[Reply(text='{"sco', finish_reason="max_tokens")] * 3, structured_output="prompt")
    result = await run_agent(make_spec(fake, output=SCORE), HostDouble(), HooksDouble())
    assert result.status == "error" and result.error is not None
    assert result.error.kind == "schema-mismatch" and result.error.issues
    assert result.error.issues[0]["type"] == "truncated" and fake.calls == 3


async def test_a_cut_without_a_budget_clamp_carries_no_budget_error() -> None:
    fake = FakeModel(script=[Reply(text="x" * 400)])
    result = await run_agent(make_spec(fake, max_output_tokens=10), HostDouble(), HooksDouble(affordable=50))
    assert (result.status, result.finish_reason, result.error) == ("limit", "max_tokens", None)


async def test_a_cut_at_the_clamped_limit_is_a_budget_stop_with_its_stage() -> None:
    fake = FakeModel(script=[Reply(text="x" * 400)])
    result = await run_agent(make_spec(fake), HostDouble(), HooksDouble(affordable=10))
    assert result.status == "limit" and result.error is not None
    assert (result.error.kind, result.error.stage) == ("budget", "loop")
    assert result.output and set(result.output) == {"x"}


async def test_a_reserve_summary_cut_by_the_budget_names_the_reserve_stage() -> None:
    def script(request: ChatRequest) -> Reply:
        if request.tool_choice == "none":
            return Reply(text="summary " * 200)
        return Reply(tool_calls=[ToolCall("add", {"a": len(request.messages), "b": 1})])

    budget = ToolBudget(max_tool_calls=1, finalization_reserve=FinalizationReserve(max_output_tokens=200))
    fake = FakeModel(script=script)
    result = await run_agent(make_spec(fake, tools=[add], tool_budget=budget), HostDouble(), HooksDouble(affordable=30))
    assert (result.status, result.finish_reason) == ("limit", "max_tokens")
    assert result.error is not None and (result.error.kind, result.error.stage) == ("budget", "reserve-summary")


async def test_a_refusal_is_a_terminal_error_and_never_fails_over() -> None:
    primary = FakeModel("p", script=[Reply(text="No.", finish_reason="refusal")])
    backup = FakeModel("b", script=[Reply(text="never")])
    result = await run_agent(make_spec(primary, backup), HostDouble(), HooksDouble())
    assert (result.status, result.finish_reason, backup.calls) == ("error", "refusal", 0)
    assert result.error is not None and result.error.kind == "terminal" and '"No."' in result.error.message


async def test_a_content_filter_stop_is_a_terminal_error() -> None:
    fake = FakeModel(script=[Reply(text="", finish_reason="content_filter")])
    result = await run_agent(make_spec(fake), HostDouble(), HooksDouble())
    assert (result.status, result.finish_reason) == ("error", "content_filter")
    assert result.error is not None and "content filter" in result.error.message


async def test_paused_replies_are_continued_a_bounded_number_of_times() -> None:
    fake = FakeModel(script=[Reply(text=f"part {n}. ", finish_reason="pause") for n in range(10)])
    result = await run_agent(make_spec(fake), HostDouble(), HooksDouble())
    assert fake.calls == MAX_PAUSE_CONTINUATIONS + 1
    assert (result.status, result.finish_reason) == ("limit", "pause")
    continued = fake.requests[1].messages[-1]
    assert continued.role == "assistant" and continued.text_content == "part 0. "


async def test_a_paused_reply_then_an_answer_is_ok() -> None:
    fake = FakeModel(script=[Reply(text="Searching. ", finish_reason="pause"), Reply(text="Found it.")])
    result = await run_agent(make_spec(fake), HostDouble(), HooksDouble())
    assert (result.status, result.output, result.finish_reason, result.turns) == ("ok", "Found it.", "stop", 2)


async def test_an_empty_reply_is_re_asked_once_then_settles_terminal_no_content() -> None:
    fake = FakeModel(script=[Reply(text="")] * 5)
    result = await run_agent(make_spec(fake, no_progress_turns=3), HostDouble(), HooksDouble())
    assert (result.status, fake.calls) == ("error", 2)
    assert result.error is not None and result.error.kind == "terminal" and "no content" in result.error.message


async def test_a_reply_of_only_unused_item_types_counts_as_empty() -> None:
    thinking = {"type": "thinking", "thinking": "hmm", "signature": "s"}
    fake = FakeModel(script=[Reply(raw=[thinking])] * 3)
    result = await run_agent(make_spec(fake), HostDouble(), HooksDouble())
    assert (result.status, fake.calls) == ("error", 2)


async def test_each_failover_is_journaled_once_and_a_resume_passes_over_the_ones_it_holds() -> None:
    p = FakeModel("p", script=[Reply(error="transport", message="reset")] * 3)
    b = FakeModel("b", script=[Reply(error="rate-limit", message="slow")] * 3)
    c = FakeModel("c", script=[Reply(text="from c")])
    host = JournalHost()
    result = await run_agent(make_spec(p, b, c), host, HooksDouble())
    assert (result.status, result.output, result.served_by) == ("ok", "from c", "c:m")
    assert [(d["failed"], d["kind"], d["served_by"]) for d in host.decided(FAILOVER_DECISION)] == [
        ("p:m", "transport", "b:m"), ("b:m", "rate-limit", "c:m")
    ]

    # A crash after the first failover's checkpoint: the resume starts on b, reads p->b past, journals b->c.
    after_first = next(s for s in host.saved if s.model_index == 1)
    resumed = JournalHost(journal=host.journal[:1], checkpoint=after_first)
    p2, b2 = FakeModel("p", script=[]), FakeModel("b", script=[Reply(error="transport")] * 3)
    c2 = FakeModel("c", script=[Reply(text="from c")])
    again = await run_agent(make_spec(p2, b2, c2), resumed, HooksDouble())
    assert (again.status, again.served_by, p2.calls) == ("ok", "c:m", 0)
    assert [d["failed"] for d in resumed.decided(FAILOVER_DECISION)] == ["p:m", "b:m"]
    assert resumed.appended == [FAILOVER_DECISION]


async def test_the_journaled_failover_target_wins_on_replay() -> None:
    p = FakeModel("p", script=[Reply(error="transport")] * 3)
    b, c = FakeModel("b", script=[Reply(text="from b")]), FakeModel("c", script=[Reply(text="from c")])
    journaled = {"from_index": 0, "failed": "p:m", "kind": "transport", "why": "x", "served_by": "c:m", "turn": 1}
    host = JournalHost(journal=[(FAILOVER_DECISION, journaled)])
    result = await run_agent(make_spec(p, b, c), host, HooksDouble())
    assert (result.output, b.calls, host.appended) == ("from c", 0, [])
