"""Child process: a tool-budgeted agent that SIGKILLs itself right after a chosen budget decision.

Usage: python tool_budget_crash_child.py STORE_URL RUN_ID (normal|tool-grant|finalization-window|resume) LOGFILE

The agent (max 2 calls, one grant of 2, a window of 1 call allowing `record`, notices at 0.5):
turn 1 probe(1) → the window opens at the batch boundary (a decision) and the 0.5 notice fires;
turn 2 record(2); turn 3 probe(3) meets the cap → a grant (a decision) lifts it to 4; turn 4 answers.
It prints one JSON line: status, the agent's summary and output, and what the last request the model
saw in this process carried (grant, window and notice messages).
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
from tether.stores import open_store
from tether.testing import Reply, ToolCall

PLAN = [("probe", 1), ("record", 2), ("probe", 3)]


class KillAfterDecision:
    """Delegates to a real store and kills the process right after appending one named decision."""

    def __init__(self, inner: Any, decision: str) -> None:
        self._inner = inner
        self._decision = decision

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def append(self, run_id: str, entry: JournalEntry, lease: Lease | None = None) -> int:
        seq = await self._inner.append(run_id, entry, lease)
        value = entry.value if isinstance(entry.value, dict) else {}
        if entry.kind == "decision" and value.get("decision") == self._decision:
            os.kill(os.getpid(), signal.SIGKILL)
        return int(seq)


def build(log: str) -> tuple[tether.Workflow, Any, list[Any]]:
    results: list[Any] = []

    def script(request: ChatRequest) -> Reply:
        answered = sum(1 for m in request.messages if m.role == "tool")
        if answered < len(PLAN):
            name, n = PLAN[answered]
            return Reply(tool_calls=[ToolCall(name, {"n": n})], input_tokens=100, output_tokens=10)
        return Reply(text=f"done after {answered} batches", input_tokens=100, output_tokens=10)

    def ran(what: str) -> str:
        with open(log, "a") as f:
            f.write(what + "\n")
        return what

    @tether.tool
    def probe(n: int) -> str:
        """Look something up."""
        return ran(f"probe{n}")

    @tether.tool
    def record(n: int) -> str:
        """Write a finding down."""
        return ran(f"record{n}")

    budget = tether.ToolBudget(
        max_tool_calls=2,
        notices=(0.5,),
        extension=tether.ToolBudgetExtension(increment=2, max_extensions=1),
        finalization_window=tether.FinalizationWindow(reserve_calls=1, allow=("record",)),
    )

    @tether.workflow(name="budgeted")
    async def budgeted(ctx: tether.Ctx) -> str:
        result = await ctx.agent("research", tools=[probe, record], tool_budget=budget, full=True)
        results.append(result)
        return str(result.output)

    model = tether.models.fake("fake", script=script, prices={"m": tether.Price(input=1.0, output=2.0)})
    return budgeted, model, results


def count(request: ChatRequest | None, needle: str) -> int:
    if request is None:
        return 0
    return sum(m.text_content.count(needle) for m in request.messages if m.role == "user")


async def main(url: str, run_id: str, mode: str, log: str) -> None:
    store: Any = open_store(url)
    if mode in ("tool-grant", "finalization-window"):
        store = KillAfterDecision(store, mode)
    wf, model, results = build(log)
    engine = tether.Engine(models=[model], routing={"loop": "fake:m"}, store=store)
    out = await (engine.resume(run_id, wf) if mode == "resume" else engine.run(wf, run_id=run_id))
    await engine.close()
    last = model.requests[-1] if model.requests else None
    summary = results[0].tool_budget.model_dump(exclude_none=True) if results and results[0].tool_budget else None
    print(
        json.dumps(
            {
                "status": out.status,
                "value": out.value,
                "summary": summary,
                "model_calls": model.calls,
                "grant_messages": count(last, "Tool budget extended"),
                "window_messages": count(last, "Finalization window"),
                "notice_messages": count(last, "Tool budget notice"),
            }
        )
    )


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:5]))
