"""Steps, parallel scopes, time and randomness: the journal memo and its replay invariants (SPEC §18)."""

from __future__ import annotations

from collections import Counter

import pytest
from pydantic import BaseModel

import tether
from tether.contracts.entries import JournalEntry


def make_flow(counter: Counter[str], labels: list[str]) -> tether.Workflow:
    @tether.workflow(name="flow")
    async def flow(ctx: tether.Ctx) -> list[str]:
        out = []
        for label in labels:
            out.append(await ctx.step(label, lambda label=label: counter.update([label]) or label.upper()))
        return out

    return flow


async def test_completed_steps_replay_with_zero_executions(engine: tether.Engine, counter: Counter[str]) -> None:
    flow = make_flow(counter, ["a", "b", "c"])
    first = await engine.run(flow, run_id="r")
    assert first.status == "ok" and first.value == ["A", "B", "C"]
    again = await engine.resume("r", flow)
    assert again.value == first.value
    assert counter == Counter({"a": 1, "b": 1, "c": 1})
    assert (again.replay.hits, again.replay.misses, again.replay.reruns) == (3, 0, 0)


async def test_inserting_a_step_costs_exactly_one_execution(engine: tether.Engine, counter: Counter[str]) -> None:
    await engine.run(make_flow(counter, ["a", "b", "c"]), run_id="r")
    counter.clear()
    edited = await engine.resume("r", make_flow(counter, ["a", "new", "b", "c"]))
    assert edited.value == ["A", "NEW", "B", "C"]
    assert counter == Counter({"new": 1})
    assert (edited.replay.hits, edited.replay.misses) == (3, 1)


async def test_swapping_two_sequential_steps_replays_both(engine: tether.Engine, counter: Counter[str]) -> None:
    await engine.run(make_flow(counter, ["a", "b"]), run_id="r")
    counter.clear()
    swapped = await engine.resume("r", make_flow(counter, ["b", "a"]))
    assert swapped.value == ["B", "A"]
    assert counter == Counter()
    assert swapped.replay.hits == 2


async def test_repeated_labels_match_in_order_by_ordinal(engine: tether.Engine) -> None:
    values = iter(range(100))

    @tether.workflow
    async def repeat(ctx: tether.Ctx) -> list[int]:
        return [await ctx.step("tick", lambda: next(values)) for _ in range(3)]

    first = await engine.run(repeat, run_id="r")
    again = await engine.resume("r", repeat)
    assert first.value == again.value == [0, 1, 2]
    entries = await engine.inspect("r")
    assert sorted({e.ordinal for e in entries if e.kind == "step"}) == [0, 1, 2]


async def test_pure_replay_of_a_settled_run_appends_nothing(engine: tether.Engine, counter: Counter[str]) -> None:
    flow = make_flow(counter, ["a"])
    await engine.run(flow, run_id="r")
    before = await engine.inspect("r")
    await engine.resume("r", flow)
    after = await engine.inspect("r")
    assert len(after) == len(before)
    settles = [e for e in after if e.kind == "decision" and e.value.get("decision") == "settle"]
    assert len(settles) == 1 and settles[0].value["status"] == "ok"


async def test_parallel_branches_get_scopes_from_structure_not_timing(engine: tether.Engine) -> None:
    import asyncio

    @tether.workflow
    async def fan(ctx: tether.Ctx) -> list[int]:
        async def branch(i: int) -> int:
            await asyncio.sleep(0.01 * (3 - i))  # finish in reverse order
            return await ctx.step("work", lambda: i * 10)

        return await ctx.parallel([lambda i=i: branch(i) for i in range(3)])

    first = await engine.run(fan, run_id="r")
    assert first.value == [0, 10, 20]
    scopes = sorted(e.scope for e in await engine.inspect("r") if e.kind == "step" and e.status == "running")
    assert scopes == ["par:0:0", "par:0:1", "par:0:2"]
    again = await engine.resume("r", fan)
    assert again.value == [0, 10, 20] and again.replay.misses == 0


async def test_parallel_fail_fast_and_settle(engine: tether.Engine) -> None:
    async def boom() -> int:
        raise ValueError("boom")

    async def fine() -> int:
        return 1

    @tether.workflow
    async def settle(ctx: tether.Ctx) -> list[str]:
        res = await ctx.parallel([fine, boom], settle=True)
        return [r.status for r in res]

    @tether.workflow
    async def failfast(ctx: tether.Ctx) -> list[int]:
        return await ctx.parallel([fine, boom])

    assert (await engine.run(settle, run_id="s")).value == ["ok", "error"]
    out = await engine.run(failfast, run_id="f")
    assert out.status == "error" and isinstance(out.error, ValueError)


async def test_time_random_and_uuid_are_journaled(engine: tether.Engine) -> None:
    @tether.workflow
    async def rand(ctx: tether.Ctx) -> list[object]:
        return [ctx.now(), ctx.random(), ctx.random(key="x"), ctx.uuid()]

    first = await engine.run(rand, run_id="r")
    again = await engine.resume("r", rand)
    assert first.value == again.value
    assert again.replay.misses == 0


async def test_step_error_reruns_on_resume(engine: tether.Engine) -> None:
    attempts: list[int] = []

    def flaky() -> str:
        attempts.append(1)
        if len(attempts) == 1:
            raise RuntimeError("first time fails")
        return "done"

    @tether.workflow
    async def flow(ctx: tether.Ctx) -> str:
        return await ctx.step("flaky", flaky)

    first = await engine.run(flow, run_id="r")
    assert first.status == "error"
    again = await engine.resume("r", flow)
    assert again.status == "ok" and again.value == "done" and again.replay.reruns == 1


async def test_non_serializable_step_result_is_a_typed_error(engine: tether.Engine) -> None:
    @tether.workflow
    async def bad(ctx: tether.Ctx) -> object:
        await ctx.step("fine", lambda: 1)
        return await ctx.step("bad", lambda: object())

    out = await engine.run(bad, run_id="r")
    assert out.status == "error"
    assert isinstance(out.error, tether.NonSerializableValueError)
    assert "not JSON-serializable" in str(out.error)
    entries = await engine.inspect("r")
    assert [e.value for e in entries if e.kind == "step" and e.status == "ok"] == [1]


class Point(BaseModel):
    x: int
    y: int


async def test_pydantic_step_results_are_revalidated_on_replay(engine: tether.Engine) -> None:
    def make() -> Point:
        return Point(x=1, y=2)

    @tether.workflow
    async def flow(ctx: tether.Ctx) -> int:
        p = await ctx.step("p", make)
        assert isinstance(p, Point)
        return p.x + p.y

    assert (await engine.run(flow, run_id="r")).value == 3
    assert (await engine.resume("r", flow)).value == 3


async def test_dry_run_is_replay_strict_and_writes_nothing(engine: tether.Engine, counter: Counter[str]) -> None:
    await engine.run(make_flow(counter, ["a"]), run_id="r")
    before = await engine.inspect("r")
    ok = await engine.resume("r", make_flow(counter, ["a"]), dry_run=True)
    assert ok.status == "ok"
    edited = await engine.resume("r", make_flow(counter, ["a", "b"]), dry_run=True)
    assert edited.status == "error" and isinstance(edited.error, tether.JournalMissError)
    assert await engine.inspect("r") == before
    assert counter == Counter({"a": 1})


async def test_invalidate_reruns_exactly_that_entry(engine: tether.Engine, counter: Counter[str]) -> None:
    flow = make_flow(counter, ["a", "b"])
    await engine.run(flow, run_id="r")
    b_seq = next(
        e.seq
        for e in await engine.inspect("r")
        if e.kind == "step" and e.status == "running" and e.ordinal == 0 and e.key and e.seq and e.seq > 3
    )
    counter.clear()
    again = await engine.resume("r", flow, invalidate=[b_seq])
    assert counter == Counter({"b": 1})
    assert again.value == ["A", "B"]


async def test_hash_version_outside_the_window_refuses_before_any_effect(
    engine: tether.Engine, counter: Counter[str]
) -> None:
    flow = make_flow(counter, ["a"])
    await engine.run(flow, run_id="r")
    store = await engine.store()
    await store.append("r", JournalEntry(kind="decision", key="x", hash_version=99, value={"decision": "future"}))
    before = await engine.inspect("r")
    with pytest.raises(tether.JournalCompatibilityError, match="hash_version 99"):
        await engine.resume("r", make_flow(counter, ["a", "b"]))
    assert counter == Counter({"a": 1})
    assert await engine.inspect("r") == before


def test_unknown_store_url_is_a_config_error() -> None:
    with pytest.raises(tether.ConfigError, match="unknown store URL"):
        tether.Engine(store="redis://localhost")


async def test_run_sync_for_scripts(tmp_path: object) -> None:
    import threading

    @tether.workflow
    async def flow(ctx: tether.Ctx) -> int:
        return await ctx.step("one", lambda: 1)

    result: list[int] = []

    def go() -> None:
        eng = tether.Engine(store=f"sqlite:///{tmp_path}/x.db")
        result.append(eng.run_sync(flow, run_id="sync").value)

    t = threading.Thread(target=go)
    t.start()
    t.join()
    assert result == [1]
