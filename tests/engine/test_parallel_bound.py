"""`ctx.parallel(..., concurrency=k)`: at most k branches (and branch tasks) at once, the same scopes, results,
errors, suspension and replay as the unbounded form (engine.branches.BranchPool)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import tether
from tether.contracts.errors import ConfigError


def _fan(n: int, bound: int | None, live: list[int], *, fail: int | None = None, settle: bool = False) -> Any:
    @tether.workflow(name="fan")
    async def fan(ctx: tether.Ctx) -> Any:
        async def branch(i: int) -> int:
            live[0] += 1
            live[1] = max(live[1], live[0])
            live[2] += 1
            try:
                await asyncio.sleep(0.001 * ((i * 7) % 5))  # finish out of order
                if i == fail:
                    raise ValueError(f"boom {i}")
                return int(await ctx.step("work", lambda: i * 10))
            finally:
                live[0] -= 1

        thunks = [lambda i=i: branch(i) for i in range(n)]
        if bound is None:
            out = await ctx.parallel(thunks, settle=settle)
        else:
            out = await ctx.parallel(thunks, settle=settle, concurrency=bound)
        return [o.status for o in out] if settle else out

    return fan


async def test_a_bound_runs_at_most_k_branches_with_results_in_input_order(engine: tether.Engine) -> None:
    live = [0, 0, 0]
    out = await engine.run(_fan(20, 3, live), run_id="r")
    assert out.status == "ok" and out.value == [i * 10 for i in range(20)]
    assert live[1] == 3 and live[2] == 20
    scopes = sorted(e.scope for e in await engine.inspect("r") if e.kind == "step" and e.status == "running")
    assert scopes == sorted(f"par:0:{i}" for i in range(20))


@pytest.mark.parametrize(("first", "then"), [(None, 4), (4, None), (4, 9)])
async def test_a_journal_replays_whatever_bound_wrote_it_or_reads_it(
    engine: tether.Engine, first: int | None, then: int | None
) -> None:
    live = [0, 0, 0]
    await engine.run(_fan(12, first, live), run_id="r")
    again = await engine.resume("r", _fan(12, then, [0, 0, 0]))
    assert again.value == [i * 10 for i in range(12)] and again.replay.misses == 0


async def test_fail_fast_under_a_bound_starts_nothing_more_and_raises_the_error(engine: tether.Engine) -> None:
    live = [0, 0, 0]
    out = await engine.run(_fan(30, 2, live, fail=1), run_id="r")
    assert out.status == "error" and isinstance(out.error, ValueError) and str(out.error) == "boom 1"
    assert live[0] == 0 and live[2] < 30  # the running siblings were cancelled, the rest never started


async def test_settle_under_a_bound_returns_every_outcome(engine: tether.Engine) -> None:
    out = await engine.run(_fan(10, 3, [0, 0, 0], fail=4, settle=True), run_id="r")
    assert out.status == "ok" and out.value == ["error" if i == 4 else "ok" for i in range(10)]


async def test_parked_branches_keep_their_slots_and_the_run_settles_suspended(engine: tether.Engine) -> None:
    started: list[int] = []

    @tether.workflow(name="review")
    async def review(ctx: tether.Ctx) -> list[Any]:
        async def branch(i: int) -> Any:
            started.append(i)
            return await ctx.await_external(f"k{i}")

        return await ctx.parallel([lambda i=i: branch(i) for i in range(5)], concurrency=2)

    out = await engine.run(review, run_id="r")
    for waiting in (["k0", "k1"], ["k2", "k3"], ["k4"]):
        assert out.status == "suspended" and out.pending == waiting
        for key in waiting:
            assert await engine.resolve_external("r", key, int(key[1:]))
        out = await engine.resume("r", review)
    assert started[:2] == [0, 1]  # the first segment started only the two the bound admits
    assert out.status == "ok" and out.value == [0, 1, 2, 3, 4]


async def test_the_caller_cancelled_cancels_the_running_branches(engine: tether.Engine) -> None:
    live = [0, 0, 0]
    gate = asyncio.Event()

    @tether.workflow(name="slow")
    async def slow(ctx: tether.Ctx) -> Any:
        async def branch(i: int) -> None:
            live[0] += 1
            live[2] += 1
            try:
                gate.set()
                await asyncio.sleep(30)
            finally:
                live[0] -= 1

        return await ctx.parallel([lambda i=i: branch(i) for i in range(10)], concurrency=3)

    handle = engine.start(slow, run_id="r")
    await gate.wait()
    handle.cancel()
    out = await handle.result()
    assert out.status == "cancelled" and live[0] == 0 and live[2] == 3


async def test_a_bound_must_be_a_whole_number_at_least_one(engine: tether.Engine) -> None:
    @tether.workflow(name="bad")
    async def bad(ctx: tether.Ctx) -> Any:
        return await ctx.parallel([], concurrency=0)

    out = await engine.run(bad, run_id="r")
    assert out.status == "error" and isinstance(out.error, ConfigError)


async def test_an_unbounded_fan_out_starts_in_waves_and_runs_every_branch_at_once(engine: tether.Engine) -> None:
    """Waves of `WAVE` per loop pass, in input order; no branch waits for another to finish before it starts."""
    from tether.engine.branches import WAVE

    n = 3 * WAVE + 5
    started: list[int] = []
    everyone = asyncio.Event()

    @tether.workflow(name="all")
    async def all_at_once(ctx: tether.Ctx) -> Any:
        async def branch(i: int) -> int:
            started.append(i)
            if len(started) == n:
                everyone.set()
            await everyone.wait()  # only the last branch to start releases the others
            return int(await ctx.step("work", lambda: i))

        return await ctx.parallel([lambda i=i: branch(i) for i in range(n)])

    out = await engine.run(all_at_once, run_id="r")
    assert out.status == "ok" and out.value == list(range(n)) and started == list(range(n))


async def test_unbounded_branches_all_park_before_the_run_settles_suspended(engine: tether.Engine) -> None:
    """A wave still to start counts as working: the run suspends only once every branch has parked."""
    from tether.engine.branches import WAVE

    n = 2 * WAVE + 3

    @tether.workflow(name="review")
    async def review(ctx: tether.Ctx) -> list[Any]:
        async def branch(i: int) -> Any:
            return await ctx.await_external(f"k{i}")

        return await ctx.parallel([lambda i=i: branch(i) for i in range(n)])

    out = await engine.run(review, run_id="r")
    assert out.status == "suspended" and sorted(out.pending) == sorted(f"k{i}" for i in range(n))


async def test_an_unbounded_fan_out_that_fails_fast_starts_no_later_wave(engine: tether.Engine) -> None:
    from tether.engine.branches import WAVE

    live = [0, 0, 0]
    out = await engine.run(_fan(10 * WAVE, None, live, fail=0), run_id="r")
    assert out.status == "error" and str(out.error) == "boom 0"
    assert live[0] == 0 and live[2] < 10 * WAVE  # the started ones were cancelled; later waves never started
