"""The bundled demo: a multi-agent panel on a scripted model, killed mid-run and resumed."""

from __future__ import annotations

import asyncio
import functools
import os
import signal
import sys
from typing import Any

from pydantic import BaseModel

from tether.contracts.entries import JournalEntry, Lease
from tether.contracts.messages import ChatRequest
from tether.contracts.prices import Price
from tether.engine.ctx import Ctx
from tether.engine.engine import Engine
from tether.engine.workflow import Workflow, workflow
from tether.models.fake import FakeModel, Reply, ToolCall
from tether.tools.definition import tool

ANGLES = ("practical", "skeptical", "optimistic")


class Verdict(BaseModel):
    score: float
    rationale: str


@tool
def word_count(text: str) -> int:
    """Count the words in a text."""
    return len(text.split())


def _script(request: ChatRequest) -> Reply:
    """A deterministic stand-in for a provider: answers by what the prompt asks."""
    last = request.messages[-1]
    prompt = request.messages[0].text_content if request.messages else ""
    for m in request.messages:
        if m.role == "user":
            prompt = m.text_content
            break
    if any(t.name == "emit_result" for t in request.tools):
        score = 5.0 + (len(prompt) % 5)
        return Reply(
            tool_calls=[ToolCall("emit_result", {"score": score, "rationale": "weighed it"})],
            input_tokens=400,
            output_tokens=40,
            latency_s=0.05,
        )
    if any(t.name == "word_count" for t in request.tools) and last.role != "tool":
        return Reply(
            tool_calls=[ToolCall("word_count", {"text": prompt})], input_tokens=300, output_tokens=20, latency_s=0.05
        )
    angle = next((a for a in ANGLES if a in prompt), "neutral")
    return Reply(
        text=f"From a {angle} view: a monorepo pays off when teams share code.",
        input_tokens=350,
        output_tokens=60,
        latency_s=0.05,
    )


def demo_model() -> FakeModel:
    return FakeModel("demo", _script, prices={"panelist": Price(input=3.0, output=15.0)})


@workflow(name="panel")
async def panel(ctx: Ctx, question: str) -> dict[str, Any]:
    async def judge(angle: str) -> dict[str, Any]:
        answer = await ctx.agent(f"Answer from a {angle} view: {question}", label=angle, tools=[word_count])
        verdict = await ctx.agent(f"Score 0-10:\n{answer}", output=Verdict, label=f"score-{angle}")
        return {"angle": angle, "score": verdict.score}

    async with ctx.phase("judging"):
        results = await ctx.parallel([functools.partial(judge, a) for a in ANGLES])
    best = max(results, key=lambda r: r["score"])
    return {"best": best["angle"], "scores": {r["angle"]: r["score"] for r in results}}


def demo_engine(store: Any) -> Engine:
    return Engine(models=[demo_model()], routing={"loop": "demo:panelist"}, store=store, workflows=[panel])


class KillAfter:
    """A store proxy that SIGKILLs this process after `n` agent terminals were appended."""

    def __init__(self, inner: Any, n: int) -> None:
        self._inner = inner
        self._left = n

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def append(self, run_id: str, entry: JournalEntry, lease: Lease | None = None) -> int:
        seq = await self._inner.append(run_id, entry, lease)
        if entry.kind == "agent" and entry.status not in (None, "running"):
            self._left -= 1
            if self._left <= 0:
                os.kill(os.getpid(), signal.SIGKILL)
        return int(seq)


async def crash_midway(store_url: str, run_id: str, kill_after: int) -> None:
    """Child-process half of the demo: run the panel and die after `kill_after` agents settled."""
    from tether.stores import open_store

    engine = demo_engine(KillAfter(open_store(store_url), kill_after))
    await engine.run(panel, {"question": "Should we move to a monorepo?"}, run_id=run_id, budget_usd=1.0)


def workflow_for_cli() -> Workflow:
    return panel


if __name__ == "__main__":
    asyncio.run(crash_midway(sys.argv[1], sys.argv[2], int(sys.argv[3])))
