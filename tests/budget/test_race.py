"""Many concurrent agents race one USD ceiling; the overshoot stays within the stated bound."""

from __future__ import annotations

import asyncio
import functools
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tether
from tether.contracts.entries import JournalEntry
from tether.pricing import cost_usd
from tether.testing import Reply

IN_TOKENS, OUT_TOKENS = 1_000, 500


def turn_cost(price: tether.Price) -> float:
    """The most one turn can cost: its input plus its whole (clamped) output."""
    return cost_usd(tether.Usage(input_tokens=IN_TOKENS, output_tokens=OUT_TOKENS), price)


async def race(tmp_path: Path, *, agents: int, concurrency: int, ceiling: float, price: tether.Price,
               latency: float, turns: int) -> tuple[tether.RunOutcome, list[JournalEntry]]:
    def script(request: Any) -> Reply:
        done = sum(1 for m in request.messages if m.role == "assistant")
        if done + 1 < turns:
            return Reply(text="", tool_calls=[tether.testing.ToolCall("noop", {"i": done})], input_tokens=IN_TOKENS,
                         output_tokens=OUT_TOKENS, latency_s=latency, chunks=4)
        return Reply(text="done", input_tokens=IN_TOKENS, output_tokens=OUT_TOKENS, latency_s=latency, chunks=4)

    @tether.tool(parallel_safe=True)
    def noop(i: int) -> int:
        """Do nothing."""
        return i

    model = tether.models.fake("fake", script=script, prices={"m": price})

    async def no_sleep(_: float) -> None:
        return None

    engine = tether.Engine(models=[model], routing={"loop": "fake:m"}, store=f"sqlite:///{tmp_path}/race.db",
                           concurrency=concurrency, sleep=no_sleep)

    @tether.workflow(name="race")
    async def flow(ctx: tether.Ctx) -> list[Any]:
        async def one(i: int) -> Any:
            return await ctx.agent(f"task {i}", tools=[noop], est_cost=turn_cost(price) / 10)

        return await ctx.parallel([functools.partial(one, i) for i in range(agents)])

    outcome = await engine.run(flow, run_id="race", budget_usd=ceiling)
    entries = await engine.inspect("race")
    await engine.close()
    return outcome, entries


def assert_within_bound(outcome: tether.RunOutcome, entries: list[JournalEntry], ceiling: float,
                        concurrency: int, price: tether.Price) -> None:
    running = [e for e in entries if e.kind == "agent" and e.status == "running"]
    terminals = [e for e in entries if e.kind == "agent" and e.ref is not None]
    assert len(terminals) == len(running), "every agent that started has a terminal"
    spend = sum(e.cost_usd or 0.0 for e in terminals)  # computed from the journal, not from the engine
    bound = concurrency * turn_cost(price)  # one clamped turn per concurrently running agent
    assert spend <= ceiling + bound + 1e-9, (spend, ceiling, bound)
    assert abs(spend - outcome.cost.total_usd) < 1e-9
    assert outcome.status == "exhausted"
    assert outcome.cost.by_model.get("fake:m", 0) > 0 and outcome.cost.provider_calls > 0


async def test_200_agents_race_a_one_dollar_ceiling_at_concurrency_50(tmp_path: Path) -> None:
    price = tether.Price(input=10.0, output=20.0)  # one turn = 0.02 USD
    outcome, entries = await race(tmp_path, agents=200, concurrency=50, ceiling=1.0, price=price, latency=0.01,
                                  turns=3)
    assert_within_bound(outcome, entries, 1.0, 50, price)
    assert outcome.cost.total_usd >= 0.9  # the ceiling, not a refusal, stopped the run
    # admitted agents were not cancelled by their siblings' refusals: every started agent finished its turns
    # or was stopped by the ceiling itself (refused, or cut while still streaming)
    stopped = [e for e in entries if e.kind == "agent" and e.ref is not None and e.status != "ok"]
    assert all((e.error or {}).get("kind") == "budget" for e in stopped)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    input_rate=st.floats(min_value=1.0, max_value=30.0),
    output_rate=st.floats(min_value=1.0, max_value=60.0),
    latency=st.sampled_from([0.0, 0.002, 0.01]),
    concurrency=st.integers(min_value=1, max_value=20),
    ceiling=st.floats(min_value=0.05, max_value=0.5),
)
def test_the_bound_holds_for_any_prices_latencies_and_concurrency(
    tmp_path_factory: Any, input_rate: float, output_rate: float, latency: float, concurrency: int, ceiling: float
) -> None:
    price = tether.Price(input=input_rate, output=output_rate)
    tmp = tmp_path_factory.mktemp("race")
    outcome, entries = asyncio.run(race(tmp, agents=40, concurrency=concurrency, ceiling=ceiling, price=price,
                                        latency=latency, turns=2))
    running = [e for e in entries if e.kind == "agent" and e.status == "running"]
    spend = sum(e.cost_usd or 0.0 for e in entries if e.kind == "agent" and e.ref is not None)
    assert spend <= ceiling + concurrency * turn_cost(price) + 1e-9
    assert len([e for e in entries if e.kind == "agent" and e.ref is not None]) == len(running)
    if spend < ceiling - 1e-9:
        assert outcome.status in ("ok", "exhausted")
    else:
        assert outcome.status == "exhausted"
