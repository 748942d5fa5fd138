"""Child process: an orchestrator spawns four children; the store kills the process after two finish.

Usage: python tree_crash_child.py STORE_URL RUN_ID (crash|resume|clean) LOGFILE
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from typing import Any

import tether
from tether.contracts.entries import JournalEntry, Lease
from tether.contracts.messages import ChatRequest
from tether.engine.options import Containment
from tether.stores import open_store
from tether.testing import Reply, ToolCall


class KillAfterChildren:
    def __init__(self, inner: Any, n: int) -> None:
        self._inner, self._left = inner, n

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def append(self, run_id: str, entry: JournalEntry, lease: Lease | None = None) -> int:
        seq = await self._inner.append(run_id, entry, lease)
        if entry.kind == "agent" and entry.ref is not None and entry.parent_agent_id is not None:
            self._left -= 1
            if self._left == 0:
                os.kill(os.getpid(), signal.SIGKILL)
        return int(seq)


def script_for(log: str) -> Any:
    def script(request: ChatRequest) -> Reply:
        orchestrator = any(t.name == "spawn_agent" for t in request.tools)
        turn = sum(1 for m in request.messages if m.role == "assistant")
        goal = next(m.text_content for m in request.messages if m.role == "user")
        with open(log, "a") as f:
            f.write(f"{'orch' if orchestrator else goal}:{turn}\n")
        if orchestrator and turn == 0:
            return Reply(tool_calls=[ToolCall("spawn_agent", {"goal": f"c{i}"}) for i in range(4)])
        if orchestrator:
            results = [json.loads(p.content)["text"] for m in request.messages if m.role == "tool" for p in m.parts]
            return Reply(text=" | ".join(results))
        slow = goal in ("c2", "c3")
        return Reply(text=f"{goal} done", latency_s=1.5 if slow else 0.01)

    return script


async def main(url: str, run_id: str, mode: str, log: str) -> None:
    store = open_store(url)
    if mode == "crash":
        store = KillAfterChildren(store, 2)
    model = tether.models.fake("fake", script=script_for(log))
    engine = tether.Engine(models=[model], routing={"loop": "fake:m"}, store=store)

    @tether.workflow(name="orch")
    async def orch(ctx: tether.Ctx) -> Any:
        return await ctx.orchestrate("split in four")

    containment = Containment(max_agents=10, max_concurrent=4, max_depth=2)
    out = await (engine.resume(run_id, orch) if mode == "resume"
                 else engine.run(orch, run_id=run_id, containment=containment))
    print(json.dumps({"status": out.status, "value": out.value}))


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:5]))
