"""Quick start: a two-agent workflow on the scripted fake model, run and then resumed for free.

Run: .venv/bin/python examples/quickstart.py
"""

from __future__ import annotations

import asyncio
import tempfile

from pydantic import BaseModel

import tether
from tether.testing import Reply, ToolCall


class Verdict(BaseModel):
    score: float
    rationale: str


def script(request: tether.contracts.ChatRequest) -> Reply:
    if any(t.name == "emit_result" for t in request.tools):
        return Reply(tool_calls=[ToolCall("emit_result", {"score": 8, "rationale": "clear"})])
    return Reply(text="A monorepo helps when teams share code.", input_tokens=200, output_tokens=30)


@tether.workflow(name="review")
async def review(ctx: tether.Ctx, question: str) -> dict[str, object]:
    answer = await ctx.agent(f"Answer briefly: {question}", label="answer")
    verdict = await ctx.agent(f"Score 0-10:\n{answer}", output=Verdict, label="score")
    return {"answer": answer, "score": verdict.score}


async def main() -> None:
    model = tether.models.fake("fake", script=script, prices={"m": tether.Price(input=3.0, output=15.0)})
    with tempfile.TemporaryDirectory() as tmp:
        engine = tether.Engine(models=[model], routing={"loop": "fake:m"}, store=f"sqlite:///{tmp}/t.db")
        first = await engine.run(review, {"question": "Monorepo?"}, run_id="quick", budget_usd=0.50)
        print("first run:", first.status, first.value, f"{first.cost.total_usd:.6f} USD", model.calls, "calls")
        again = await engine.resume("quick", review, {"question": "Monorepo?"})
        print("resume:", again.status, "hits", again.replay.hits, "misses", again.replay.misses, model.calls, "calls")
        await engine.close()


if __name__ == "__main__":
    asyncio.run(main())
