"""Shared workflows and scripts for the observability tests: priced fake models, a phase, agents, a tool."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import tether
from tether.contracts.messages import ChatRequest
from tether.testing import Reply, ToolCall

PRICE = tether.Price(input=2.0, output=10.0)
PROMPT_SECRET = "the-prompt-text-nobody-may-see"


def user_text(request: ChatRequest) -> str:
    """The first user message of a request (the agent's prompt)."""
    return next((m.text_content for m in request.messages if m.role == "user"), "")


def answered(request: ChatRequest) -> bool:
    """Whether the conversation already holds a tool result (the next reply is the answer)."""
    return any(m.role == "tool" for m in request.messages)


@tether.tool
def lookup(topic: str) -> str:
    """Look a topic up."""
    return f"facts about {topic}"


def researcher_script(request: ChatRequest) -> Reply:
    """`research ...` calls `lookup` once, then answers; anything else answers at once."""
    prompt = user_text(request)
    if prompt.startswith("research") and not answered(request):
        return Reply(tool_calls=[ToolCall("lookup", {"topic": "tides"})], input_tokens=120, output_tokens=15)
    return Reply(text=f"answer to {prompt[:20]}", input_tokens=80, output_tokens=12, chunks=3)


@tether.workflow(name="study")
async def study(ctx: tether.Ctx) -> list[Any]:
    """A phase, two agents, one tool: the shape the OTel acceptance test exports."""
    async with ctx.phase("gather"):
        first = await ctx.agent(f"research tides {PROMPT_SECRET}", tools=[lookup], label="researcher")
        second = await ctx.agent(f"summarize {PROMPT_SECRET}", label="writer")
    return [first, second]


def engine_for(tmp_path: Path, script: Any = researcher_script, **options: Any) -> tuple[tether.Engine, Any]:
    model = tether.models.fake("fake", script=script, prices={"m": PRICE})
    engine = tether.Engine(models=[model], routing={"loop": "fake:m"}, store=f"sqlite:///{tmp_path}/t.db", **options)
    return engine, model
