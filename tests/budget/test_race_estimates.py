"""The 200-agent race of issue #17 (1.00 USD, 0.006 USD per call, concurrency 50), without kills.

An accurate `est_cost` lets admission alone stop the race at the ceiling; a 6x underestimate admits more
agents than the money covers, and the output clamp and the stream cut keep the overshoot inside the bound.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import tether
from tether.contracts.entries import JournalEntry
from tether.contracts.messages import ChatRequest
from tether.pricing import cost_usd
from tether.testing import Reply, ToolCall

AGENTS, CONCURRENCY, CEILING_USD, TURNS = 200, 50, 1.00, 3
IN_TOKENS, OUT_TOKENS = 1_000, 500
PRICE = tether.Price(input=2.0, output=8.0)
CALL_USD = cost_usd(tether.Usage(input_tokens=IN_TOKENS, output_tokens=OUT_TOKENS), PRICE)
AGENT_USD = TURNS * CALL_USD
BOUND_USD = CONCURRENCY * CALL_USD  # one clamped in-flight turn per concurrently running agent


def script(request: ChatRequest) -> Reply:
    done = sum(1 for m in request.messages if m.role == "assistant")
    if done + 1 < TURNS:
        return Reply(tool_calls=[ToolCall("noop", {"i": done})], input_tokens=IN_TOKENS, output_tokens=OUT_TOKENS,
                     latency_s=0.01, chunks=4)
    return Reply(text="done", input_tokens=IN_TOKENS, output_tokens=OUT_TOKENS, latency_s=0.01, chunks=4)


@tether.tool(parallel_safe=True)
def noop(i: int) -> int:
    """Do nothing."""
    return i


async def race(tmp_path: Path, est_cost: float) -> tuple[tether.RunOutcome, list[JournalEntry], int]:
    model = tether.models.fake("fake", script=script, prices={"m": PRICE})
    engine = tether.Engine(models=[model], routing={"loop": "fake:m"}, store=f"sqlite:///{tmp_path}/race.db",
                           concurrency=CONCURRENCY)

    @tether.workflow(name="race")
    async def flow(ctx: tether.Ctx) -> list[Any]:
        async def one(i: int) -> Any:
            return await ctx.agent(f"task {i}", tools=[noop], est_cost=est_cost, max_output_tokens=OUT_TOKENS)

        return await ctx.parallel([functools.partial(one, i) for i in range(AGENTS)])

    outcome = await engine.run(flow, run_id="race", budget_usd=CEILING_USD)
    entries = await engine.inspect("race")
    await engine.close()
    return outcome, entries, model.calls


def journaled_spend(entries: list[JournalEntry]) -> float:
    """Spend folded from the journal's agent terminals (not from the engine's own report)."""
    running = [e for e in entries if e.kind == "agent" and e.ref is None]
    terminals = [e for e in entries if e.kind == "agent" and e.ref is not None]
    assert len(terminals) == len(running), "every agent that started has a terminal"
    return sum(e.cost_usd or 0.0 for e in terminals)


async def test_an_accurate_estimate_settles_exhausted_without_passing_the_ceiling(tmp_path: Path) -> None:
    outcome, entries, calls = await race(tmp_path, est_cost=AGENT_USD)
    spend = journaled_spend(entries)
    assert outcome.status == "exhausted"
    assert spend <= CEILING_USD + 1e-9, spend
    assert abs(outcome.cost.total_usd - spend) < 1e-9
    assert calls * CALL_USD <= CEILING_USD + 1e-9, calls  # every call completed: billed = calls x 0.006


async def test_a_six_times_underestimated_estimate_stays_inside_the_bound(tmp_path: Path) -> None:
    outcome, entries, calls = await race(tmp_path, est_cost=AGENT_USD / 6)
    spend = journaled_spend(entries)
    assert outcome.status == "exhausted"
    assert spend <= CEILING_USD + BOUND_USD + 1e-9, (spend, CEILING_USD + BOUND_USD)
    assert calls * CALL_USD <= CEILING_USD + BOUND_USD + 1e-9, calls  # even billing every call in full
    assert spend >= CEILING_USD * 0.9  # the ceiling, not an early refusal, stopped the race
