"""The hard ceiling (`overshoot="hard"`, the default): spend plus the worst case of every call in flight
never passes the ceiling, so a crash at any moment leaves a reported cost within it."""

from __future__ import annotations

import asyncio
import functools
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tether
from tether.contracts.entries import JournalEntry
from tether.engine.options import SegmentOptions, durable_options
from tether.journal.cost import fold_cost
from tether.journal.keys import GENESIS_KEY
from tether.testing import Reply, ToolCall

PRICE = tether.Price(input=10.0, output=20.0)  # a 1,000-in / 500-out turn = 0.02 USD
PADDING = "the quick brown fox jumps over the lazy dog " * 90  # about 1,000 input tokens


async def no_sleep(_: float) -> None:
    return None


def worst_reported(entries: list[JournalEntry]) -> float:
    """The largest cost the journal reports at any prefix: what a crash after that entry would leave.

    Every crash leaves a prefix of the journal (entries become durable in seq order), and a cost fold of a
    prefix charges every dispatch no draw settled at its journaled worst case.
    """
    return max(fold_cost(entries[:n]).total_usd for n in range(1, len(entries) + 1))


async def race(tmp_path: Path, *, agents: int, concurrency: int, ceiling: float, price: tether.Price,
               latency: float, overshoot: str, turns: int = 2, est_cost: float | None = None,
               max_output_tokens: int | None = None, flaky: bool = False,
               ) -> tuple[tether.RunOutcome, list[JournalEntry], Any]:
    failed: set[tuple[str, int]] = set()

    # The fake bills its own chars/4 count of the messages as input: never more than tether estimates (the
    # hard ceiling's one stated assumption; the prompt pads each call to about 1,000 input tokens).
    def script(request: Any) -> Reply:
        done = sum(1 for m in request.messages if m.role == "assistant")
        attempt = (request.messages[0].text_content[:9], done)
        if flaky and attempt not in failed:  # every turn's first attempt fails retryably (a 503 before any token)
            failed.add(attempt)
            return Reply(error="transport", message="HTTP 503: overloaded", latency_s=latency)
        if done + 1 < turns:
            return Reply(tool_calls=[ToolCall("noop", {"i": done})], output_tokens=500, latency_s=latency, chunks=4)
        return Reply(text="done", output_tokens=500, latency_s=latency, chunks=4)

    @tether.tool(parallel_safe=True)
    def noop(i: int) -> int:
        """Do nothing."""
        return i

    model = tether.models.fake("fake", script=script, prices={"m": price})
    engine = tether.Engine(models=[model], routing={"loop": "fake:m"}, store=f"sqlite:///{tmp_path}/race.db",
                           concurrency=concurrency, sleep=no_sleep)

    @tether.workflow(name="race")
    async def flow(ctx: tether.Ctx) -> list[Any]:
        async def one(i: int) -> Any:
            return await ctx.agent(f"task {i:03d} " + PADDING, tools=[noop], est_cost=est_cost,
                                   max_output_tokens=max_output_tokens)

        return await ctx.parallel([functools.partial(one, i) for i in range(agents)], settle=True)

    outcome = await engine.run(flow, run_id="race", budget_usd=ceiling, overshoot=overshoot)  # type: ignore[arg-type]
    entries = await engine.inspect("race")
    await engine.close()
    return outcome, entries, model


async def test_a_crash_after_any_entry_of_a_60_agent_race_reports_at_most_the_ceiling(tmp_path: Path) -> None:
    # est_cost far below a call's cost: admission lets all 30 in, and only the held worst cases keep them apart
    outcome, entries, _ = await race(tmp_path, agents=60, concurrency=30, ceiling=0.30, price=PRICE,
                                     latency=0.01, overshoot="hard", max_output_tokens=500, est_cost=0.001)
    assert outcome.status == "exhausted" and outcome.cost.total_usd <= 0.30 + 1e-9
    assert worst_reported(entries) <= 0.30 + 1e-9
    assert outcome.cost.total_usd >= 0.25  # the ceiling, not a refusal, stopped the race


async def test_retried_attempts_hold_their_own_worst_case_and_release_it_before_the_retry(tmp_path: Path) -> None:
    # Every turn fails once first: each failed attempt's hold is released (its draw journaled at 0) before its
    # retry is sized, so the race still spends up to the ceiling and a crash anywhere reports at most it.
    outcome, entries, _ = await race(tmp_path, agents=40, concurrency=20, ceiling=0.30, price=PRICE,
                                     latency=0.01, overshoot="hard", est_cost=0.001, flaky=True)
    assert outcome.status == "exhausted" and outcome.cost.total_usd <= 0.30 + 1e-9
    assert worst_reported(entries) <= 0.30 + 1e-9
    assert outcome.cost.total_usd >= 0.25 and outcome.cost.orphaned_usd == 0


async def test_the_bounded_mode_lets_in_flight_worst_cases_pass_the_ceiling(tmp_path: Path) -> None:
    # The same race under `bounded`: a crash at the wrong moment reports more than the ceiling (the looser
    # mode's documented cost), which is what the hard mode removes.
    _, entries, _ = await race(tmp_path, agents=60, concurrency=30, ceiling=0.30, price=PRICE, latency=0.01,
                               overshoot="bounded", max_output_tokens=500, est_cost=0.001)
    assert worst_reported(entries) > 0.30 + 0.02


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    input_rate=st.floats(min_value=1.0, max_value=30.0),
    output_rate=st.floats(min_value=1.0, max_value=60.0),
    latency=st.sampled_from([0.0, 0.002, 0.01]),
    concurrency=st.integers(min_value=1, max_value=20),
    ceiling=st.floats(min_value=0.05, max_value=0.5),
    capped=st.booleans(),
)
def test_no_crash_point_reports_more_than_the_ceiling_for_any_prices_latencies_and_concurrency(
    tmp_path_factory: Any, input_rate: float, output_rate: float, latency: float, concurrency: int, ceiling: float,
    capped: bool,
) -> None:
    price = tether.Price(input=input_rate, output=output_rate)
    tmp = tmp_path_factory.mktemp("hard")
    outcome, entries, _ = asyncio.run(race(tmp, agents=24, concurrency=concurrency, ceiling=ceiling, price=price,
                                           latency=latency, overshoot="hard",
                                           max_output_tokens=500 if capped else None))
    assert worst_reported(entries) <= ceiling + 1e-9
    assert outcome.status in ("ok", "exhausted")


async def test_a_call_that_does_not_fit_beside_its_siblings_waits_and_is_never_shortened(tmp_path: Path) -> None:
    # Each call may cost 0.02 at worst (500 output tokens); 0.05 covers two at once. Eight agents never get a
    # shorter limit because of their siblings: they wait for a sibling's call to settle instead.
    outcome, _, model = await race(tmp_path, agents=8, concurrency=8, ceiling=0.5, price=PRICE,
                                         latency=0.02, overshoot="hard", turns=1, max_output_tokens=500,
                                         est_cost=0.0)
    assert outcome.status == "ok"
    assert {r.max_output_tokens for r in model.requests} == {500}


async def test_a_call_that_waits_longer_than_dispatch_wait_s_is_refused_with_exposure_drained(
    tmp_path: Path,
) -> None:
    release = asyncio.Event()

    def script(request: Any) -> Reply:
        return Reply(text="done", input_tokens=10, output_tokens=10)

    class Slow:
        """The first call streams until the test lets it end; the other waits for its room."""

        def __init__(self) -> None:
            self.inner = tether.models.fake("fake", script=script, prices={"m": PRICE})
            self.id, self.family = "fake", "fake"

        def caps(self, model: str) -> Any:
            return self.inner.caps(model)

        async def stream(self, request: Any, signal: Any = None) -> Any:
            if len(self.inner.requests) == 0:
                async for event in self.inner.stream(request, signal):
                    await release.wait()
                    yield event
            else:
                async for event in self.inner.stream(request, signal):
                    yield event

    engine = tether.Engine(models=[Slow()], routing={"loop": "fake:m"}, store=f"sqlite:///{tmp_path}/t.db",
                           sleep=no_sleep, dispatch_wait_s=0.2)

    @tether.workflow(name="two")
    async def two(ctx: tether.Ctx) -> Any:
        async def second() -> Any:
            await asyncio.sleep(0.05)  # after the first call holds its worst case
            try:
                return await ctx.agent("second", est_cost=0.0)
            finally:
                release.set()

        return await ctx.parallel([lambda: ctx.agent("first", est_cost=0.0), second], settle=True)

    # 5,000 output tokens (0.1 USD) at worst per call under a 0.15 ceiling: the second cannot sit beside the first
    out = await engine.run(two, run_id="r", budget_usd=0.15)
    entries = await engine.inspect("r")
    second = next(e for e in entries if e.kind == "agent" and e.ref is not None and e.label is None
                  and (e.error or {}).get("reason") == "exposure-drained")
    assert "no call in flight settled" in second.error["message"]
    assert out.status in ("ok", "exhausted", "error")
    await engine.close()


async def test_without_max_output_tokens_the_limit_is_what_the_budget_buys_up_to_the_models_cap(
    tmp_path: Path,
) -> None:
    model = tether.models.fake("fake", script=lambda r: Reply(text="hi", input_tokens=5, output_tokens=5),
                               prices={"m": PRICE}, max_output_tokens=64_000)
    engine = tether.Engine(models=[model], routing={"loop": "fake:m"}, store=f"sqlite:///{tmp_path}/t.db")

    @tether.workflow(name="one")
    async def one(ctx: tether.Ctx) -> Any:
        return await ctx.agent("hello")

    await engine.run(one, run_id="small", budget_usd=0.05)  # 0.05 buys ~2,500 output tokens, not 64,000
    await engine.run(one, run_id="large", budget_usd=5.0)  # 5 USD buys more than the model's cap
    await engine.run(one, run_id="none")  # no ceiling: the usual 4,096
    small, large, none = (r.max_output_tokens for r in model.requests)
    assert small is not None and 2_000 < small < 2_500
    assert large == 64_000 and none == 4_096
    await engine.close()


async def test_a_run_that_costs_a_fraction_of_one_4096_token_turn_runs_under_a_small_ceiling(
    tmp_path: Path,
) -> None:
    # One 4,096-token turn of this model costs 0.082 USD, more than the 0.05 ceiling; the run costs 0.0075.
    price = tether.Price(input=1.0, output=20.0)
    model = tether.models.fake("fake", script=lambda r: Reply(text="ok", input_tokens=50, output_tokens=120),
                               prices={"m": price})
    engine = tether.Engine(models=[model], routing={"loop": "fake:m"}, store=f"sqlite:///{tmp_path}/t.db")

    @tether.workflow(name="three")
    async def three(ctx: tether.Ctx) -> Any:
        return [await ctx.agent(f"step {i}") for i in range(3)]

    out = await engine.run(three, run_id="hard", budget_usd=0.05)
    assert out.status == "ok" and out.cost.total_usd == pytest.approx(3 * (50 * 1.0 + 120 * 20.0) / 1e6)
    bounded = await engine.run(three, run_id="bounded", budget_usd=0.05, overshoot="bounded")
    assert bounded.status == "exhausted" and isinstance(bounded.error, tether.BudgetExhaustedError)
    assert "max_output_tokens=" in bounded.error.message and "--raise-budget" in bounded.error.message
    await engine.close()


async def test_the_overshoot_mode_is_fixed_at_the_start_and_old_runs_keep_the_bounded_mode(tmp_path: Path) -> None:
    model = tether.models.fake("fake", script=lambda r: Reply(text="ok"), prices={"m": PRICE})
    engine = tether.Engine(models=[model], routing={"loop": "fake:m"}, store=f"sqlite:///{tmp_path}/t.db")

    @tether.workflow(name="one")
    async def one(ctx: tether.Ctx) -> Any:
        return await ctx.agent("hello")

    await engine.run(one, run_id="r", budget_usd=1.0)
    genesis = next(e for e in await engine.inspect("r") if e.label == "genesis")
    assert genesis.value["overshoot"] == "hard"
    with pytest.raises(tether.ConfigError, match="overshoot='hard'"):
        await engine.run(one, run_id="r", overshoot="bounded")  # a known run id resumes that run
    with pytest.raises(tether.ConfigError, match="overshoot must be one of"):
        await engine.run(one, run_id="x", budget_usd=1.0, overshoot="loose")  # type: ignore[arg-type]
    await engine.close()
    # A run started before the option existed has no `overshoot` in its genesis: it keeps the mode it ran in.
    old = JournalEntry(seq=1, kind="decision", key=GENESIS_KEY, label="genesis",
                       value={"decision": "genesis", "workflow": "one", "budget_usd": 1.0})
    assert durable_options("r", SegmentOptions(resume=True), old).overshoot == "bounded"
