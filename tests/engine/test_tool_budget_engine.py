"""Tool budgets through the engine: every `ToolBudgetSummary` field live and after replay (SPEC §6)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tether
from tether.contracts.entries import JournalEntry
from tether.contracts.events import AgentEnd
from tether.contracts.messages import ChatRequest
from tether.testing import Reply, ToolCall

PRICES = {"m": tether.Price(input=1.0, output=2.0)}


@tether.tool
def probe(n: int) -> str:
    """Look something up."""
    return f"fact {n}"


@tether.tool
def record(n: int) -> str:
    """Write down a finding."""
    return f"recorded {n}"


def calls_tools(*names: str, turns: int, per_turn: int = 1, usage: tuple[int, int] = (100, 20)) -> Callable[..., Reply]:
    """Call tools (fresh args each time) for `turns` turns, then answer; the summary turn summarizes."""

    def script(request: ChatRequest) -> Reply:
        answered = sum(1 for m in request.messages if m.role == "tool")
        if request.tool_choice == "none":
            return Reply(text="summary of the findings", input_tokens=usage[0], output_tokens=usage[1])
        if answered >= turns:
            return Reply(text="final answer", input_tokens=usage[0], output_tokens=usage[1])
        calls = [ToolCall(names[(answered + i) % len(names)], {"n": answered * per_turn + i}) for i in range(per_turn)]
        return Reply(tool_calls=calls, input_tokens=usage[0], output_tokens=usage[1])

    return script


@dataclass
class Twice:
    """One agent run live, then the same run resumed (replayed from its journal)."""

    live: tether.AgentResult
    replayed: tether.AgentResult
    live_end: AgentEnd
    replayed_end: AgentEnd
    model: Any
    calls_after_live: int
    journal: list[JournalEntry] = field(default_factory=list)

    def decisions(self, name: str) -> list[dict[str, Any]]:
        return [
            e.value["payload"]
            for e in self.journal
            if e.kind == "decision" and isinstance(e.value, dict) and e.value.get("decision") == name
        ]


async def run_twice(
    tmp_path: Path,
    script: Callable[..., Reply],
    budget: tether.ToolBudget,
    *,
    tools: tuple[tether.Tool, ...] = (probe,),
    replay_budget: tether.ToolBudget | None = None,
    **run_options: Any,
) -> Twice:
    model = tether.models.fake("fake", script=script, prices=PRICES)
    engine = tether.Engine(models=[model], routing={"loop": "fake:m"}, store=f"sqlite:///{tmp_path}/t.db")
    results: list[tether.AgentResult] = []
    budgets = [budget, replay_budget or budget]

    @tether.workflow(name="researcher")
    async def researcher(ctx: tether.Ctx) -> str:
        result = await ctx.agent("research the repo", tools=list(tools), tool_budget=budgets[len(results)], full=True)
        results.append(result)
        return str(result.status)

    ends: list[list[AgentEnd]] = [[], []]
    first = engine.start(researcher, run_id="tb", **run_options)
    first.on("agent:end", ends[0].append)
    await first
    calls = model.calls
    second = engine.start(researcher, run_id="tb")  # a known run id resumes it
    second.on("agent:end", ends[1].append)
    await second
    journal = await engine.inspect("tb")
    await engine.close()
    assert model.calls == calls, "the replay must not call the model"
    return Twice(
        results[0], results[1], ends[0][0], ends[1][0], model, calls, journal
    )


# -- one test per ToolBudgetSummary field, live and after replay ------------------------------------


async def test_used_counts_executed_calls_live_and_after_replay(tmp_path: Path) -> None:
    twice = await run_twice(tmp_path, calls_tools("probe", turns=2, per_turn=2), tether.ToolBudget(max_tool_calls=9))
    assert twice.live.status == twice.replayed.status == "ok"
    assert twice.live.tool_budget is not None and twice.replayed.tool_budget is not None
    assert twice.live.tool_budget.used == twice.replayed.tool_budget.used == 4
    assert twice.replayed.replayed and not twice.live.replayed


async def test_cap_is_the_effective_cap_with_grants_live_and_after_replay(tmp_path: Path) -> None:
    budget = tether.ToolBudget(max_tool_calls=2, extension=tether.ToolBudgetExtension(increment=3, max_extensions=2))
    twice = await run_twice(tmp_path, calls_tools("probe", turns=3), budget)
    assert twice.live.tool_budget is not None and twice.replayed.tool_budget is not None
    assert twice.live.tool_budget.cap == twice.replayed.tool_budget.cap == 5


async def test_cap_is_none_when_only_units_bound_the_loop(tmp_path: Path) -> None:
    budget = tether.ToolBudget(tool_units=tether.ToolUnits(max=10))
    twice = await run_twice(tmp_path, calls_tools("probe", turns=1), budget)
    assert twice.live.tool_budget is not None and twice.replayed.tool_budget is not None
    assert twice.live.tool_budget.cap is None and twice.replayed.tool_budget.cap is None
    assert twice.replayed.tool_budget.used == 1


async def test_units_used_and_units_max_are_live_only(tmp_path: Path) -> None:
    budget = tether.ToolBudget(tool_units=tether.ToolUnits(max=10, costs={"probe": 3}))
    twice = await run_twice(tmp_path, calls_tools("probe", turns=2), budget)
    assert twice.live.tool_budget is not None and twice.replayed.tool_budget is not None
    assert (twice.live.tool_budget.units_used, twice.live.tool_budget.units_max) == (6.0, 10.0)
    assert (twice.replayed.tool_budget.units_used, twice.replayed.tool_budget.units_max) == (None, None)


async def test_extensions_granted_is_durable_and_each_grant_is_one_journaled_decision(tmp_path: Path) -> None:
    budget = tether.ToolBudget(max_tool_calls=1, extension=tether.ToolBudgetExtension(increment=1, max_extensions=3))
    twice = await run_twice(tmp_path, calls_tools("probe", turns=3), budget)
    assert twice.live.tool_budget is not None and twice.replayed.tool_budget is not None
    assert twice.live.tool_budget.extensions_granted == twice.replayed.tool_budget.extensions_granted == 2
    grants = twice.decisions("tool-grant")
    assert [(g["grant"], g["granted"]) for g in grants] == [(1, True), (2, True)]
    agent = next(e for e in twice.journal if e.kind == "agent" and e.status == "running")
    scoped = [e for e in twice.journal if e.kind == "decision" and e.label == "tool-grant"]
    assert {e.scope for e in scoped} == {f"agent:{agent.seq}"}  # in the agent's own scope
    assert count_text(twice.model.requests[-1], "Tool budget extended") == 2


async def test_extensions_granted_is_zero_when_configured_but_unused(tmp_path: Path) -> None:
    budget = tether.ToolBudget(max_tool_calls=5, extension=tether.ToolBudgetExtension(increment=1, max_extensions=3))
    twice = await run_twice(tmp_path, calls_tools("probe", turns=1), budget)
    assert twice.live.tool_budget is not None and twice.replayed.tool_budget is not None
    assert twice.live.tool_budget.extensions_granted == twice.replayed.tool_budget.extensions_granted == 0


async def test_notices_fired_is_live_only(tmp_path: Path) -> None:
    budget = tether.ToolBudget(max_tool_calls=4, notices=True)
    twice = await run_twice(tmp_path, calls_tools("probe", turns=4), budget)
    assert twice.live.tool_budget is not None and twice.replayed.tool_budget is not None
    assert twice.live.tool_budget.notices_fired == [0.5, 0.8]
    assert twice.replayed.tool_budget.notices_fired is None
    assert count_text(twice.model.requests[-1], "Tool budget notice") == 2


async def test_finalization_reserve_used_is_live_only_and_the_summary_is_the_output(tmp_path: Path) -> None:
    budget = tether.ToolBudget(max_tool_calls=2, finalization_reserve=tether.FinalizationReserve())
    twice = await run_twice(tmp_path, calls_tools("probe", turns=99), budget)
    assert twice.live.status == twice.replayed.status == "limit"
    assert twice.live.output == twice.replayed.output == "summary of the findings"
    assert twice.live.tool_budget is not None and twice.replayed.tool_budget is not None
    assert twice.live.tool_budget.finalization_reserve_used is True
    assert twice.replayed.tool_budget.finalization_reserve_used is None


async def test_finalization_window_entered_is_durable(tmp_path: Path) -> None:
    window = tether.FinalizationWindow(reserve_calls=1, allow=("record",))
    budget = tether.ToolBudget(max_tool_calls=3, finalization_window=window)
    twice = await run_twice(tmp_path, calls_tools("probe", "record", turns=3), budget, tools=(probe, record))
    assert twice.live.tool_budget is not None and twice.replayed.tool_budget is not None
    assert twice.live.tool_budget.finalization_window_entered is True
    assert twice.replayed.tool_budget.finalization_window_entered is True
    assert len(twice.decisions("finalization-window")) == 1
    # probe(0) and record(1) ran; probe(2) was refused inside the window and did not count
    assert twice.live.tool_budget.used == twice.replayed.tool_budget.used == 2


async def test_limiter_is_live_only_on_a_tool_budget_limit(tmp_path: Path) -> None:
    twice = await run_twice(tmp_path, calls_tools("probe", turns=99, per_turn=2), tether.ToolBudget(max_tool_calls=3))
    assert twice.live.status == twice.replayed.status == "limit"
    assert twice.live.tool_budget is not None and twice.replayed.tool_budget is not None
    assert twice.live.tool_budget.limiter == "max_tool_calls"
    assert twice.replayed.tool_budget.limiter is None
    assert twice.replayed.tool_budget.model_dump(exclude_none=True) == {"used": 3, "cap": 3}


async def test_the_live_agent_end_event_carries_the_summary_and_the_replayed_one_the_durable_subset(
    tmp_path: Path,
) -> None:
    budget = tether.ToolBudget(
        max_tool_calls=2,
        tool_units=tether.ToolUnits(max=50),
        notices=(0.5,),
        extension=tether.ToolBudgetExtension(increment=1, max_extensions=1),
        finalization_reserve=tether.FinalizationReserve(),
        finalization_window=tether.FinalizationWindow(reserve_calls=1, allow=("probe",)),
    )
    twice = await run_twice(tmp_path, calls_tools("probe", turns=99), budget)
    assert isinstance(twice.live_end.tool_budget, tether.ToolBudgetSummary)
    assert twice.live_end.tool_budget.model_dump(exclude_none=True) == {
        "used": 3,
        "cap": 3,
        "units_used": 3.0,
        "units_max": 50.0,
        "extensions_granted": 1,
        "notices_fired": [0.5],
        "finalization_reserve_used": True,
        "finalization_window_entered": True,
        "limiter": "max_tool_calls",
    }
    durable = {"used": 3, "cap": 3, "extensions_granted": 1, "finalization_window_entered": True}
    assert twice.replayed_end.tool_budget is not None
    assert twice.replayed_end.tool_budget.model_dump(exclude_none=True) == durable
    assert twice.replayed.tool_budget is not None
    assert twice.replayed.tool_budget.model_dump(exclude_none=True) == durable


async def test_tool_budget_config_is_not_identity(tmp_path: Path) -> None:
    twice = await run_twice(
        tmp_path,
        calls_tools("probe", turns=1),
        tether.ToolBudget(max_tool_calls=5),
        replay_budget=tether.ToolBudget(max_tool_calls=1, notices=True),
    )
    assert twice.replayed.replayed and twice.replayed.output == twice.live.output == "final answer"


# -- money and the reserve -------------------------------------------------------------------------


async def test_a_grant_is_refused_when_the_runs_budget_is_exactly_spent(tmp_path: Path) -> None:
    # Each model turn (100 input, 50 output tokens) costs 0.0001 + 0.0001 USD; the run has 0.0004.
    # The researcher's turn spends half; while its first (slow) tool runs, a sibling agent spends the
    # rest, so at the researcher's expiry the run has exactly nothing left and the grant is refused.
    @tether.tool
    async def slow(n: int) -> str:
        """Look something up, slowly the first time."""
        if n == 0:
            await asyncio.sleep(0.5)
        return f"fact {n}"

    researcher_script = calls_tools("slow", turns=9, per_turn=2, usage=(100, 50))

    def script(request: ChatRequest) -> Reply:
        if request.messages[0].text_content == "sibling":
            return Reply(text="sibling done", input_tokens=100, output_tokens=50, latency_s=0.05)
        return researcher_script(request)

    budget = tether.ToolBudget(max_tool_calls=1, extension=tether.ToolBudgetExtension(increment=5, max_extensions=1))
    model = tether.models.fake("fake", script=script, prices=PRICES)
    engine = tether.Engine(models=[model], routing={"loop": "fake:m"}, store=f"sqlite:///{tmp_path}/t.db")
    seen: list[tether.AgentResult] = []

    @tether.workflow(name="spent")
    async def spent(ctx: tether.Ctx) -> None:
        async def research() -> None:
            seen.append(await ctx.agent("research", tools=[slow], tool_budget=budget, est_cost=0.0002, full=True))

        async def sibling() -> None:
            await ctx.agent("sibling", label="sibling", est_cost=0.0002, full=True)

        await ctx.parallel([research, sibling], settle=True)

    out = await engine.run(spent, run_id="spent", budget_usd=0.0004)
    journal = await engine.inspect("spent")
    await engine.close()
    assert out.cost.total_usd == 0.0004  # exactly the ceiling
    result = seen[0]
    assert result.status == "limit" and result.tool_budget is not None
    assert result.tool_budget.model_dump(exclude_none=True) == {
        "used": 1, "cap": 1, "extensions_granted": 0, "limiter": "max_tool_calls"
    }
    grants = [e.value["payload"] for e in journal if e.kind == "decision" and e.label == "tool-grant"]
    assert [(g["granted"], g["remaining_usd"], g["reason"]) for g in grants] == [
        (False, 0.0, "no USD left on the run's budget")
    ]


async def test_a_grant_is_refused_below_min_headroom(tmp_path: Path) -> None:
    ext = tether.ToolBudgetExtension(increment=5, max_extensions=1, min_headroom_usd=2.0)
    twice = await run_twice(
        tmp_path, calls_tools("probe", turns=9), tether.ToolBudget(max_tool_calls=1, extension=ext), budget_usd=1.0
    )
    assert twice.live.status == "limit"
    assert twice.live.tool_budget is not None and twice.live.tool_budget.extensions_granted == 0
    (grant,) = twice.decisions("tool-grant")
    assert grant["granted"] is False and grant["remaining_usd"] < 2.0
    assert "below min_headroom_usd" in grant["reason"]


async def test_a_tool_hungry_model_under_three_calls_ends_limit_with_the_summary_and_skipped_calls_answered(
    tmp_path: Path,
) -> None:
    budget = tether.ToolBudget(max_tool_calls=3, finalization_reserve=tether.FinalizationReserve())
    twice = await run_twice(tmp_path, calls_tools("probe", turns=99, per_turn=2), budget)
    assert (twice.live.status, twice.live.output) == ("limit", "summary of the findings")
    last = twice.model.requests[-1]
    assert ([t.name for t in last.tools], last.tool_choice) == (["probe"], "none")  # defined, never callable
    answered = [p for m in last.messages if m.role == "tool" for p in m.parts]
    calls = [p for m in last.messages if m.role == "assistant" for p in m.parts if p.type == "tool_call"]
    assert [r.call_id for r in answered] == [c.id for c in calls]  # every call has its result
    assert [r.content for r in answered] == ["fact 0", "fact 1", "fact 2", answered[-1].content]
    assert answered[-1].is_error and answered[-1].content.startswith("[skipped] tool budget exhausted")
    assert twice.model.calls == 3  # two tool turns, one summary turn
    assert twice.live.tool_budget is not None and twice.live.tool_budget.limiter == "max_tool_calls"


def count_text(request: ChatRequest, needle: str) -> int:
    return sum(m.text_content.count(needle) for m in request.messages if m.role == "user")
