"""Child process: a 300-turn tool conversation under an 8,000-token `tether.Context`, optionally SIGKILLed.

Usage: python context_child.py STORE_URL RUN_ID (normal|kill|resume) STRATEGY LOG

The fake model asks for `lookup(n)` 299 times (each result a few hundred tokens), then answers. `kill` SIGKILLs
the process right after the second `context-compaction` decision is appended (before the checkpoint that
applies it). Every request the model receives is appended to LOG as one JSON line: what it was for (`summary` or
`turn`), its input estimate and a hash of its content. The last stdout line is the run's status and cost report.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from typing import Any

import tether
from tether.agents.compaction import SUMMARY_SYSTEM
from tether.agents.dispatch import estimate_input_tokens
from tether.contracts.entries import JournalEntry, Lease
from tether.contracts.messages import ChatRequest, ToolResultPart
from tether.journal.canonical import content_key
from tether.stores import open_store
from tether.testing import Reply, ToolCall

LIMIT = 8_000
LOOKUPS = 299
PADDING = " ".join(f"fact{i}" for i in range(200))  # ~1,300 characters: a few hundred tokens per result


class KillAfterDecision:
    """Delegates to a real store and kills the process right after appending the `nth` named decision."""

    def __init__(self, inner: Any, decision: str, nth: int) -> None:
        self._inner, self._decision, self._left = inner, decision, nth

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def append(self, run_id: str, entry: JournalEntry, lease: Lease | None = None) -> int:
        seq = await self._inner.append(run_id, entry, lease)
        value = entry.value if isinstance(entry.value, dict) else {}
        if entry.kind == "decision" and value.get("decision") == self._decision:
            self._left -= 1
            if self._left == 0:
                os.kill(os.getpid(), signal.SIGKILL)
        return int(seq)


def last_lookup(request: ChatRequest) -> int:
    """The `n` of the newest lookup result in the request (0: none yet)."""
    for message in reversed(request.messages):
        if message.role == "tool":
            return int(message.parts[0].content.split(":", 1)[0].split()[-1])  # type: ignore[union-attr]
    return 0


def paired(request: ChatRequest) -> bool:
    """Every tool result answers a call of the assistant message right before it, and every call is answered."""
    messages = request.messages
    for i, message in enumerate(messages):
        if message.role == "tool":
            asked = {p.id for p in messages[i - 1].tool_calls} if i and messages[i - 1].role == "assistant" else set()
            if {p.call_id for p in message.parts if isinstance(p, ToolResultPart)} != asked:
                return False
        elif message.role == "assistant" and message.tool_calls and (
                i + 1 >= len(messages) or messages[i + 1].role != "tool"):
            return False
    return True


def build(log: str) -> tuple[tether.Workflow, Any]:
    def script(request: ChatRequest) -> Reply:
        summary = any(m.role == "system" and SUMMARY_SYSTEM in m.text_content for m in request.messages)
        with open(log, "a") as f:
            f.write(json.dumps({"kind": "summary" if summary else "turn", "est": estimate_input_tokens(request),
                                "key": content_key(request.model_dump(mode="json")), "paired": paired(request),
                                "first": request.messages[0].text_content[:40]}) + "\n")
        if summary:
            return Reply(text=f"Looked up facts 1..{last_seen(request)} so far.", output_tokens=20)
        n = last_lookup(request)
        if n < LOOKUPS:
            return Reply(tool_calls=[ToolCall("lookup", {"n": n + 1})], output_tokens=10)
        return Reply(text=f"done after {n} lookups", output_tokens=10)

    def last_seen(request: ChatRequest) -> int:
        text = request.messages[-1].text_content
        found = [int(w[len("result"):]) for w in text.replace(":", " ").split() if w.startswith("result")
                 and w[len("result"):].isdigit()]
        return max(found, default=0)

    @tether.tool
    def lookup(n: int) -> str:
        """Look fact n up."""
        return f"result {n}: {PADDING}"

    strategy = os.environ["CONTEXT_STRATEGY"]

    @tether.workflow(name="long-talk")
    async def talk(ctx: tether.Ctx) -> str:
        policy = tether.Context(max_input_tokens=LIMIT, keep_last=3, strategy=strategy)  # type: ignore[arg-type]
        return str(await ctx.agent("Look up facts 1 to 299, one call each, then say done.", tools=[lookup],
                                   max_turns=400, context=policy))

    model = tether.models.fake("fake", script=script, price=tether.Price(input=1.0, output=2.0))
    return talk, model


async def main(url: str, run_id: str, mode: str, strategy: str, log: str) -> None:
    os.environ["CONTEXT_STRATEGY"] = strategy
    store: Any = open_store(url)
    if mode == "kill":
        store = KillAfterDecision(store, "context-compaction", 2)
    wf, model = build(log)
    engine = tether.Engine(models=[model], routing={"loop": "fake:m"}, store=store)
    out = await (engine.resume(run_id, wf) if mode == "resume" else engine.run(wf, run_id=run_id, budget_usd=5.0))
    report = await engine.cost(run_id)
    await engine.close()
    print(json.dumps({"status": out.status, "value": out.value, "cost": report.model_dump(mode="json")}))


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:6]))
