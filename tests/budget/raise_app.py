"""An app for the raise tests: one agent that works until the money runs out, on a fake model that appends the
turn of every request it is sent to a request log, so a test reads what the provider saw across processes.

The store, the log and (for the kill test) a marker file come from the environment, so the child process, the
`tether` CLI (`--app raise_app:engine`) and the test's own engine all drive the same run.

Usage: python raise_app.py RUN_ID [exhausted|suspend]
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path
from typing import Any

import tether
from tether.contracts.messages import ChatRequest
from tether.testing import Reply, ToolCall

PRICE = tether.Price(input=10.0, output=20.0)  # every turn (100 in, 50 out) costs 0.002 USD
CEILING_USD = 0.005  # two turns fit; the third's output floor does not
LAST_TURN = 3


def sent_turns(log: str | os.PathLike[str]) -> list[int]:
    """The turns the provider was sent, in order (the request log)."""
    path = Path(log)
    return [int(line) for line in path.read_text().split()] if path.exists() else []


def script(request: ChatRequest) -> Reply:
    turn = sum(1 for m in request.messages if m.role == "assistant")
    with open(os.environ["RAISE_LOG"], "a") as log:  # before the reply: a request sent is a request logged
        log.write(f"{turn}\n")
    if turn >= LAST_TURN:
        return Reply(text="done", input_tokens=100, output_tokens=50)
    return Reply(tool_calls=[ToolCall("note", {"n": turn})], input_tokens=100, output_tokens=50)


@tether.tool
def note(n: int) -> str:
    """Take a note."""
    return f"noted {n}"


@tether.workflow(name="stopping")
async def stopping(ctx: tether.Ctx) -> Any:
    try:
        return await ctx.agent("work until the money runs out", tools=[note], est_cost=0.0)
    except tether.BudgetExhaustedError:
        marker = os.environ.get("RAISE_HANG")
        if marker:  # the kill test: the stop is journaled, and the process dies before the run settles
            await asyncio.to_thread(Path(marker).write_text, "stopped")
            await asyncio.sleep(3600)
        raise


def make_engine() -> tether.Engine:
    model = tether.models.fake("fake", script=script, prices={"m": PRICE}, output_floor=40)
    return tether.Engine(models=[model], routing={"loop": "fake:m"}, store=os.environ["RAISE_STORE"],
                         workflows=[stopping])


engine = make_engine() if "RAISE_STORE" in os.environ else None

if __name__ == "__main__":
    assert engine is not None
    mode: Any = sys.argv[2] if len(sys.argv) > 2 else None
    asyncio.run(engine.run(stopping, run_id=sys.argv[1], budget_usd=CEILING_USD, on_exhausted=mode))
