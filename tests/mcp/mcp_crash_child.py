"""Child process: an engine whose agent calls our MCP server over stdio, killed by the test.

Usage: python mcp_crash_child.py STORE_URL RUN_ID MODE MARKER CALLS PIDS
MODE `after`: the echo call completes, then the next model turn writes MARKER and hangs.
MODE `during-plain` / `during-idempotent`: the call itself hangs (slow / wait_read).
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import tether
from tether.contracts.messages import ChatRequest
from tether.testing import Reply, ToolCall

APP = Path(__file__).with_name("server_app.py")
CALLS = {
    "after": ToolCall("echo", {"text": "once"}),
    "during-plain": ToolCall("slow", {"seconds": 600}),
    "during-idempotent": ToolCall("wait_read", {"seconds": 600}),
}


def workflow(server: tether.mcp.McpToolset) -> tether.Workflow:
    @tether.workflow(name="crashy")
    async def crashy(ctx: tether.Ctx) -> str:
        return str(await ctx.agent("Call the server.", tools=[server]))

    return crashy


def server(calls: str, pids: str) -> tether.mcp.McpToolset:
    env = {"TETHER_TEST_CALLS": calls, "TETHER_TEST_PIDS": pids}
    if os.environ.get("TETHER_TEST_STUBBORN"):
        env["TETHER_TEST_STUBBORN"] = "1"
    return tether.mcp.stdio(sys.executable, str(APP), "stdio", env=env, timeout_s=None)


async def main(url: str, run_id: str, mode: str, marker: str, calls: str, pids: str) -> None:
    def script(request: ChatRequest) -> Reply:
        if request.messages[-1].role == "tool":
            Path(marker).write_text("next turn")
            return Reply(text="never", latency_s=600)  # the test kills us here
        return Reply(tool_calls=[CALLS[mode]])

    model = tether.models.fake("fake", script=script)
    engine = tether.Engine(models=[model], routing={"loop": "fake:m"}, store=url)
    await engine.run(workflow(server(calls, pids)), run_id=run_id)


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:7]))
