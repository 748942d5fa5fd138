"""Child process for the paid-and-lost call test: one agent's tool loop, SIGKILLed between a turn's draw and its
checkpoint.

Usage: python lost_call_child.py STORE_URL RUN_ID (crash|resume) LOG

- `crash`: run the agent; once `KILL_AFTER_DRAWS` turn draws are durable, the next checkpoint write kills the
  process (a real SIGKILL) before a byte of it reaches the store: that turn was paid, its reply is lost.
- `resume`: resume the run (the agent restarts from its last checkpoint and sends the lost turn again); print the
  outcome's status and cost report as one JSON line.

LOG gets one line per model request, naming its turn.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from collections.abc import Sequence
from typing import Any

import tether
from tether.contracts.entries import JournalEntry, Lease
from tether.contracts.messages import ChatRequest
from tether.journal.cost import is_draw
from tether.stores import open_store
from tether.testing import Reply, ToolCall

PRICE = tether.Price(input=10.0, output=20.0)
"""USD per million tokens."""
TURNS = 4
"""Three tool turns, then the answer."""
KILL_AFTER_DRAWS = 2
"""The kill lands after the second turn's draw is durable, before that turn's checkpoint."""


def usage_of(turn: int) -> tuple[int, int]:
    """Each turn's (input, output) tokens differ, so each costs its own figure."""
    return 1_000 + 100 * turn, 200 + 50 * turn


def cost_of(turn: int) -> float:
    inp, out = usage_of(turn)
    return (inp * PRICE.input + out * PRICE.output) / 1_000_000


class KillBeforeCheckpoint:
    """A real store that SIGKILLs the process on the first checkpoint write after `draws` turn draws are durable."""

    def __init__(self, inner: Any, draws: int) -> None:
        self._inner, self._left = inner, draws

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def _seen(self, entries: Sequence[JournalEntry]) -> None:
        self._left -= sum(1 for e in entries if is_draw(e))

    async def append(self, run_id: str, entry: JournalEntry, lease: Lease | None = None) -> int:
        seq = await self._inner.append(run_id, entry, lease)
        self._seen([entry])
        return int(seq)

    async def append_many(self, run_id: str, entries: Sequence[JournalEntry], lease: Lease | None = None) -> Any:
        seqs = await self._inner.append_many(run_id, entries, lease)
        self._seen(entries)
        return seqs

    async def put_blob(self, key: str, data: bytes, lease: Lease | None = None) -> None:
        if self._left <= 0:  # the journal writer flushed the turn's draw before this checkpoint write
            os.kill(os.getpid(), signal.SIGKILL)
        await self._inner.put_blob(key, data, lease)


@tether.tool(idempotent=True)
def lookup(i: int) -> str:
    """Look something up."""
    return f"fact {i}"


@tether.workflow(name="researcher")
async def researcher(ctx: tether.Ctx) -> Any:
    return await ctx.agent("research", tools=[lookup], est_cost=0.05, max_output_tokens=500)


def model(log: str) -> Any:
    def script(request: ChatRequest) -> Reply:
        turn = sum(1 for m in request.messages if m.role == "assistant")
        with open(log, "a") as f:
            f.write(f"turn {turn}\n")
        inp, out = usage_of(turn)
        if turn < TURNS - 1:
            return Reply(tool_calls=[ToolCall("lookup", {"i": turn})], input_tokens=inp, output_tokens=out)
        return Reply(text="done", input_tokens=inp, output_tokens=out)

    return tether.models.fake("fake", script=script, prices={"m": PRICE})


async def main(url: str, run_id: str, mode: str, log: str) -> None:
    store = open_store(url)
    engine = tether.Engine(models=[model(log)], routing={"loop": "fake:m"},
                           store=KillBeforeCheckpoint(store, KILL_AFTER_DRAWS) if mode == "crash" else store)
    try:
        if mode == "crash":
            await engine.run(researcher, run_id=run_id, budget_usd=1.0)
            raise SystemExit("the kill never landed")
        out = await engine.resume(run_id, researcher)
        print(json.dumps({"status": out.status, "value": out.value, "cost": out.cost.model_dump(mode="json")}))
    finally:
        await engine.close()


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:5]))
