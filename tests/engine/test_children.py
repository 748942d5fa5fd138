"""Child workflows: their own scope, journaled once, replayed whole, with a budget sub-account."""

from __future__ import annotations

from collections import Counter

import tether


async def test_child_workflows_replay_without_running_their_body(engine: tether.Engine, counter: Counter[str]) -> None:
    @tether.workflow(name="child")
    async def child(ctx: tether.Ctx, n: int) -> int:
        counter.update(["child-body"])
        return await ctx.step("double", lambda: n * 2)

    @tether.workflow(name="parent")
    async def parent(ctx: tether.Ctx) -> list[int]:
        return [await ctx.workflow(child, {"n": 1}), await ctx.workflow(child, {"n": 2})]

    first = await engine.run(parent, run_id="p")
    assert first.value == [2, 4]
    scopes = {e.scope for e in await engine.inspect("p") if e.kind == "step"}
    assert scopes == {"wf:child:0", "wf:child:1"}
    again = await engine.resume("p", parent)
    assert again.value == [2, 4] and counter["child-body"] == 2


async def test_a_crashed_child_is_redispatched_and_its_finished_steps_replay(
    engine: tether.Engine, counter: Counter[str]
) -> None:
    fail = {"on": True}

    @tether.workflow(name="child")
    async def child(ctx: tether.Ctx) -> str:
        await ctx.step("one", lambda: counter.update(["one"]) or 1)
        if fail["on"]:
            raise RuntimeError("child crashed")
        return await ctx.step("two", lambda: counter.update(["two"]) or "two")

    @tether.workflow(name="parent")
    async def parent(ctx: tether.Ctx) -> str:
        return await ctx.workflow(child)

    assert (await engine.run(parent, run_id="p")).status == "error"
    fail["on"] = False
    again = await engine.resume("p", parent)
    assert again.value == "two" and counter == Counter({"one": 1, "two": 1})


async def test_child_budget_is_a_fraction_of_the_parent_remainder(engine: tether.Engine) -> None:
    seen: dict[str, float | None] = {}

    @tether.workflow(name="child")
    async def child(ctx: tether.Ctx) -> None:
        seen["child"] = ctx.budget.remaining()

    @tether.workflow(name="parent")
    async def parent(ctx: tether.Ctx) -> None:
        seen["parent"] = ctx.budget.remaining()
        await ctx.workflow(child, budget_fraction=0.5)

    await engine.run(parent, run_id="p", budget_usd=2.0)
    assert seen == {"parent": 2.0, "child": 1.0}
