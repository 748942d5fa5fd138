"""MCP tools: an agent uses mcp-server-time (from PyPI) next to its own tool, then resumes for free.

Runs offline on the scripted fake model. Needs `pip install tether[mcp] mcp-server-time`.
Run: .venv/bin/python examples/mcp_time.py
"""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile

import tether
from tether.contracts.messages import ChatRequest, ToolResultPart
from tether.testing import Reply, ToolCall

# The server is a child process started when the agent first needs it and stopped when the run
# settles. `--local-timezone` pins the tools' descriptions (part of the agent's identity).
clock = tether.mcp.stdio(sys.executable, "-m", "mcp_server_time", "--local-timezone", "UTC", deny=["convert_time"])


@tether.tool
def shout(text: str) -> str:
    """Say the text loudly."""
    return text.upper()


def script(request: ChatRequest) -> Reply:
    """A stand-in for a real model: call the MCP tool, then our own tool, then answer."""
    results = [p for m in request.messages for p in m.parts if isinstance(p, ToolResultPart)]
    if not results:
        return Reply(tool_calls=[ToolCall("get_current_time", {"timezone": "Asia/Tokyo"})])
    if len(results) == 1:
        now = json.loads(results[0].content)["datetime"]  # the server's answer, as the model read it
        return Reply(tool_calls=[ToolCall("shout", {"text": f"it is {now[11:16]} in Tokyo"})])
    return Reply(text=results[-1].content)


@tether.workflow(name="tokyo-time")
async def tokyo_time(ctx: tether.Ctx) -> str:
    return str(await ctx.agent("What time is it in Tokyo? Shout it.", tools=[clock, shout]))


async def main() -> None:
    model = tether.models.fake("fake", script=script)
    with tempfile.TemporaryDirectory() as tmp:
        engine = tether.Engine(models=[model], routing={"loop": "fake:m"}, store=f"sqlite:///{tmp}/t.db")
        first = await engine.run(tokyo_time, run_id="tokyo")
        print("tools the model saw:", [t.name for t in model.requests[0].tools])
        print("first run:", first.status, first.value)
        for row in await engine.effect_ledger("tokyo"):
            print(f"  ledger: {row.tool} via {row.executor}: {row.outcome} in {row.duration_ms:.0f} ms")
        again = await engine.resume("tokyo", tokyo_time)
        rows = await engine.effect_ledger("tokyo")
        print("resume:", again.status, "hits", again.replay.hits, "misses", again.replay.misses,
              "| ledger rows", len(rows), "| model calls", model.calls)
        await engine.close()


if __name__ == "__main__":
    asyncio.run(main())
