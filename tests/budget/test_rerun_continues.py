"""An agent run again after a cancel or a transport failure goes on from its last checkpoint: the provider is never
sent a turn it already answered (and billed), and the cost report counts each paid turn once. One whose own answer
failed (a schema mismatch) starts over from its prompt: that conversation is what failed."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

import tether
from tether.contracts.messages import ChatRequest
from tether.testing import Reply, ToolCall

PRICE = tether.Price(input=10.0, output=20.0)  # every turn (100 in, 50 out) costs 0.002 USD
LAST_TURN = 3


@tether.tool
def note(n: int) -> str:
    """Take a note."""
    return f"noted {n}"


class Provider:
    """A fake provider that logs the turn of every request it is sent; turn 2 fails or hangs while `trouble`."""

    def __init__(self, trouble: str) -> None:
        self.trouble: str | None = trouble
        self.sent: list[int] = []
        self.at_turn_2 = asyncio.Event()

    def script(self, request: ChatRequest) -> Reply:
        turn = sum(1 for m in request.messages if m.role == "assistant")
        self.sent.append(turn)
        if turn == 2 and self.trouble == "transport":
            return Reply(error="transport", message="503 upstream unavailable")
        if turn == 2 and self.trouble == "hang":
            self.at_turn_2.set()
            return Reply(text="never", latency_s=3600)  # answers in an hour: the cancel comes first
        if turn >= LAST_TURN:
            return Reply(text="done", input_tokens=100, output_tokens=50)
        return Reply(tool_calls=[ToolCall("note", {"n": turn})], input_tokens=100, output_tokens=50)


@tether.workflow(name="noting")
async def noting(ctx: tether.Ctx) -> Any:
    return await ctx.agent("take notes until done", tools=[note], est_cost=0.0)


def engine_for(tmp_path: Path, provider: Provider) -> tether.Engine:
    model = tether.models.fake("fake", script=provider.script, prices={"m": PRICE})
    return tether.Engine(models=[model], routing={"loop": "fake:m"}, store=f"sqlite:///{tmp_path}/t.db",
                         workflows=[noting])


async def test_a_rerun_after_a_transport_failure_sends_no_answered_turn_again(tmp_path: Path) -> None:
    provider = Provider("transport")
    engine = engine_for(tmp_path, provider)
    try:
        first = await engine.run(noting, run_id="r", budget_usd=1.0)
        assert first.status == "error"
        assert provider.sent[:3] == [0, 1, 2] and set(provider.sent[2:]) == {2}  # turn 2 failed, retries too
        failed_attempts = len(provider.sent) - 2
        provider.trouble = None
        again = await engine.resume("r")
        assert again.status == "ok" and again.value == "done"
        assert provider.sent[2 + failed_attempts:] == [2, 3]  # turns 0 and 1 were answered once, never re-sent
        assert again.cost.total_usd == pytest.approx(0.008)  # each answered turn paid once; failed attempts bill nothing
        assert again.cost.provider_calls == len(provider.sent)
    finally:
        await engine.close()


async def test_a_rerun_after_a_cancel_sends_no_answered_turn_again(tmp_path: Path) -> None:
    provider = Provider("hang")
    engine = engine_for(tmp_path, provider)
    try:
        handle = engine.start(noting, run_id="r", budget_usd=1.0)
        await asyncio.wait_for(provider.at_turn_2.wait(), 30)
        handle.cancel()
        first = await handle
        assert first.status == "cancelled" and provider.sent == [0, 1, 2]
        provider.trouble = None
        again = await engine.resume("r")
        assert again.status == "ok" and again.value == "done"
        assert provider.sent == [0, 1, 2, 2, 3]  # the cancelled turn is asked again; 0 and 1 are not
        # what the cancelled call is charged stays as the first segment journaled it; turns 2 and 3 add 0.004
        assert again.cost.total_usd == pytest.approx(first.cost.total_usd + 0.004)
    finally:
        await engine.close()
