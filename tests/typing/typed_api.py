"""Typing cases checked by `mypy --strict` (tests/typing/test_typing.py): the types the public API promises."""

from __future__ import annotations

import functools
from typing import Any, Literal, assert_type

from pydantic import BaseModel

import tether


class Verdict(BaseModel):
    score: float
    rationale: str


async def flow(ctx: tether.Ctx, question: str) -> dict[str, Any]:
    text = await ctx.agent(f"Answer: {question}", label="answer", max_output_tokens=400)
    assert_type(text, str)
    verdict = await ctx.agent(f"Score: {text}", output=Verdict, est_cost=0.02)
    assert_type(verdict, Verdict)
    maybe = await ctx.agent("Score again", output=Verdict, on_error="none")
    assert_type(maybe, Verdict | None)
    maybe_text = await ctx.agent("Say hi", on_error="none")
    assert_type(maybe_text, str | None)
    full = await ctx.agent("Score fully", output=Verdict, full=True)
    assert_type(full, tether.AgentResult[Verdict])
    assert_type(full.output, Verdict | None)
    full_text = await ctx.agent("Say hi", full=True)
    assert_type(full_text, tether.AgentResult[str])
    loose = await ctx.agent("Schema", output={"type": "object", "properties": {"a": {"type": "integer"}}})
    assert_type(loose, Any)
    planned = await ctx.orchestrate("Plan it", output=Verdict, max_spawns=3)
    assert_type(planned, Verdict)

    def count() -> int:
        return 3

    async def fetch() -> list[str]:
        return ["a"]

    assert_type(await ctx.step("count", count), int)
    assert_type(await ctx.step("fetch", fetch, key="f"), list[str])
    assert_type(await ctx.step("lambda", lambda: "x"), str)

    async def judge(angle: str) -> float:
        return (await ctx.agent(angle, output=Verdict)).score

    scores = await ctx.parallel([functools.partial(judge, a) for a in ("practical", "skeptical")])
    assert_type(scores, list[float])
    settled = await ctx.parallel([functools.partial(judge, "x")], settle=True)
    assert_type(settled, list[tether.BranchOutcome])

    async def child(ctx: tether.Ctx, n: int) -> int:
        return n

    assert_type(await ctx.workflow(child, {"n": 1}), int)
    approved = await ctx.await_external("approve", schema=bool)
    assert_type(approved, bool)
    assert_type(ctx.now(), float)
    assert_type(ctx.budget.remaining(), float | None)
    return {"verdict": verdict.score, "approved": approved}


async def drive(engine: tether.Engine) -> None:
    handle = engine.start(flow, {"question": "Monorepo?"}, run_id="typed", budget_usd=1.0)
    assert_type(handle, tether.RunHandle)
    outcome = await engine.run(flow, {"question": "Monorepo?"}, budget_usd=2.0, strict_pricing=True)
    assert_type(outcome, tether.RunOutcome)
    resumed = await engine.resume("typed", flow, {"question": "Monorepo?"}, dry_run=True)
    assert_type(resumed.replay.hits, int)
    assert_type(await engine.cancel("typed"), Literal["cancelled", "requested"])


def script(engine: tether.Engine) -> tether.RunOutcome:
    return engine.run_sync(flow, {"question": "x"}, run_id="s", deadline_s=30.0)
