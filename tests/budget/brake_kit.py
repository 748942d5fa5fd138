"""Runaway workloads for the brake tests: an agent that asks for the same tool call forever (or two calls in turn),
each turn logged to a request log before its reply, so a test reads what the provider was sent across processes.

Usage (the crash test's child): python brake_kit.py STORE_URL RUN_ID (crash|resume) LOG
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from typing import Any

import tether
from tether.contracts.messages import ChatRequest
from tether.testing import Reply, ToolCall

PRICE = tether.Price(input=3.0, output=15.0)  # a turn of 1,000 in and 200 out costs 0.006 USD


def looping_model(log: str | None = None, *, alternate: bool = False) -> Any:
    """Always the same `poll(job=42)` call (or `poll(42)`, `poll(43)` in turn); never an answer."""

    def script(request: ChatRequest) -> Reply:
        turn = sum(1 for m in request.messages if m.role == "assistant")
        if log is not None:
            with open(log, "a") as f:  # before the reply: a request sent is a request logged
                f.write(f"{turn}\n")
        job = 42 + (turn % 2 if alternate else 0)
        return Reply(tool_calls=[ToolCall("poll", {"job": job})], input_tokens=1_000, output_tokens=200)

    return tether.models.fake("fake", script=script, prices={"m": PRICE})


def poll_tool(kill_on: int | None = None) -> tether.Tool:
    runs = {"n": 0}

    @tether.tool
    def poll(job: int) -> str:
        """Poll a job's status."""
        runs["n"] += 1
        if kill_on is not None and runs["n"] == kill_on:
            os.kill(os.getpid(), signal.SIGKILL)  # mid-loop: the turn asking for it is checkpointed, the tool not
        return f"job {job}: still running"

    return poll


def looping_workflow(poll: tether.Tool) -> tether.Workflow:
    @tether.workflow(name="looping")
    async def looping(ctx: tether.Ctx) -> Any:
        return await ctx.agent("wait for job 42", tools=[poll])

    return looping


async def _main(url: str, run_id: str, mode: str, log: str) -> None:
    flow = looping_workflow(poll_tool(kill_on=2 if mode == "crash" else None))
    engine = tether.Engine(models=[looping_model(log)], routing={"loop": "fake:m"}, store=url)
    try:
        if mode == "resume":
            out = await engine.resume(run_id, flow)
        else:
            out = await engine.run(flow, run_id=run_id, budget_usd=5.0, max_identical_tool_calls=2)
    finally:
        await engine.close()
    data = out.error.data if isinstance(out.error, tether.TetherError) else {}
    print(json.dumps({"status": out.status, "reason": data.get("reason"), "evidence": data.get("evidence"),
                      "spent": out.cost.total_usd, "calls": out.cost.provider_calls}))


if __name__ == "__main__":
    asyncio.run(_main(*sys.argv[1:5]))
