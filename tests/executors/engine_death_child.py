"""Child process: an engine whose agent calls a tool that never returns, until the test kills us.

Usage: python engine_death_child.py STORE_URL (subprocess|sandbox) TOKEN
The tool's environment carries TETHER_TEST_MARK=TOKEN, so the test finds every process of it.
"""

from __future__ import annotations

import asyncio
import sys

import toolbox

import tether
from tether.contracts.messages import ChatRequest
from tether.testing import Reply, ToolCall


def script(request: ChatRequest) -> Reply:
    return Reply(tool_calls=[ToolCall("sleep_with_grandchild_forever", {})])


async def main(url: str, executor: str, token: str) -> None:
    tool = tether.tool(executor=executor, env={"TETHER_TEST_MARK": token})(toolbox.sleep_with_grandchild_forever)
    engine = tether.Engine(models=[tether.models.fake("fake", script=script)], routing={"loop": "fake:m"}, store=url)

    @tether.workflow(name="forever")
    async def forever(ctx: tether.Ctx) -> object:
        return await ctx.agent("wait", tools=[tool])

    await engine.run(forever, run_id="forever")


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:4]))
