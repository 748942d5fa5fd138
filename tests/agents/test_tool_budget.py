"""Tool budgets at the loop level: caps, units, notices, grants, the window and the reserve (SPEC §6)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import pytest
from loopkit import HooksDouble, HostDouble, JournalHost, make_spec, tool_results

from tether.agents.loop import run_agent
from tether.agents.state import LoopState
from tether.agents.tool_budget import (
    FinalizationReserve,
    FinalizationWindow,
    ToolBudget,
    ToolBudgetExtension,
    ToolUnits,
)
from tether.contracts.errors import ConfigError
from tether.contracts.messages import ChatRequest, Message
from tether.contracts.results import ToolBudgetSummary
from tether.models.fake import FakeModel, Reply, ToolCall
from tether.tools.definition import tool
from tether.tools.permissions import Permissions


@tool
def probe(n: int) -> str:
    """Look something up."""
    return f"fact {n}"


@tool
def record(n: int) -> str:
    """Write down a finding."""
    return f"recorded {n}"


@tool(units=3)
def crawl(n: int) -> str:
    """An expensive crawl."""
    return f"page {n}"


@tool(units=0)
def note(n: int) -> str:
    """Free bookkeeping."""
    return f"noted {n}"


class MoneyHooks(HooksDouble):
    """A budget double whose `remaining_usd()` is scripted."""

    def __init__(self, remaining: float | None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.remaining = remaining

    def remaining_usd(self) -> float | None:
        return self.remaining


def keeps_calling(*names: str, per_turn: int = 1, final: str = "done", turns: int = 100) -> Callable[..., Reply]:
    """A model that calls tools (fresh args every time, so never "no progress") for `turns` turns."""
    counter = iter(range(1, 10_000))

    def script(request: ChatRequest) -> Reply:
        answered = sum(1 for m in request.messages if m.role == "tool")
        if request.tool_choice == "none":
            return Reply(text="summary from what I have")
        if answered >= turns:
            return Reply(text=final)
        calls = [ToolCall(names[i % len(names)], {"n": next(counter)}) for i in range(per_turn)]
        return Reply(tool_calls=calls)

    return script


def texts(request: ChatRequest, prefix: str) -> list[str]:
    return [m.text_content for m in request.messages if m.role == "user" and prefix in m.text_content]


def count_in(messages: list[Message] | tuple[Message, ...], prefix: str) -> int:
    return sum(m.text_content.count(prefix) for m in messages if m.role == "user")


# -- configuration ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("build", "needle"),
    [
        (lambda: ToolBudget(max_tool_calls=-1), "max_tool_calls must be an integer >= 0"),
        (lambda: ToolBudget(max_tool_calls=True), "max_tool_calls"),
        (lambda: ToolUnits(max=-2), "tool_units.max must be a finite number >= 0"),
        (lambda: ToolUnits(max=5, costs={"x": -1}), "tool_units.costs['x']"),
        (lambda: ToolBudgetExtension(increment=0, max_extensions=1), "extension.increment"),
        (lambda: ToolBudgetExtension(increment=1, max_extensions=-1), "extension.max_extensions"),
        (lambda: ToolBudgetExtension(1, 1, min_headroom_usd=-0.5), "min_headroom_usd"),
        (lambda: FinalizationWindow(reserve_calls=0), "reserve_calls"),
        (lambda: FinalizationWindow(reserve_calls=1, allow="record"), "allow"),
        (lambda: FinalizationReserve(max_output_tokens=0), "max_output_tokens"),
        (lambda: ToolBudget(max_tool_calls=4, notices=(1.5,)), "a fraction in (0, 1]"),
        (lambda: ToolBudget(notices=True), "notices needs max_tool_calls or tool_units"),
        (lambda: ToolBudget(finalization_reserve=FinalizationReserve()), "finalization_reserve needs"),
        (lambda: ToolBudget(tool_units=ToolUnits(max=3), extension=ToolBudgetExtension(1, 1)), "set max_tool_calls"),
    ],
)
def test_invalid_tool_budget_config_is_a_config_error_naming_the_field(build: Callable[[], Any], needle: str) -> None:
    with pytest.raises(ConfigError, match="tool budget") as info:
        build()
    assert needle in info.value.message


async def test_tool_budget_must_be_a_tool_budget_object() -> None:
    fake = FakeModel(script=[Reply(text="x")])
    with pytest.raises(ConfigError, match=r"tether\.ToolBudget"):
        await run_agent(make_spec(fake, tool_budget={"max_tool_calls": 3}), HostDouble(), HooksDouble())


def test_notices_true_means_the_default_thresholds() -> None:
    assert ToolBudget(max_tool_calls=4, notices=True).thresholds == (0.5, 0.8)
    assert ToolBudget(max_tool_calls=4, notices=[0.8, 0.25, 0.8]).thresholds == (0.25, 0.8)
    assert ToolBudget(max_tool_calls=4).thresholds == ()


async def test_no_budget_and_an_empty_budget_carry_no_summary() -> None:
    for budget in (None, ToolBudget()):
        fake = FakeModel(script=keeps_calling("probe", turns=1))
        host = HostDouble()
        result = await run_agent(make_spec(fake, tools=[probe], tool_budget=budget), host, HooksDouble())
        assert (result.status, result.tool_budget) == ("ok", None)
        assert host.of_type("agent:end")[0].tool_budget is None


# -- max_tool_calls --------------------------------------------------------------------------------


async def test_expiry_mid_batch_skips_the_rest_and_settles_limit_with_the_limiter() -> None:
    fake = FakeModel(script=keeps_calling("probe", per_turn=3))
    host = HostDouble()
    spec = make_spec(fake, tools=[probe], tool_budget=ToolBudget(max_tool_calls=2))
    result = await run_agent(spec, host, HooksDouble())
    assert (result.status, result.output, fake.calls) == ("limit", None, 1)
    assert [args["n"] for _, args, *_ in host.executed] == [1, 2]
    assert result.tool_budget is not None
    assert result.tool_budget.model_dump(exclude_none=True) == {"used": 2, "cap": 2, "limiter": "max_tool_calls"}
    skipped = tool_results(host.stored.messages if host.stored else [])[-1]
    assert skipped.is_error and skipped.content.startswith("[skipped] tool budget exhausted (max_tool_calls")
    assert host.of_type("agent:end")[0].reason == "tool-budget"
    assert host.of_type("agent:end")[0].tool_budget == ToolBudgetSummary(used=2, cap=2, limiter="max_tool_calls")
    assert [e.outcome for e in host.of_type("tool:end") if not e.executed] == ["skipped"]


async def test_max_tool_calls_zero_forbids_tools() -> None:
    fake = FakeModel(script=keeps_calling("probe"))
    host = HostDouble()
    result = await run_agent(make_spec(fake, tools=[probe], tool_budget=ToolBudget(max_tool_calls=0)), host, HooksDouble())
    assert result.status == "limit" and host.executed == []
    assert result.tool_budget is not None and (result.tool_budget.used, result.tool_budget.cap) == (0, 0)


async def test_denied_invalid_and_unknown_calls_never_count() -> None:
    calls = [
        ToolCall("probe", {"n": "not a number"}),
        ToolCall("nope", {}),
        ToolCall("danger", {"n": 1}),
        ToolCall("probe", {"n": 1}),
        ToolCall("probe", {"n": 2}),
    ]

    @tool
    def danger(n: int) -> str:
        """Dangerous."""
        return "boom"

    fake = FakeModel(script=[Reply(tool_calls=calls), Reply(text="done")])
    spec = make_spec(
        fake,
        tools=[probe, danger],
        permissions=Permissions(deny=["danger"]),
        tool_budget=ToolBudget(max_tool_calls=2),
    )
    result = await run_agent(spec, HostDouble(), HooksDouble())
    assert (result.status, result.output) == ("ok", "done")
    assert result.tool_budget is not None and result.tool_budget.used == 2 and result.tool_budget.limiter is None


async def test_a_model_that_stops_at_the_cap_ends_ok() -> None:
    fake = FakeModel(script=keeps_calling("probe", turns=3))
    result = await run_agent(
        make_spec(fake, tools=[probe], tool_budget=ToolBudget(max_tool_calls=3)), HostDouble(), HooksDouble()
    )
    assert (result.status, result.output) == ("ok", "done")
    assert result.tool_budget is not None and (result.tool_budget.used, result.tool_budget.cap) == (3, 3)


# -- tool units ------------------------------------------------------------------------------------


async def test_tool_units_weigh_calls_by_cost_and_free_tools_never_exhaust_them() -> None:
    # probe costs 2 (budget costs), crawl 3 (its own units=), note 0 (free); the budget is 6 units.
    calls = [ToolCall("probe", {"n": 1}), ToolCall("note", {"n": 1}), ToolCall("crawl", {"n": 1})]
    calls2 = [ToolCall("note", {"n": 2}), ToolCall("probe", {"n": 2}), ToolCall("note", {"n": 3})]
    fake = FakeModel(script=[Reply(tool_calls=calls), Reply(tool_calls=calls2), Reply(text="never")])
    host = HostDouble()
    budget = ToolBudget(tool_units=ToolUnits(max=6, costs={"probe": 2}))
    result = await run_agent(make_spec(fake, tools=[probe, crawl, note], tool_budget=budget), host, HooksDouble())
    assert result.status == "limit"
    assert [name for name, *_ in host.executed] == ["probe", "note", "crawl", "note"]
    assert result.tool_budget is not None
    assert result.tool_budget.model_dump(exclude_none=True) == {
        "used": 4,
        "units_used": 5.0,
        "units_max": 6.0,
        "limiter": "tool_units",
    }
    last = tool_results(host.stored.messages if host.stored else [])
    assert last[-2].content.startswith("[skipped] tool budget exhausted (tool_units: 5 of 6 tool units used")
    assert last[-1].content.startswith("[skipped]")  # the free call after the expiry is not run either


# -- notices ---------------------------------------------------------------------------------------


async def test_notices_fire_once_per_threshold_after_the_batch_results() -> None:
    fake = FakeModel(script=keeps_calling("probe", turns=4))
    host = HostDouble()
    budget = ToolBudget(max_tool_calls=5, notices=(0.2, 0.4, 0.8))
    result = await run_agent(make_spec(fake, tools=[probe], tool_budget=budget), host, HooksDouble())
    assert result.status == "ok"
    assert result.tool_budget is not None and result.tool_budget.notices_fired == [0.2, 0.4, 0.8]
    last = fake.requests[-1].messages
    notices = [i for i, m in enumerate(last) if m.role == "user" and "Tool budget notice" in m.text_content]
    assert [last[i].text_content for i in notices] == [
        "Tool budget notice: 1 of 5 tool calls used; 4 left.",
        "Tool budget notice: 2 of 5 tool calls used; 3 left.",
        "Tool budget notice: 4 of 5 tool calls used; 1 left.",
    ]
    assert all(last[i - 1].role == "tool" for i in notices)  # right after that batch's results


async def test_several_thresholds_crossed_in_one_batch_make_one_message() -> None:
    fake = FakeModel(script=keeps_calling("probe", per_turn=4, turns=1))
    budget = ToolBudget(max_tool_calls=5, notices=True)
    result = await run_agent(make_spec(fake, tools=[probe], tool_budget=budget), HostDouble(), HooksDouble())
    assert result.tool_budget is not None and result.tool_budget.notices_fired == [0.5, 0.8]
    assert count_in(fake.requests[-1].messages, "Tool budget notice") == 1


async def test_notices_ride_the_checkpoint_and_never_refire_on_resume() -> None:
    fake = FakeModel(script=keeps_calling("probe", turns=3))
    host = HostDouble()
    budget = ToolBudget(max_tool_calls=4, notices=(0.5,))
    spec = make_spec(fake, tools=[probe], tool_budget=budget)
    await run_agent(spec, host, HooksDouble())
    # resume from the checkpoint taken after the batch that fired the notice
    after_notice = next(s for s in host.saved if s.tool_budget.notices_fired and s.pending is None)
    fake2 = FakeModel(script=keeps_calling("probe", turns=3))
    result = await run_agent(dataclasses.replace(spec, models=make_spec(fake2).models),
                             HostDouble(checkpoint=after_notice), HooksDouble())
    assert result.tool_budget is not None and result.tool_budget.notices_fired == [0.5]
    assert count_in(fake2.requests[-1].messages, "Tool budget notice") == 1


# -- extension grants ------------------------------------------------------------------------------


async def test_a_grant_is_a_decision_taken_before_the_cap_lifts() -> None:
    fake = FakeModel(script=keeps_calling("probe", per_turn=3, turns=1))
    host = JournalHost()
    budget = ToolBudget(max_tool_calls=2, extension=ToolBudgetExtension(increment=2, max_extensions=1))
    result = await run_agent(make_spec(fake, tools=[probe], tool_budget=budget), host, HooksDouble())
    assert (result.status, result.output) == ("ok", "done")
    assert host.order == ["run:probe", "run:probe", "decide:tool-grant", "run:probe"]
    assert host.decided("tool-grant") == [
        {"grant": 1, "granted": True, "increment": 2, "cap": 4, "used": 2, "remaining_usd": None,
         "reason": "no USD ceiling"}
    ]
    assert result.tool_budget is not None
    assert result.tool_budget.model_dump(exclude_none=True) == {"used": 3, "cap": 4, "extensions_granted": 1}
    assert texts(fake.requests[-1], "Tool budget extended") == [
        "Tool budget extended: 2 more tool calls granted (extension 1 of 1); the cap is now 4 and 2 are used."
    ]


async def test_grants_stop_at_max_extensions_then_the_agent_settles_limit() -> None:
    fake = FakeModel(script=keeps_calling("probe"))
    host = JournalHost()
    budget = ToolBudget(max_tool_calls=1, extension=ToolBudgetExtension(increment=1, max_extensions=2))
    result = await run_agent(make_spec(fake, tools=[probe], tool_budget=budget), host, HooksDouble())
    assert result.status == "limit"
    assert result.tool_budget is not None
    assert result.tool_budget.model_dump(exclude_none=True) == {
        "used": 3, "cap": 3, "extensions_granted": 2, "limiter": "max_tool_calls"
    }
    assert [p["grant"] for p in host.decided("tool-grant")] == [1, 2]
    assert count_in(fake.requests[-1].messages, "Tool budget extended") == 2


async def test_an_unused_extension_reports_zero_grants() -> None:
    fake = FakeModel(script=keeps_calling("probe", turns=1))
    budget = ToolBudget(max_tool_calls=3, extension=ToolBudgetExtension(increment=1, max_extensions=2))
    result = await run_agent(make_spec(fake, tools=[probe], tool_budget=budget), JournalHost(), HooksDouble())
    assert result.tool_budget is not None and result.tool_budget.extensions_granted == 0


@pytest.mark.parametrize(
    ("remaining", "min_headroom", "granted"),
    [(0.0, None, False), (0.0, 0.0, False), (0.4, 0.5, False), (0.5, 0.5, True), (0.01, None, True), (None, 5.0, True)],
)
async def test_a_grant_needs_money_left(remaining: float | None, min_headroom: float | None, granted: bool) -> None:
    fake = FakeModel(script=keeps_calling("probe"))
    host = JournalHost()
    ext = ToolBudgetExtension(increment=1, max_extensions=1, min_headroom_usd=min_headroom)
    budget = ToolBudget(max_tool_calls=1, extension=ext)
    result = await run_agent(make_spec(fake, tools=[probe], tool_budget=budget), host, MoneyHooks(remaining))
    assert result.status == "limit"
    decision = host.decided("tool-grant")[0]
    assert decision["granted"] is granted and decision["remaining_usd"] == remaining
    assert result.tool_budget is not None
    assert result.tool_budget.extensions_granted == (1 if granted else 0)
    assert len(host.executed) == (2 if granted else 1)
    assert count_in(fake.requests[-1].messages, "Tool budget extended") == (1 if granted else 0)


async def test_a_journaled_grant_is_read_back_on_resume_never_redecided_nor_reannounced() -> None:
    fake = FakeModel(script=keeps_calling("probe", per_turn=3, turns=1))
    host = JournalHost()
    budget = ToolBudget(max_tool_calls=2, extension=ToolBudgetExtension(increment=2, max_extensions=1))
    spec = make_spec(fake, tools=[probe], tool_budget=budget)
    uninterrupted = await run_agent(spec, host, HooksDouble())
    # "crash" right after the decision: the checkpoint saved just before it is the last one.
    before = next(s for s in host.saved if s.pending is not None and s.tool_calls == 2)
    crashed = JournalHost(journal=host.journal, checkpoint=before)
    fake2 = FakeModel(script=keeps_calling("probe", per_turn=3, turns=1))
    money_gone = MoneyHooks(0.0)  # a re-decision now would refuse: reading back must win
    result = await run_agent(make_spec(fake2, tools=[probe], tool_budget=budget), crashed, money_gone)
    assert crashed.appended == [] and len(host.decided("tool-grant")) == 1
    assert [args["n"] for _, args, *_ in crashed.executed] == [3]
    assert result.tool_budget == uninterrupted.tool_budget
    assert count_in(fake2.requests[-1].messages, "Tool budget extended") == 1


async def test_a_second_grant_after_resume_is_a_new_decision_not_the_first_one_again() -> None:
    fake = FakeModel(script=keeps_calling("probe"))
    host = JournalHost()
    budget = ToolBudget(max_tool_calls=1, extension=ToolBudgetExtension(increment=1, max_extensions=2))
    spec = make_spec(fake, tools=[probe], tool_budget=budget)
    await run_agent(spec, host, HooksDouble())
    after_first = next(s for s in host.saved if s.tool_budget.grants == 1 and s.pending is None)
    # the journal as it was when that checkpoint was taken: only the first grant
    journal = [(n, p) for n, p in host.journal if p.get("grant") == 1]
    resumed = JournalHost(journal=journal, checkpoint=after_first)
    fake2 = FakeModel(script=keeps_calling("probe"))
    result = await run_agent(make_spec(fake2, tools=[probe], tool_budget=budget), resumed, HooksDouble())
    assert [p["grant"] for p in resumed.decided("tool-grant")] == [1, 2]
    assert resumed.appended == ["tool-grant"]
    assert result.tool_budget is not None and result.tool_budget.extensions_granted == 2


# -- the finalization window -----------------------------------------------------------------------


async def test_inside_the_window_only_allowed_tools_run_and_refusals_do_not_count() -> None:
    script = [
        Reply(tool_calls=[ToolCall("probe", {"n": 1}), ToolCall("probe", {"n": 2})]),
        Reply(tool_calls=[ToolCall("probe", {"n": 3}), ToolCall("record", {"n": 1})]),
        Reply(text="done"),
    ]
    fake = FakeModel(script=script)
    host = JournalHost()
    budget = ToolBudget(max_tool_calls=4, finalization_window=FinalizationWindow(reserve_calls=2, allow=["record"]))
    result = await run_agent(make_spec(fake, tools=[probe, record], tool_budget=budget), host, HooksDouble())
    assert (result.status, result.output) == ("ok", "done")
    assert [name for name, *_ in host.executed] == ["probe", "probe", "record"]
    assert result.tool_budget is not None
    assert result.tool_budget.model_dump(exclude_none=True) == {
        "used": 3, "cap": 4, "finalization_window_entered": True
    }
    refused = tool_results(fake.requests[2].messages)[2]
    assert refused.is_error and refused.content.startswith("[refused] finalization window: 'probe'")
    assert [p["left"] for p in host.decided("finalization-window")] == [2]
    assert len(texts(fake.requests[1], "Finalization window")) == 1  # announced after the crossing batch
    assert count_in(fake.requests[2].messages, "Finalization window") == 1
    assert [e.guard for e in host.of_type("tool:end") if e.outcome == "refused"] == ["finalization-window"]


async def test_the_window_entry_is_a_decision_at_the_moment_it_fires_mid_batch() -> None:
    calls = [ToolCall("probe", {"n": 1}), ToolCall("probe", {"n": 2}), ToolCall("record", {"n": 1})]
    fake = FakeModel(script=[Reply(tool_calls=calls), Reply(text="done")])
    host = JournalHost()
    budget = ToolBudget(max_tool_calls=2, finalization_window=FinalizationWindow(reserve_calls=1, allow=["record"]))
    await run_agent(make_spec(fake, tools=[probe, record], tool_budget=budget), host, HooksDouble())
    assert host.order == ["run:probe", "decide:finalization-window", "run:record"]


async def test_the_window_stays_entered_when_a_grant_moves_the_counts_back_out() -> None:
    fake = FakeModel(script=keeps_calling("probe", turns=3))
    host = JournalHost()
    budget = ToolBudget(
        max_tool_calls=2,
        extension=ToolBudgetExtension(increment=3, max_extensions=1),
        finalization_window=FinalizationWindow(reserve_calls=1, allow=["probe"]),
    )
    result = await run_agent(make_spec(fake, tools=[probe], tool_budget=budget), host, HooksDouble())
    assert result.status == "ok"
    assert result.tool_budget is not None
    assert result.tool_budget.model_dump(exclude_none=True) == {
        "used": 3, "cap": 5, "extensions_granted": 1, "finalization_window_entered": True
    }
    assert len(host.decided("finalization-window")) == 1
    assert count_in(fake.requests[-1].messages, "Finalization window") == 1


async def test_a_units_only_window_measures_units() -> None:
    script = [
        Reply(tool_calls=[ToolCall("probe", {"n": 1})]),
        Reply(tool_calls=[ToolCall("probe", {"n": 2}), ToolCall("note", {"n": 1})]),
        Reply(text="done"),
    ]
    fake = FakeModel(script=script)
    budget = ToolBudget(
        tool_units=ToolUnits(max=4, costs={"probe": 2}),
        finalization_window=FinalizationWindow(reserve_calls=2, allow=["note"]),
    )
    host = JournalHost()
    result = await run_agent(make_spec(fake, tools=[probe, note], tool_budget=budget), host, HooksDouble())
    assert [name for name, *_ in host.executed] == ["probe", "note"]
    assert result.tool_budget is not None
    assert result.tool_budget.model_dump(exclude_none=True) == {
        "used": 2, "units_used": 2.0, "units_max": 4.0, "finalization_window_entered": True
    }


async def test_a_model_that_ignores_the_window_stops_for_no_progress_instead_of_burning_max_turns() -> None:
    fake = FakeModel(script=keeps_calling("probe"))
    host = JournalHost()
    budget = ToolBudget(max_tool_calls=3, finalization_window=FinalizationWindow(reserve_calls=1, allow=["record"]))
    spec = make_spec(fake, tools=[probe, record], tool_budget=budget, no_progress_turns=3)
    result = await run_agent(spec, host, HooksDouble())
    assert result.status == "limit" and host.of_type("agent:end")[0].reason == "no-progress"
    assert len(host.executed) == 2 and fake.calls == 5  # two calls ran, then three refused batches
    assert result.tool_budget is not None and result.tool_budget.limiter is None


# -- the finalization reserve ----------------------------------------------------------------------


async def test_the_reserve_runs_one_tool_less_summary_turn_whose_text_is_the_output() -> None:
    fake = FakeModel(script=keeps_calling("probe", per_turn=2))
    host = HostDouble()
    budget = ToolBudget(max_tool_calls=3, finalization_reserve=FinalizationReserve(max_output_tokens=200))
    result = await run_agent(make_spec(fake, tools=[probe], tool_budget=budget), host, HooksDouble())
    assert (result.status, result.output) == ("limit", "summary from what I have")
    assert result.tool_budget is not None
    assert result.tool_budget.model_dump(exclude_none=True) == {
        "used": 3, "cap": 3, "finalization_reserve_used": True, "limiter": "max_tool_calls"
    }
    summary = fake.requests[-1]
    # the tools stay defined (Anthropic refuses tool history without them); "none" forbids calling them
    assert ([t.name for t in summary.tools], summary.tool_choice, summary.max_output_tokens) == (["probe"], "none", 200)
    answered = tool_results(summary.messages)
    assert [r.content for r in answered] == ["fact 1", "fact 2", "fact 3", answered[3].content]
    assert answered[3].is_error and answered[3].content.startswith("[skipped]")
    assert summary.messages[-1].role == "user" and "Do not call tools" in summary.messages[-1].text_content
    assert (fake.calls, result.turns) == (3, 3)
    assert host.of_type("agent:end")[0].tool_budget.finalization_reserve_used is True


async def test_tool_calls_in_the_summary_reply_are_dropped() -> None:
    def script(request: ChatRequest) -> Reply:
        return Reply(text="final words", tool_calls=[ToolCall("probe", {"n": len(request.messages)})])

    fake = FakeModel(script=script)
    host = HostDouble()
    budget = ToolBudget(max_tool_calls=0, finalization_reserve=FinalizationReserve())
    result = await run_agent(make_spec(fake, tools=[probe], tool_budget=budget), host, HooksDouble())
    assert (result.status, result.output, host.executed) == ("limit", "final words", [])
    assert host.stored is not None and host.stored.messages[-1].tool_calls == []


async def test_the_summary_turn_is_still_under_the_budget_guard() -> None:
    fake = FakeModel(script=keeps_calling("probe"))
    budget = ToolBudget(max_tool_calls=1, finalization_reserve=FinalizationReserve())
    hooks = HooksDouble(refuse_on_turn=3)  # the guard refuses the third model call: the summary
    result = await run_agent(make_spec(fake, tools=[probe], tool_budget=budget), HostDouble(), hooks)
    assert result.status == "error" and result.error is not None
    assert (result.error.kind, result.error.stage) == ("budget", "reserve-summary")
    assert fake.calls == 2
    assert result.tool_budget is not None and result.tool_budget.limiter is None


async def test_a_crash_before_the_summary_reply_resumes_into_the_summary_turn_only() -> None:
    fake = FakeModel(script=keeps_calling("probe"))
    host = HostDouble()
    budget = ToolBudget(max_tool_calls=1, finalization_reserve=FinalizationReserve())
    spec = make_spec(fake, tools=[probe], tool_budget=budget)
    await run_agent(spec, host, HooksDouble())
    prompted = next(s for s in host.saved if s.tool_budget.reserve_prompted)
    fake2 = FakeModel(script=keeps_calling("probe"))
    result = await run_agent(make_spec(fake2, tools=[probe], tool_budget=budget),
                             HostDouble(checkpoint=prompted), HooksDouble())
    assert (result.status, result.output, fake2.calls) == ("limit", "summary from what I have", 1)
    assert count_in(fake2.requests[0].messages, "Do not call tools") == 1


def test_loop_state_without_budget_fields_still_loads() -> None:
    old = LoopState.start("hi").model_dump(mode="json")
    del old["tool_budget"]
    assert LoopState.model_validate(old).tool_budget.grants == 0
