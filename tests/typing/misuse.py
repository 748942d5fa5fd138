"""Deliberate misuse: mypy must report each line that carries an expected-error comment (see test_typing.py)."""

from __future__ import annotations

from pydantic import BaseModel

import tether


class Verdict(BaseModel):
    score: float


async def flow(ctx: tether.Ctx) -> float:
    verdict = await ctx.agent("Score it", outptu=Verdict)  # error: Unexpected keyword argument "outptu"
    text: int = await ctx.agent("Say hi")  # error: Incompatible types in assignment
    await ctx.step("s", lambda: 1, keys="k")  # error: Unexpected keyword argument "keys"
    return float(verdict) + text


async def drive(engine: tether.Engine) -> None:
    await engine.run(flow, budgt_usd=1.0)  # error: Unexpected keyword argument "budgt_usd"
