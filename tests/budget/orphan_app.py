"""An app for the orphan tests: two parallel agents, then two more, on the OpenAI-compatible adapter.

The engine's store and the provider's base URL come from the environment, so the test's child process, its
in-process resumes and the `tether` CLI (`--app orphan_app:engine`) all drive the same run.

Usage (the child the test SIGKILLs): python orphan_app.py RUN_ID
"""

from __future__ import annotations

import asyncio
import os
import sys
from typing import Any

import tether

PRICE = tether.Price(input=1.0, output=20.0)  # a 4,096-token call costs 0.082 USD at worst
CEILING_USD = 0.20


def make_engine(**options: Any) -> tether.Engine:
    """The app's engine (`options` are further `tether.Engine` arguments, e.g. a tracer provider)."""
    model = tether.models.openai_compatible("local", os.environ["ORPHAN_BASE_URL"], api_key="sk-local-test")
    return tether.Engine(models=[model], routing={"loop": "local:m"}, prices={"local:m": PRICE},
                         store=os.environ["ORPHAN_STORE"], workflows=[pair], **options)


@tether.workflow(name="pair")
async def pair(ctx: tether.Ctx) -> list[Any]:
    both = await ctx.parallel([lambda: ctx.agent("Write part A."), lambda: ctx.agent("Write part B.")])
    return [*both, await ctx.agent("Write part C."), await ctx.agent("Write part D.")]


engine = make_engine() if "ORPHAN_STORE" in os.environ else None

if __name__ == "__main__":
    assert engine is not None
    asyncio.run(engine.run(pair, run_id=sys.argv[1], budget_usd=CEILING_USD))
