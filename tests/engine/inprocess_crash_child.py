"""Child process: an agent calls an in-process tool that SIGKILLs this engine mid-call.

Usage: python inprocess_crash_child.py STORE_URL RUN_ID (run|resume) EFFECT_LOG (idempotent|plain)
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from pathlib import Path

import tether
from tether.contracts.messages import ChatRequest
from tether.testing import Reply, ToolCall


def effect(path: str, idempotency_key: str = "") -> str:
    """Append one line per execution; the first execution kills the engine (this very process)."""
    with open(path, "a") as f:
        f.write(f"{idempotency_key}\n")
    marker = Path(path + ".killed")
    if not marker.exists():
        marker.write_text("x")
        os.kill(os.getpid(), signal.SIGKILL)
    return "effect done"


def script(request: ChatRequest) -> Reply:
    last = request.messages[-1]
    if last.role == "tool":
        return Reply(text="tool said: " + last.parts[0].content)  # type: ignore[union-attr]
    return Reply(tool_calls=[ToolCall("effect", {"path": sys.argv[4]})])


async def main(url: str, run_id: str, mode: str, log: str, kind: str) -> None:
    tool = tether.tool(idempotent=(kind == "idempotent"))(effect)  # in-process: the default executor
    model = tether.models.fake("fake", script=script)
    engine = tether.Engine(models=[model], routing={"loop": "fake:m"}, store=url)

    @tether.workflow(name="effects")
    async def effects(ctx: tether.Ctx) -> object:
        return await ctx.agent("do the effect", tools=[tool])

    out = await (engine.resume(run_id, effects) if mode == "resume" else engine.run(effects, run_id=run_id))
    print(json.dumps({"status": out.status, "value": out.value, "orphaned": out.replay.orphaned}))


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:6]))
