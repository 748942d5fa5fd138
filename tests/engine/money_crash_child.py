"""Child process for the money-edge crash tests: starts a priced run, dies where the parent asks.

Usage: python money_crash_child.py STORE_URL RUN_ID MODE LOG

- `after-start`: SIGKILL itself right after the run's first meta write (before any effect is journaled).
- `in-flight`: run until the parent SIGKILLs it; every request the fake model receives is logged to LOG
  first (one line each), so the parent can kill while a call is in flight.
- `gated-setup`: run `gated` until it suspends on "go", then resolve it (nothing is paid yet).
- `gated-resume`: resume `gated` (its one agent answers after 5 s); exit 3 with the message when
  another process holds the run's lease (`LeaseHeldError`).
- `tool-loop:N`: run (or resume) a three-turn tool loop whose turn N hangs until the parent kills it
  (N = -1: nothing hangs); LOG gets one line per request, naming its turn.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from typing import Any

import tether
from tether.contracts.entries import Lease, RunMeta
from tether.stores import open_store
from tether.testing import Reply, ToolCall

PRICE = tether.Price(input=10.0, output=20.0)  # one 1,000-in / 500-out turn = 0.02 USD


class DieAfterFirstMeta:
    """A real store that SIGKILLs the process once the run's first meta write is durable."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def put_meta(self, meta: RunMeta, lease: Lease | None = None) -> None:
        await self._inner.put_meta(meta, lease)
        os.kill(os.getpid(), signal.SIGKILL)


def model(log: str, latency: float) -> Any:
    def script(request: Any) -> Reply:
        with open(log, "a") as f:
            f.write(request.messages[-1].text_content + "\n")
        return Reply(text="ok", input_tokens=1_000, output_tokens=500, latency_s=latency)

    return tether.models.fake("fake", script=script, prices={"m": PRICE})


@tether.workflow(name="forty")
async def forty(ctx: tether.Ctx) -> list[Any]:
    """Forty sequential agents of 0.02 USD each: 0.80 USD if nothing bounds them."""
    out = []
    for i in range(40):
        try:
            out.append(await ctx.agent(f"task {i}", est_cost=0.02, max_output_tokens=500))
        except tether.BudgetExhaustedError:
            break
    return out


@tether.tool(idempotent=True)
def lookup(i: int) -> str:
    """Look something up."""
    return f"fact {i}"


@tether.workflow(name="loop3")
async def loop3(ctx: tether.Ctx) -> Any:
    """One agent, three tool turns, then an answer."""
    return await ctx.agent("research", tools=[lookup], est_cost=0.05, max_output_tokens=500)


@tether.workflow(name="gated")
async def gated(ctx: tether.Ctx) -> Any:
    """Suspends on "go", then pays for one agent."""
    await ctx.await_external("go")
    return await ctx.agent("pay once", est_cost=0.02, max_output_tokens=500)


def looping_model(log: str, hang_turn: int) -> Any:
    def script(request: Any) -> Reply:
        turn = sum(1 for m in request.messages if m.role == "assistant")
        with open(log, "a") as f:
            f.write(f"turn {turn}\n")
        latency = 30.0 if turn == hang_turn else 0.0
        if turn < 3:
            return Reply(tool_calls=[ToolCall("lookup", {"i": turn})], input_tokens=1_000, output_tokens=500,
                         latency_s=latency)
        return Reply(text="done", input_tokens=1_000, output_tokens=500, latency_s=latency)

    return tether.models.fake("fake", script=script, prices={"m": PRICE})


def engine(url: str, log: str, latency: float, store: Any = None, hang_turn: int | None = None) -> tether.Engine:
    fake = model(log, latency) if hang_turn is None else looping_model(log, hang_turn)
    return tether.Engine(models=[fake], routing={"loop": "fake:m"}, store=store or url, workflows=[forty, loop3, gated])


async def main(url: str, run_id: str, mode: str, log: str) -> None:
    if mode.startswith("gated-"):
        eng = engine(url, log, 5.0)
        try:
            if mode == "gated-setup":
                assert (await eng.run(gated, {}, run_id=run_id, budget_usd=1.0)).status == "suspended"
                assert await eng.resolve_external(run_id, "go", True)
                return
            try:
                out = await eng.resume(run_id)
            except tether.LeaseHeldError as exc:
                print(exc, flush=True)
                raise SystemExit(3) from None
            assert out.status == "ok", out
        finally:
            await eng.close()
        return
    if mode.startswith("tool-loop:"):
        eng = engine(url, log, 0.0, hang_turn=int(mode.partition(":")[2]))
        if await eng.runs():
            await eng.resume(run_id)
        else:
            await eng.run(loop3, {}, run_id=run_id, budget_usd=1.0)
        return
    if mode == "after-start":
        eng = engine(url, log, 0.0, store=DieAfterFirstMeta(open_store(url)))
    else:
        eng = engine(url, log, 30.0)
    await eng.run(forty, {}, run_id=run_id, budget_usd=0.10)


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:5]))
