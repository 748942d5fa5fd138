"""Tool budgets: cap a tool-hungry agent, grant it one extension, and keep a summary turn in reserve.

Run: .venv/bin/python examples/tool_budget.py
"""

from __future__ import annotations

import asyncio
import tempfile

import tether
from tether.testing import Reply, ToolCall


@tether.tool
def search(query: str) -> str:
    """Search the docs."""
    return f"3 pages mention {query!r}"


def tool_hungry(request: tether.contracts.ChatRequest) -> Reply:
    """A model that never stops searching on its own; asked for a summary, it writes one."""
    if request.tool_choice == "none":
        return Reply(text="Summary: the retry policy lives in dispatch.py; backoff doubles up to 8 s.")
    searches = sum(1 for m in request.messages if m.role == "tool")
    return Reply(tool_calls=[ToolCall("search", {"query": f"retry policy, angle {searches}"})])


BUDGET = tether.ToolBudget(
    max_tool_calls=3,
    notices=True,  # tell the model when it has used 50% and 80% of its calls
    extension=tether.ToolBudgetExtension(increment=2, max_extensions=1, min_headroom_usd=0.01),
    finalization_reserve=tether.FinalizationReserve(max_output_tokens=300),
)


@tether.workflow(name="research")
async def research(ctx: tether.Ctx) -> dict[str, object]:
    result = await ctx.agent(
        "Find where the retry policy lives.", tools=[search], tool_budget=BUDGET, full=True
    )
    summary = result.tool_budget.model_dump(exclude_none=True) if result.tool_budget else None
    return {"status": result.status, "output": result.output, "tool_budget": summary}


async def main() -> None:
    model = tether.models.fake("fake", script=tool_hungry, prices={"m": tether.Price(input=3.0, output=15.0)})
    with tempfile.TemporaryDirectory() as tmp:
        engine = tether.Engine(models=[model], routing={"loop": "fake:m"}, store=f"sqlite:///{tmp}/t.db")
        first = await engine.run(research, run_id="research-1", budget_usd=0.50)
        print("status:", first.value["status"], "after", model.calls, "model calls")
        print("output:", first.value["output"])
        print("tool budget (live):", first.value["tool_budget"])
        again = await engine.resume("research-1", research)
        print("tool budget (replayed, durable fields only):", again.value["tool_budget"])
        await engine.close()


if __name__ == "__main__":
    asyncio.run(main())
