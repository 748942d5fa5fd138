"""Suspensions: parking, settling `suspended`, resolution on a settled run, abandon, first closer wins."""

from __future__ import annotations

import asyncio

import tether


@tether.workflow(name="approve")
async def approve_flow(ctx: tether.Ctx, item: str) -> dict[str, object]:
    prepared = await ctx.step("prepare", lambda: f"draft:{item}")
    verdict = await ctx.await_external("review")
    return {"prepared": prepared, "verdict": verdict}


async def test_a_parked_branch_settles_the_run_suspended_with_pending_keys(engine: tether.Engine) -> None:
    out = await engine.run(approve_flow, {"item": "x"}, run_id="r")
    assert out.status == "suspended" and out.pending == ["review"]
    assert out.value is None


async def test_resolution_of_a_settled_run_then_resume_returns_the_value(engine: tether.Engine) -> None:
    await engine.run(approve_flow, {"item": "x"}, run_id="r")
    assert await engine.resolve_external("r", "review", "yes") is True
    out = await engine.resume("r", approve_flow, {"item": "x"})
    assert out.status == "ok" and out.value == {"prepared": "draft:x", "verdict": "yes"}
    assert out.replay.misses == 0


async def test_first_valid_closer_wins_and_later_ones_are_no_ops(engine: tether.Engine) -> None:
    await engine.run(approve_flow, {"item": "x"}, run_id="r")
    assert await engine.resolve_external("r", "review", "first") is True
    assert await engine.resolve_external("r", "review", "second") is False
    out = await engine.resume("r", approve_flow, {"item": "x"})
    assert out.value["verdict"] == "first"


async def test_a_resolution_after_an_abandon_is_a_no_op(engine: tether.Engine) -> None:
    await engine.run(approve_flow, {"item": "x"}, run_id="r")
    assert await engine.abandon("r", "review", "nobody will review this") is True
    assert await engine.resolve_external("r", "review", "late") is False
    out = await engine.resume("r", approve_flow, {"item": "x"})
    assert out.status == "cancelled" and out.replay.skipped == 1
    kinds = [e.kind for e in await engine.inspect("r")]
    assert kinds.count("resolution") == 0 and kinds.count("abandon") == 1


async def test_racing_closers_fold_to_the_first_in_journal_order(engine: tether.Engine) -> None:
    from tether.contracts.entries import JournalEntry

    await engine.run(approve_flow, {"item": "x"}, run_id="r")
    store = await engine.store()
    target = next(e for e in await engine.inspect("r") if e.kind == "external")
    # Two writers that both checked before either appended: the fold still picks the first.
    await store.append("r", JournalEntry(kind="abandon", ref=target.seq, scope=target.scope, key=target.key))
    await store.append(
        "r", JournalEntry(kind="resolution", ref=target.seq, scope=target.scope, key=target.key, value="late")
    )
    out = await engine.resume("r", approve_flow, {"item": "x"})
    assert out.status == "cancelled" and out.replay.skipped == 1


async def test_only_the_waiting_branch_parks(engine: tether.Engine) -> None:
    done: list[str] = []

    @tether.workflow
    async def mixed(ctx: tether.Ctx) -> list[object]:
        async def waits() -> object:
            return await ctx.await_external("human")

        async def works() -> object:
            return await ctx.step("work", lambda: done.append("worked") or "worked")

        return await ctx.parallel([waits, works])

    out = await engine.run(mixed, run_id="r")
    assert out.status == "suspended" and out.pending == ["human"] and done == ["worked"]
    await engine.resolve_external("r", "human", 42)
    again = await engine.resume("r", mixed)
    assert again.value == [42, "worked"] and done == ["worked"]


async def test_a_live_run_is_resolved_through_its_handle(engine: tether.Engine) -> None:
    release = asyncio.Event()

    @tether.workflow
    async def busy(ctx: tether.Ctx) -> list[object]:
        async def other() -> object:  # keeps the run live while the human answers
            return await ctx.step("other", release.wait)

        return await ctx.parallel([lambda: ctx.await_external("review"), other])

    handle = engine.start(busy, run_id="live")
    async for event in handle.events:
        if event.type == "external:waiting":
            break
    assert await handle.resolve_external("review", "ok") is True
    release.set()
    out = await handle
    assert out.status == "ok" and out.value == ["ok", True]


async def test_await_external_validates_with_a_schema(engine: tether.Engine) -> None:
    @tether.workflow
    async def typed(ctx: tether.Ctx) -> int:
        return await ctx.await_external("n", schema=int) + 1

    await engine.run(typed, run_id="r")
    await engine.resolve_external("r", "n", 41)  # "41" is refused: the stored JSON schema says integer
    assert (await engine.resume("r", typed)).value == 42


async def test_cancel_settles_cancelled(engine: tether.Engine) -> None:
    @tether.workflow
    async def slow(ctx: tether.Ctx) -> None:
        await ctx.step("sleep", lambda: asyncio.sleep(30))

    handle = engine.start(slow, run_id="c")
    await asyncio.sleep(0.05)
    handle.cancel("user asked")
    out = await handle
    assert out.status == "cancelled"
