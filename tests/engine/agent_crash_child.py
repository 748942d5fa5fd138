"""Child process: a five-turn tool loop that SIGKILLs itself inside the third tool call.

Usage: python agent_crash_child.py STORE_URL RUN_ID (crash|resume) LOGFILE
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys

import tether
from tether.contracts.messages import ChatRequest
from tether.testing import Reply, ToolCall


def build(mode: str, log: str) -> tuple[tether.Engine, tether.Workflow]:
    def script(request: ChatRequest) -> Reply:
        tool_results = sum(1 for m in request.messages if m.role == "tool")
        with open(log, "a") as f:
            f.write(f"turn{tool_results + 1}\n")
        if tool_results < 5:
            return Reply(tool_calls=[ToolCall("record", {"n": tool_results + 1})], input_tokens=100, output_tokens=10)
        return Reply(text=f"finished after {tool_results} tools", input_tokens=100, output_tokens=10)

    @tether.tool
    def record(n: int) -> str:
        """Record step n."""
        if mode == "crash" and n == 3:
            os.kill(os.getpid(), signal.SIGKILL)
        return f"recorded {n}"

    @tether.workflow(name="five")
    async def five(ctx: tether.Ctx) -> object:
        return await ctx.agent("do five steps", tools=[record])

    model = tether.models.fake("fake", script=script, prices={"m": tether.Price(input=1.0, output=1.0)})
    return tether.Engine(models=[model], routing={"loop": "fake:m"}, store=sys.argv[1]), five


async def main(url: str, run_id: str, mode: str, log: str) -> None:
    engine, five = build(mode, log)
    out = await (engine.resume(run_id, five) if mode == "resume" else engine.run(five, run_id=run_id))
    print(json.dumps({"status": out.status, "value": out.value, "cost": out.cost.total_usd}))


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:5]))
