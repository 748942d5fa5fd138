"""The audited run: a workflow with a tool and two agents on the fake model (importable by generated tests)."""

from __future__ import annotations

import os
from typing import Any

import tether
from tether.testing import Reply, ToolCall


@tether.tool
def lookup(city: str) -> str:
    """Look up the weather."""
    return f"sunny in {city}"


def script(request: tether.contracts.ChatRequest) -> Reply:
    if any(m.role == "tool" for m in request.messages):
        return Reply(text="It is sunny.", input_tokens=120, output_tokens=10)
    if any(t.name == "lookup" for t in request.tools):
        return Reply(tool_calls=[ToolCall("lookup", {"city": "Paris"})], input_tokens=100, output_tokens=5)
    return Reply(text="Summary: sunny.", input_tokens=80, output_tokens=6)


@tether.workflow(name="weather")
async def weather(ctx: tether.Ctx, city: str) -> dict[str, Any]:
    answer = await ctx.agent(f"Weather in {city}?", tools=[lookup], label="ask", agent_type="asker")
    summary = await ctx.agent(f"Summarize: {answer}", label="sum", agent_type="summarizer")
    return {"answer": answer, "summary": summary}


def make_engine(store: Any) -> tether.Engine:
    model = tether.models.fake("fake", script=script, prices={"m": tether.Price(input=3.0, output=15.0)})
    return tether.Engine(models=[model], routing={"loop": "fake:m"}, store=store)


engine = make_engine(os.environ.get("TETHER_AUDIT_TEST_STORE", "memory://"))
"""The engine a generated cassette test resolves (`audited_flow:engine`); the test points it at its own store."""
