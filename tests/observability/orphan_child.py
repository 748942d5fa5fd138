"""Child process for the orphaned-spend event test: one priced agent, killed while its call is in flight.

Usage: python orphan_child.py STORE_URL LOG   (the fake model writes LOG when the request arrives)
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

import tether
from tether.testing import Reply

PRICE = tether.Price(input=10.0, output=20.0)


def engine(store: str, log: str | None) -> tether.Engine:
    def script(request: Any) -> Reply:
        if log is not None:
            Path(log).write_text("in flight\n")
            return Reply(text="never", input_tokens=1_000, output_tokens=500, latency_s=60)
        return Reply(text="done", input_tokens=1_000, output_tokens=500)

    model = tether.models.fake("fake", script=script, prices={"m": PRICE})
    return tether.Engine(models=[model], routing={"loop": "fake:m"}, store=store, workflows=[solo])


@tether.workflow(name="solo")
async def solo(ctx: tether.Ctx) -> Any:
    return await ctx.agent("work", label="worker", max_output_tokens=500)


async def main(store: str, log: str) -> None:
    await engine(store, log).run(solo, run_id="o", budget_usd=1.0)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
