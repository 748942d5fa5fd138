"""The three layers through the engine: admission, the clamp, the live cut; pricing strictness."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

import tether
from tether.agents.dispatch import estimate_input_tokens
from tether.pricing import affordable_output_tokens, cost_usd
from tether.testing import Reply

PRICE = tether.Price(input=10.0, output=20.0)


async def no_sleep(_: float) -> None:
    return None


@tether.workflow(name="one")
async def one(ctx: tether.Ctx) -> Any:
    return await ctx.agent("hello")


async def test_admission_refuses_before_any_journal_entry_or_provider_call(engine_for: Any) -> None:
    model = tether.models.fake("fake", script=[Reply(text="never")], prices={"m": PRICE})
    engine = engine_for(model)

    @tether.workflow(name="big")
    async def big(ctx: tether.Ctx) -> Any:
        return await ctx.agent("expensive", est_cost=5.0)

    out = await engine.run(big, run_id="r", budget_usd=1.0)
    assert out.status == "exhausted" and isinstance(out.error, tether.BudgetExhaustedError)
    assert "reserve of 5.00" in str(out.error) and "of 1.00 USD" in str(out.error)
    assert model.calls == 0
    assert [e.kind for e in await engine.inspect("r") if e.kind == "agent"] == []
    assert out.cost.total_usd == 0.0


async def test_the_output_clamp_is_what_the_remaining_money_buys(engine_for: Any) -> None:
    model = tether.models.fake("fake", script=[Reply(text="x" * 400, input_tokens=10, output_tokens=100)],
                               prices={"m": PRICE})
    engine = engine_for(model)

    @tether.workflow(name="cheap")
    async def cheap(ctx: tether.Ctx) -> Any:
        return await ctx.agent("hello", est_cost=0.0)

    await engine.run(cheap, run_id="r", budget_usd=0.001)
    request = model.requests[0]
    est_input = estimate_input_tokens(request)
    assert request.max_output_tokens == affordable_output_tokens(PRICE, est_input, 0.001)
    assert 0 < request.max_output_tokens < 4_096


async def test_an_unaffordable_output_floor_refuses_the_turn_with_its_stage(engine_for: Any) -> None:
    model = tether.models.fake("fake", script=[Reply(text="never")], prices={"m": PRICE}, output_floor=1_000)
    engine = engine_for(model)

    @tether.workflow(name="floor")
    async def floor(ctx: tether.Ctx) -> Any:
        return await ctx.agent("hello", est_cost=0.001, full=True)

    out = await engine.run(floor, run_id="r", budget_usd=0.01)
    assert model.calls == 0
    assert isinstance(out.error, tether.BudgetExhaustedError)
    err = out.error.data["error"]
    assert (err.kind, err.reason, err.stage) == ("budget", "output-floor", "loop")


async def test_the_meter_cuts_a_stream_at_the_ceiling_and_resume_repays_nothing_complete(engine_for: Any) -> None:
    calls: list[str] = []

    def script(request: Any) -> Reply:
        prompt = request.messages[-1].text_content
        calls.append(prompt)
        if prompt == "cheap":
            return Reply(text="done", input_tokens=100, output_tokens=10)
        # billed input far above its estimate (and above the overhead "cheap" taught): the clamp
        # trusted the estimate, so only the live cut can stop this stream at the ceiling
        return Reply(text="y" * 4000, input_tokens=600, output_tokens=4000, chunks=40, latency_s=0.2)

    model = tether.models.fake("fake", script=script, prices={"m": PRICE})
    engine = engine_for(model)

    @tether.workflow(name="cut")
    async def cut(ctx: tether.Ctx) -> Any:
        first = await ctx.agent("cheap", est_cost=0.0)
        second = await ctx.agent("long", est_cost=0.0, max_output_tokens=4000)
        return [first, second]

    out = await engine.run(cut, run_id="r", budget_usd=0.03)
    assert out.status == "exhausted"
    entries = await engine.inspect("r")
    cut_terminal = next(e for e in entries if e.kind == "agent" and e.ref is not None and e.status == "cancelled")
    assert cut_terminal.usage is not None and cut_terminal.usage.approximate
    assert cut_terminal.error is not None and cut_terminal.error["kind"] == "budget"
    assert out.cost.approximate and out.cost.total_usd <= 0.03 + cost_usd(tether.Usage(output_tokens=100), PRICE)
    assert out.cost.total_usd >= 0.03 - 1e-9  # it did run up to the ceiling before the cut
    # a resume keeps the ceiling: the completed agent replays and so does the cut one's stop (the money that
    # stopped it is the same), so nothing goes to the wire and nothing is appended
    model.requests.clear()
    again = await engine.resume("r", cut)
    assert model.requests == []
    assert again.status == "exhausted" and again.replay.hits == 2 and again.replay.reruns == 0
    assert await engine.inspect("r") == entries
    with pytest.raises(tether.ConfigError, match=re.escape("budget_usd=0.03")):
        await engine.resume("r", cut, budget_usd=1.0)  # no resume path can raise a stored ceiling


async def test_live_debits_equal_the_settled_fold_to_the_cent_across_a_tier(engine_for: Any) -> None:
    tiered = tether.Price(input=3.0, output=15.0, tiers=[tether.Tier(above_input_tokens=200_000, input=6.0,
                                                                    output=22.5)])
    model = tether.models.fake("fake", script=lambda r: Reply(text="z" * 400, input_tokens=250_000,
                                                              output_tokens=100, chunks=5), prices={"m": tiered})
    engine = engine_for(model)
    debits: list[float] = []
    handle = engine.start(one, run_id="r", budget_usd=10.0)
    handle.on("budget:update", lambda e: debits.append(e.usd))
    out = await handle
    expected = cost_usd(tether.Usage(input_tokens=250_000, output_tokens=100), tiered)
    assert round(sum(debits), 2) == round(out.cost.total_usd, 2) == round(expected, 2)
    assert out.cost.total_usd == pytest.approx(250_000 * 6.0 / 1e6 + 100 * 22.5 / 1e6)
    assert (await engine.resume("r", one)).cost.total_usd == out.cost.total_usd


async def test_strict_pricing_refuses_an_unpriced_model_before_the_wire(engine_for: Any) -> None:
    model = tether.models.fake("fake", script=[Reply(text="never")])
    engine = engine_for(model)
    out = await engine.run(one, run_id="r", strict_pricing=True)
    assert out.status == "error" and isinstance(out.error, tether.PricingError)
    assert model.calls == 0
    entries = await engine.inspect("r")
    assert [e for e in entries if e.kind == "agent"] == []  # refused before admission: no entry was opened


async def test_a_fallback_without_a_price_row_is_refused_before_the_wire_and_its_entry_closed(
    tmp_path: Path,
) -> None:
    primary = tether.models.fake("fake", script=[Reply(error="rate-limit")] * 3, prices={"m": PRICE})
    backup = tether.models.fake("backup", script=[Reply(text="never")])
    engine = tether.Engine(models=[primary, backup], store=f"sqlite:///{tmp_path}/t.db", sleep=no_sleep,
                           routing={"loop": tether.ModelSpec("fake:m", fallbacks=("backup:m",))})
    out = await engine.run(one, run_id="r", strict_pricing=True)
    assert out.status == "error" and isinstance(out.error, tether.PricingError) and backup.calls == 0
    entries = await engine.inspect("r")
    running = [e for e in entries if e.kind == "agent" and e.status == "running"]
    terminals = [e for e in entries if e.kind == "agent" and e.ref is not None]
    assert len(running) == len(terminals) == 1 and terminals[0].status == "error"  # no entry left open


async def test_unpriced_usage_is_itemized_never_reported_as_zero_silently(engine_for: Any) -> None:
    model = tether.models.fake("fake", script=[Reply(text="ok", input_tokens=70, output_tokens=7)])
    engine = engine_for(model)
    out = await engine.run(one, run_id="r")
    assert out.status == "ok" and out.cost.total_usd == 0.0
    assert out.cost.unpriced["fake:m"].input_tokens == 70 and out.cost.unpriced["fake:m"].output_tokens == 7


async def test_an_exhausted_outcome_carries_cost_dropped_pending_and_the_value(engine_for: Any) -> None:
    def script(request: Any) -> Reply:
        # the input is billed far above its estimate, so the ceiling fires while the reply still streams
        return Reply(text="y" * 400, input_tokens=300, output_tokens=1000, chunks=10, latency_s=0.05)

    model = tether.models.fake("fake", script=script, prices={"m": PRICE})
    engine = engine_for(model)

    @tether.workflow(name="soft")
    async def soft(ctx: tether.Ctx) -> Any:
        res = await ctx.parallel([lambda: ctx.agent("a", est_cost=0.0), lambda: ctx.await_external("human")],
                                 settle=True)
        return [r.status for r in res]

    out = await engine.run(soft, run_id="r", budget_usd=0.01)
    assert out.status == "exhausted" and out.pending == ["human"]
    assert out.cost.total_usd > 0 and len(out.dropped) == 1 and out.dropped[0].error["code"] == "budget-exhausted"

    @tether.workflow(name="returns")
    async def returns(ctx: tether.Ctx) -> Any:
        res = await ctx.parallel([lambda: ctx.agent("b", est_cost=0.0)], settle=True)
        return [r.status for r in res]

    done = await engine.run(returns, run_id="v", budget_usd=0.01)
    # a settled parallel re-raises the refusal once every branch settled; the outcomes ride on it
    assert done.status == "exhausted" and done.value is None and done.cost.total_usd > 0
    assert isinstance(done.error, tether.BudgetExhaustedError)
    (branch,) = done.error.data["outcomes"]
    assert branch.status == "error" and isinstance(branch.error, tether.BudgetExhaustedError)


async def test_the_exposure_cap_run_option_shortens_turns(engine_for: Any) -> None:
    model = tether.models.fake("fake", script=[Reply(text="ok", input_tokens=10, output_tokens=5)], prices={"m": PRICE})
    engine = engine_for(model)

    @tether.workflow(name="exp")
    async def exp(ctx: tether.Ctx) -> Any:
        return await ctx.agent("hello", est_cost=0.0)

    out = await engine.run(exp, run_id="r", max_in_flight_exposure_usd=0.002)
    assert out.status == "ok"
    sent = model.requests[0].max_output_tokens
    assert sent is not None and sent < 100
