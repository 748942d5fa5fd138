"""Child process: an agent calls a subprocess tool that SIGKILLs the engine mid-call.

Usage: python ledger_crash_child.py STORE_URL RUN_ID (run|resume) EFFECT_LOG (idempotent|plain)
"""

from __future__ import annotations

import asyncio
import json
import sys

import ledger_tools

import tether
from tether.contracts.messages import ChatRequest
from tether.testing import Reply, ToolCall


def script(request: ChatRequest) -> Reply:
    last = request.messages[-1]
    if last.role == "tool":
        return Reply(text="tool said: " + last.parts[0].content)  # type: ignore[union-attr]
    return Reply(tool_calls=[ToolCall("effect", {"path": sys.argv[4]})])


async def main(url: str, run_id: str, mode: str, log: str, kind: str) -> None:
    tool = tether.tool(executor="subprocess", idempotent=(kind == "idempotent"), timeout_s=30)(ledger_tools.effect)
    await drive(url, run_id, mode, tool)


async def drive(url: str, run_id: str, mode: str, tool: tether.Tool) -> None:
    """Run (or resume) one agent that calls `tool` once, and print its outcome as JSON."""
    model = tether.models.fake("fake", script=script)
    engine = tether.Engine(models=[model], routing={"loop": "fake:m"}, store=url)

    @tether.workflow(name="effects")
    async def effects(ctx: tether.Ctx) -> object:
        return await ctx.agent("do the effect", tools=[tool])

    out = await (engine.resume(run_id, effects) if mode == "resume" else engine.run(effects, run_id=run_id))
    print(json.dumps({"status": out.status, "value": out.value, "orphaned": out.replay.orphaned}))


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:6]))
