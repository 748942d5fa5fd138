"""The bundled demo: a multi-agent panel through the Anthropic adapter, killed mid-run and resumed.

Offline, the adapter's calls replay from `demo_cassette.json` (recorded by
`scripts/record_demo_cassette.py`), so no key and no network are needed. On a bare install (no
`anthropic` SDK) the same cassette replays through the fake model given Claude's capabilities, so
every request, and so every cassette key, is the one the real adapter would send. With `live=True`
the same workflow calls the real provider under a small ceiling.
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import signal
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from tether.contracts.entries import JournalEntry, Lease
from tether.contracts.errors import ConfigError
from tether.contracts.messages import ChatRequest
from tether.contracts.protocols import ChatModel
from tether.contracts.signal import Signal
from tether.contracts.stream import ChatEvent, ModelCaps
from tether.engine.ctx import Ctx
from tether.engine.engine import Engine
from tether.engine.outcome import RunOutcome
from tether.engine.workflow import Workflow, workflow
from tether.models._sdk import Traits, build_caps
from tether.models.fake import FakeModel, Reply, ToolCall
from tether.tools.definition import tool

ANGLES = ("practical", "skeptical", "optimistic")
QUESTION = "Should we move to a monorepo?"
CASSETTE = Path(__file__).with_name("demo_cassette.json")
REPLAY_REF = "anthropic:claude-sonnet-4-6"
# The provider a live run uses: the first whose key is set.
LIVE_REFS = (("ANTHROPIC_API_KEY", "anthropic:claude-sonnet-4-6"), ("OPENAI_API_KEY", "openai:gpt-4.1-mini"))
# Offline the ceiling never binds, so every request (and its cassette key) is the same each run.
REPLAY_BUDGET_USD = 1.0
LIVE_BUDGET_USD = 0.05
MAX_OUTPUT_TOKENS = 400


class Verdict(BaseModel):
    score: float
    rationale: str


@tool
def word_count(text: str) -> int:
    """Count the words in a text."""
    return len(text.split())


@workflow(name="panel")
async def panel(ctx: Ctx, question: str) -> dict[str, Any]:
    async def judge(angle: str) -> dict[str, Any]:
        answer = await ctx.agent(
            f"Answer in two sentences from a {angle} view: {question}",
            label=angle,
            tools=[word_count],
            max_output_tokens=MAX_OUTPUT_TOKENS,
        )
        verdict = await ctx.agent(
            f"Score this answer 0-10:\n{answer}",
            output=Verdict,
            label=f"score-{angle}",
            max_output_tokens=MAX_OUTPUT_TOKENS,
        )
        return {"angle": angle, "score": verdict.score}

    async with ctx.phase("judging"):
        results = await ctx.parallel([functools.partial(judge, a) for a in ANGLES])
    best = max(results, key=lambda r: r["score"])
    return {"best": best["angle"], "scores": {r["angle"]: r["score"] for r in results}}


class CountingModel:
    """Passes every call through to `inner` and counts them (`calls`)."""

    def __init__(self, inner: ChatModel) -> None:
        self.inner, self.id, self.family = inner, inner.id, inner.family
        self.calls = 0

    def caps(self, model: str) -> ModelCaps:
        return self.inner.caps(model)

    def stream(self, request: ChatRequest, signal: Signal | None = None) -> AsyncIterator[ChatEvent]:
        self.calls += 1
        return self.inner.stream(request, signal)


def _text(content: Any) -> str:
    """The text of a Messages API `content`: a string, or a list of blocks."""
    if isinstance(content, str):
        return content
    return "".join(b.get("text", "") for b in content if b.get("type") == "text")


def stand_in(body: dict[str, Any]) -> Reply:
    """A deterministic stand-in for Claude: a reply to a Messages API request body, by what it asks."""
    messages = body["messages"]
    prompt = _text(messages[0]["content"])
    results = [b for b in messages[-1]["content"] if isinstance(b, dict) and b.get("type") == "tool_result"]
    if "output_config" in body:  # the structured score: native JSON output
        score = 5.0 + (len(prompt) % 5)
        verdict = {"score": score, "rationale": "weighed the trade-offs"}
        return Reply(text=json.dumps(verdict), input_tokens=400, output_tokens=40)
    tools = [t["name"] for t in body.get("tools", [])]
    if "word_count" in tools and not results:
        return Reply(tool_calls=[ToolCall("word_count", {"text": QUESTION})], input_tokens=300, output_tokens=20)
    angle = next((a for a in ANGLES if a in prompt), "neutral")
    words = results[0]["content"] if results else "?"
    return Reply(
        text=f"From a {angle} view: for a {words}-word question the answer is yes, when teams share code. "
        f"A monorepo pays off once the tooling keeps builds fast.",
        input_tokens=350,
        output_tokens=60,
    )


def live_ref() -> str | None:
    """The model a live run calls: the first provider whose API key is in the environment."""
    return next((ref for env, ref in LIVE_REFS if os.environ.get(env)), None)


# Claude's traits as the Anthropic adapter derives them for REPLAY_REF (a test keeps the two equal).
CLAUDE_TRAITS = Traits(
    max_output_tokens=64_000, structured_output="native", efforts=("low", "medium", "high"), context_window=200_000
)


def stand_in_model() -> FakeModel:
    """The fake model as `anthropic`, with the caps the real adapter has for REPLAY_REF (bare installs)."""
    model = REPLAY_REF.partition(":")[2]
    caps = build_caps("anthropic", "anthropic", model, CLAUDE_TRAITS, None)
    return FakeModel(
        "anthropic", family="anthropic", prices={model: caps.price} if caps.price else None,
        context_window=caps.context_window, max_output_tokens=caps.max_output_tokens,
        output_floor=caps.output_floor, structured_output=caps.structured_output,
    )


def replay_adapter() -> tuple[ChatModel, bool]:
    """The adapter under the replayed cassette: the real Anthropic one if its SDK is installed, else the stand-in."""
    from tether import models

    try:
        from tether.testing.cassette import REPLAY_ONLY_KEY

        return models.anthropic(api_key=REPLAY_ONLY_KEY), True
    except ConfigError as exc:
        if exc.data.get("extra") != "anthropic":
            raise
        return stand_in_model(), False


def demo_model(live: bool = False) -> tuple[ChatModel, str]:
    """The demo's adapter and model ref: the bundled cassette (replayed), or a real provider."""
    from tether import models

    if not live:
        from tether.testing.cassette import cassette

        return cassette(replay_adapter()[0], CASSETTE, mode="replay"), REPLAY_REF
    ref = live_ref()
    if ref is None:
        raise ConfigError(
            "tether demo --live needs ANTHROPIC_API_KEY or OPENAI_API_KEY in the environment; "
            "set one, or run `tether demo` to replay the bundled cassette offline"
        )
    return (models.anthropic() if ref.startswith("anthropic:") else models.openai()), ref


def demo_engine(store: Any, live: bool = False) -> tuple[Engine, CountingModel]:
    model, ref = demo_model(live)
    counted = CountingModel(model)
    engine = Engine(models=[counted], routing={"loop": ref}, store=store, workflows=[panel])
    return engine, counted


def budget_usd(live: bool) -> float:
    return LIVE_BUDGET_USD if live else REPLAY_BUDGET_USD


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


async def crash_midway(store_url: str, run_id: str, kill_after: int, live: bool = False) -> None:
    """Child-process half of the demo: run the panel and die after `kill_after` agents settled."""
    from tether.stores import open_store

    engine, _ = demo_engine(KillAfter(open_store(store_url), kill_after), live)
    await engine.run(panel, {"question": QUESTION}, run_id=run_id, budget_usd=budget_usd(live))


@dataclass
class Resumed:
    """What the resume did: its outcome, and the model calls it made (journal hits make none)."""

    outcome: RunOutcome
    calls: int
    model: ChatModel


async def resume_demo(store_url: str, run_id: str, live: bool = False) -> Resumed:
    """Resume the killed run: settled agents replay from the journal, the rest run (or replay) now."""
    engine, counted = demo_engine(store_url, live)
    try:
        outcome = await engine.resume(run_id, panel, {"question": QUESTION})
    finally:
        await engine.close()
    return Resumed(outcome=outcome, calls=counted.calls, model=counted.inner)


def workflow_for_cli() -> Workflow:
    return panel


if __name__ == "__main__":
    asyncio.run(crash_midway(sys.argv[1], sys.argv[2], int(sys.argv[3]), live="--live" in sys.argv[4:]))
