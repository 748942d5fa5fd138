"""`engine.forecast`: P50/P90/P95 of a run's cost, calls and tokens from past settled runs of the same code, read
from the run listing's settled figures; "not enough history" below the minimum; a new version of the code is
forecast from the old version's runs scaled by a fork preview (docs/budgets.md, *Forecasts*)."""

from __future__ import annotations

import random
import statistics
import sys
from pathlib import Path
from typing import Any

import pytest

import tether
from tether.engine.forecasting import MIN_RUNS, upper_bound

sys.path.insert(0, str(Path(__file__).parent))
from forecast_kit import lookup, research, stochastic_model

SEEDS = (1, 2, 3, 4, 5)


async def _costs(engine: tether.Engine, prefix: str, n: int) -> list[float]:
    out = []
    for i in range(n):
        outcome = await engine.run(research, {"topic": "x"}, run_id=f"{prefix}{i}")
        assert outcome.status == "ok"
        out.append((await engine.cost(outcome.run_id)).total_usd)
    return out


@pytest.mark.parametrize("seed", SEEDS)
async def test_after_40_runs_p95_covers_90_percent_of_40_held_out_runs_and_p50_is_within_20_percent(
    engine_for: Any, seed: int,
) -> None:
    engine = engine_for(stochastic_model(seed))
    history = await _costs(engine, "h", 40)
    f = await engine.forecast(research, {"topic": "x"}, runs=40)
    assert f.enough and f.basis == "history" and f.runs == 40 and f.same_args and f.cost_usd is not None
    assert f.cost_usd.p50 == pytest.approx(statistics.median(history))  # the cost reports' figures, as they are
    held_out = await _costs(engine, "o", 40)
    covered = sum(c <= f.cost_usd.p95 for c in held_out) / len(held_out)
    median = statistics.median(held_out)
    assert covered >= 0.9, (seed, covered)
    assert abs(f.cost_usd.p50 - median) <= 0.2 * median, (seed, f.cost_usd.p50, median)
    assert f.cost_usd.p50 <= f.cost_usd.p90 <= f.cost_usd.p95
    assert f.calls is not None and f.tokens is not None and 1 <= f.calls.p50 <= f.calls.p95
    await engine.close()


def test_the_p95_bound_holds_its_promise_across_a_thousand_seeds() -> None:
    # The estimator alone, on the same shape of workload (a sum of a random number of random-sized turns): the
    # acceptance criterion holds for nearly every seed, so the engine test above does not rest on lucky ones.
    def run_cost(rng: random.Random) -> float:
        turns = rng.randint(3, 5) + 1
        return sum(rng.randint(300, 900) * 2e-6 + rng.randint(40, 400) * 8e-6 for _ in range(turns))

    covers = near = 0
    for seed in range(1_000):
        rng = random.Random(seed)
        history, future = [run_cost(rng) for _ in range(40)], [run_cost(rng) for _ in range(40)]
        covers += sum(c <= upper_bound(history, 0.95) for c in future) >= 36
        median = statistics.median(future)
        near += abs(statistics.median(history) - median) <= 0.2 * median
    assert covers >= 990 and near >= 990, (covers, near)  # measured: 995 and 999 of 1,000


async def test_too_few_runs_is_a_stated_not_enough_history(engine_for: Any) -> None:
    engine = engine_for(stochastic_model(7))
    await _costs(engine, "h", MIN_RUNS - 1)
    f = await engine.forecast(research, {"topic": "x"})
    assert not f.enough and f.runs == MIN_RUNS - 1 and f.cost_usd is None and f.basis == "none"
    assert f.summary().startswith("not enough history: 4 settled run(s)") and "at least 5" in f.summary()
    await engine.close()


async def test_a_settled_run_keeps_its_cost_reports_figures_in_its_meta_so_a_forecast_loads_no_journal(
    engine_for: Any,
) -> None:
    engine = engine_for(stochastic_model(8))
    await _costs(engine, "h", MIN_RUNS)
    meta = await engine.run_meta("h0")
    report = await engine.cost("h0")
    assert (meta.model_extra or {})["settled_cost"] == {
        "total_usd": report.total_usd, "provider_calls": report.provider_calls,
        "tokens": report.usage.input_tokens + report.usage.output_tokens}
    store = await engine.store()
    loads: list[str] = []
    real_load = store.load

    async def counting_load(run_id: str) -> Any:
        loads.append(run_id)
        return await real_load(run_id)

    store.load = counting_load  # type: ignore[method-assign]
    assert (await engine.forecast(research, {"topic": "x"})).enough
    assert loads == []
    await engine.close()


async def test_runs_of_other_code_are_left_out_and_new_code_is_forecast_through_a_fork_preview(
    engine_for: Any,
) -> None:
    engine = engine_for(stochastic_model(9))
    old = await _costs(engine, "h", 10)

    @tether.workflow(name="research")
    async def research_v2(ctx: tether.Ctx, topic: str) -> Any:  # edited code: one more agent call
        first = await ctx.agent(f"research {topic}", tools=[lookup], est_cost=0.0)
        return first, await ctx.agent(f"check {topic}", est_cost=0.0)

    assert research_v2.code_hash != research.code_hash
    f = await engine.forecast(research_v2, {"topic": "x"})
    assert f.basis == "preview" and f.enough and f.other_code_runs == 10 and f.previewed_run == "h9"
    assert f.scale is not None and f.scale > 1.0 and f.cost_usd is not None  # the new call costs something
    assert f.cost_usd.p50 == pytest.approx(statistics.median(old) * f.scale)
    await engine.close()
