"""A support-desk session app for the session tests (also run as a child process to be SIGKILLed).

The fake model logs every request it is sent (its messages, and what it bills) to a JSONL file: the provider
request log the tests read. A user message "order N" makes the model call the `lookup` tool first; the tool
SIGKILLs its own process when `SESSION_CRASH_ORDER` names that order (a crash mid-tool).

Usage: python session_app.py STORE_URL LOG SESSION (send PROMPT | resume | branch TURN)
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import sys
from typing import Any

import tether
from tether.contracts.messages import ChatRequest, Message, ToolResultPart
from tether.testing import Reply, ToolCall

PRICE = tether.Price(input=50.0, output=50.0)
"""USD per million tokens: a turn of 100 input and 10 output tokens costs 0.0055."""
INPUT_TOKENS, OUTPUT_TOKENS = 100, 10


def billed(input_tokens: int, output_tokens: int) -> float:
    return (input_tokens * PRICE.input + output_tokens * PRICE.output) / 1_000_000


def text(m: Message) -> str:
    return m.text_content or "".join(p.content for p in m.parts if isinstance(p, ToolResultPart))


def build(url: str, log: str) -> tuple[tether.Engine, tether.Workflow]:
    def script(request: ChatRequest) -> Reply:
        messages = [[m.role, text(m)] for m in request.messages]
        out = min(OUTPUT_TOKENS, request.max_output_tokens or OUTPUT_TOKENS)
        with open(log, "a") as f:
            f.write(json.dumps({"messages": messages, "usd": billed(INPUT_TOKENS, out)}) + "\n")
        last = request.messages[-1]
        order = re.search(r"order (\d+)", last.text_content) if last.role == "user" else None
        if order is not None:
            return Reply(tool_calls=[ToolCall("lookup", {"order": order.group(1)})], input_tokens=INPUT_TOKENS,
                         output_tokens=out)
        user = next(m.text_content for m in reversed(request.messages) if m.role == "user")
        said = f" ({text(last)})" if last.role == "tool" else ""
        return Reply(text=f"re: {user}{said}", input_tokens=INPUT_TOKENS, output_tokens=out)

    @tether.tool(idempotent=True)
    def lookup(order: str) -> str:
        """Look an order up."""
        if os.environ.get("SESSION_CRASH_ORDER") == order:
            os.kill(os.getpid(), signal.SIGKILL)
        return f"order {order} shipped"

    @tether.workflow(name="support")
    async def support(ctx: tether.Ctx, prompt: str) -> Any:
        assert ctx.session is not None
        history = await ctx.session.history()
        return await ctx.agent(prompt, history=history, tools=[lookup], max_output_tokens=OUTPUT_TOKENS)

    model = tether.models.fake("fake", script=script, prices={"m": PRICE})
    engine = tether.Engine(models=[model], routing={"loop": "fake:m"}, store=url, workflows=[support])
    return engine, support


def requests(log: str) -> list[dict[str, Any]]:
    with open(log) as f:
        return [json.loads(line) for line in f]


async def main(url: str, log: str, session_id: str, action: str, *rest: str) -> None:
    engine, support = build(url, log)
    session = engine.session(session_id)
    try:
        if action == "send":
            turn = await session.send(rest[0], workflow=support)
        elif action == "resume":
            turn = await session.resume()
        else:
            await session.branch(int(rest[0]))
            turn = (await session.line())[-1]
        print(json.dumps(turn.to_json()))
    finally:
        await engine.close()


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:]))
