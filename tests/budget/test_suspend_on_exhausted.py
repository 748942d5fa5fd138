"""`on_exhausted="suspend"`: a run its USD ceiling stops parks on a `budget` suspension naming what it needs, and
a raise (from any surface) lets it go on, continuing the stopped agent from its checkpoint (docs/budgets.md)."""

from __future__ import annotations

from typing import Any

import pytest

import tether
from tether.contracts.messages import ChatRequest
from tether.engine.budget_suspension import budget_need
from tether.journal.cost import BUDGET_RAISED, decision_name
from tether.testing import Reply, ToolCall

PRICE = tether.Price(input=10.0, output=20.0)
CEILING = 0.005


@tether.tool
def note(n: int) -> str:
    """Take a note."""
    return f"noted {n}"


@tether.workflow(name="parked")
async def parked(ctx: tether.Ctx) -> Any:
    return await ctx.agent("work until the money runs out", tools=[note], est_cost=0.0)


def model_logging(calls: list[int], last: int = 3) -> Any:
    def script(request: ChatRequest) -> Reply:
        """Every turn costs 0.002 USD (100 in, 50 out); turn `last` answers."""
        turn = sum(1 for m in request.messages if m.role == "assistant")
        calls.append(turn)
        if turn >= last:
            return Reply(text="done", input_tokens=100, output_tokens=50)
        return Reply(tool_calls=[ToolCall("note", {"n": turn})], input_tokens=100, output_tokens=50)

    return tether.models.fake("fake", script=script, prices={"m": PRICE}, output_floor=40)


async def test_a_stopped_run_parks_on_a_budget_suspension_naming_what_it_needs(engine_for: Any) -> None:
    calls: list[int] = []
    engine = engine_for(model_logging(calls))
    out = await engine.run(parked, run_id="p", budget_usd=CEILING, on_exhausted="suspend")
    assert out.status == "suspended" and out.pending == ["budget:1"] and calls == [0, 1]
    entries = await engine.inspect("p")
    genesis = entries[0].value
    assert genesis["on_exhausted"] == "suspend"
    need = next(n for n in map(budget_need, entries) if n is not None)
    assert need.key == "budget:1" and need.ceiling_usd == CEILING and need.spent_usd == pytest.approx(0.004)
    assert need.reason is tether.StopReason.OUTPUT_FLOOR and need.agent_id == 1
    assert need.suggested_usd == pytest.approx(0.01) and "output floor" in need.message
    assert [m.status for m in await engine.runs()] == ["suspended"]

    # a resume that changed no money reads the stop back and stays parked on the same suspension, writing nothing
    again = await engine.resume("p", parked)
    assert again.status == "suspended" and again.pending == ["budget:1"] and calls == [0, 1]
    assert await engine.inspect("p") == entries

    # lowering (or repeating) the ceiling is refused, and so is a resolution that raises nothing
    with pytest.raises(tether.ConfigError, match="never lowered"):
        await engine.raise_budget("p", 0.004)
    with pytest.raises(tether.InvalidResolutionError, match="new ceiling in USD"):
        await engine.resolve_external("p", "budget:1", 0.001)
    assert await engine.inspect("p") == entries

    report = await engine.raise_budget("p", 1.0, "approved")
    assert report.ceiling_usd == 1.0 and (await engine.run_meta("p")).budget_usd == 1.0
    done = await engine.resume("p", parked)
    assert done.status == "ok" and done.value == "done" and done.pending == []
    assert calls == [0, 1, 2, 3]  # the stopped agent continued from its checkpoint: 0 turns paid again
    assert done.cost.provider_calls == 4 and done.cost.total_usd == pytest.approx(0.008)
    raised = [e.value for e in await engine.inspect("p") if decision_name(e) == BUDGET_RAISED]
    assert [(r["old_usd"], r["new_usd"], r["reason"]) for r in raised] == [(CEILING, 1.0, "approved")]


@pytest.mark.parametrize("how", ["resolve", "resume --raise-budget"])
async def test_a_budget_suspension_is_resolved_by_a_raise(engine_for: Any, how: str) -> None:
    calls: list[int] = []
    engine = engine_for(model_logging(calls))
    assert (await engine.run(parked, run_id="p", budget_usd=CEILING, on_exhausted="suspend")).status == "suspended"
    if how == "resolve":
        assert await engine.resolve_external("p", "budget:1", {"usd": 0.5, "reason": "ok'd"})
        done = await engine.resume("p", parked)
    else:
        done = await engine.resume("p", parked, raise_budget_usd=0.5, raise_reason="ok'd")
    assert done.status == "ok" and calls == [0, 1, 2, 3] and done.cost.ceiling_usd == 0.5
    entries = await engine.inspect("p")
    closer = next(e for e in entries if e.kind == "resolution")
    assert closer.value["raised_to"] == 0.5 and closer.value["reason"] == "ok'd"
    assert closer.seq == 1 + next(e.seq for e in entries if decision_name(e) == BUDGET_RAISED)


async def test_a_raise_too_small_parks_the_run_again_on_a_new_suspension(engine_for: Any) -> None:
    calls: list[int] = []
    engine = engine_for(model_logging(calls, last=5))
    assert (await engine.run(parked, run_id="p", budget_usd=CEILING, on_exhausted="suspend")).status == "suspended"
    short = await engine.resume("p", parked, raise_budget_usd=0.009)
    assert short.status == "suspended" and short.pending == ["budget:2"]
    done = await engine.resume("p", parked, raise_budget_usd=1.0)
    assert done.status == "ok" and calls == [0, 1, 2, 3, 4, 5] and done.pending == []


async def test_an_abandoned_budget_suspension_settles_the_run_exhausted(engine_for: Any) -> None:
    engine = engine_for(model_logging([]))
    assert (await engine.run(parked, run_id="p", budget_usd=CEILING, on_exhausted="suspend")).status == "suspended"
    assert await engine.abandon("p", "budget:1", "not worth more")
    out = await engine.resume("p", parked)
    assert out.status == "exhausted" and isinstance(out.error, tether.BudgetExhaustedError)


async def test_the_default_settles_exhausted_and_a_resume_keeps_the_mode_it_started_with(engine_for: Any) -> None:
    engine = engine_for(model_logging([]))
    out = await engine.run(parked, run_id="d", budget_usd=CEILING)
    assert out.status == "exhausted" and out.pending == []
    assert (await engine.inspect("d"))[0].value["on_exhausted"] == "exhausted"
    with pytest.raises(tether.ConfigError, match="on_exhausted"):
        await engine.resume("d", parked, on_exhausted="suspend")
    with pytest.raises(tether.ConfigError, match="on_exhausted must be one of"):
        await engine.run(parked, run_id="x", budget_usd=CEILING, on_exhausted="park")  # type: ignore[typeddict-item]


async def test_a_token_ceiling_stop_is_not_parked(engine_for: Any) -> None:
    engine = engine_for(model_logging([]))
    out = await engine.run(parked, run_id="t", on_exhausted="suspend",
                           containment=tether.Containment(max_agents=5, max_concurrent=2, max_depth=2, max_tokens=250))
    assert out.status == "exhausted" and out.pending == []
