"""Child process: the toy foreign loop (`toy_loop.py`) in a tether workflow under a USD ceiling, SIGKILLed on cue.

Usage: python toy_loop_child.py STORE_URL RUN_ID MODE LOGDIR
MODE: `normal`, `resume`, or a crash point: `in-tool` (inside the second tool, after two paid turns) or
`in-request` (while the third model request is in flight). The fake provider appends `start N` / `done N`
to LOGDIR/requests.log (N: the tool results the request carries); the tools append their name to
LOGDIR/tools.log; the last request logs the kind of each tool result it carries to LOGDIR/seen.log.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

from toy_loop import ToolLoop

import tether
from tether.testing import Reply, ToolCall

PRICE = tether.Price(input=100.0, output=400.0)  # USD per million tokens: 0.014 USD per turn below
CEILING = 0.2


def build(mode: str, logdir: Path, store: str) -> tuple[tether.Engine, tether.Workflow]:
    def log(name: str, line: str) -> None:
        with open(logdir / name, "a") as f:
            f.write(line + "\n")

    async def lookup(city: str) -> dict[str, Any]:
        """The weather in a city."""
        log("tools.log", "lookup")
        return {"city": city, "celsius": 21}

    async def convert(celsius: int) -> dict[str, Any]:
        """Celsius to Fahrenheit."""
        log("tools.log", "convert")
        if mode == "in-tool":
            os.kill(os.getpid(), signal.SIGKILL)
        return {"fahrenheit": round(celsius * 9 / 5 + 32)}

    def script(request: Any) -> Reply:
        n = sum(len(m.parts) for m in request.messages if m.role == "tool")
        log("requests.log", f"start {n}")
        if mode == "in-request" and n == 2:
            os.kill(os.getpid(), signal.SIGKILL)
        if n == 0:
            reply = Reply(tool_calls=[ToolCall("lookup", {"city": "paris"})], input_tokens=100, output_tokens=10)
        elif n == 1:
            reply = Reply(tool_calls=[ToolCall("convert", {"celsius": 21})], input_tokens=100, output_tokens=10)
        else:
            said = [json.loads(p.content)["kind"] for m in request.messages if m.role == "tool" for p in m.parts]
            log("seen.log", " ".join(said))  # what the model was told of each tool call
            reply = Reply(text="It is 70F in Paris.", input_tokens=100, output_tokens=10)
        log("requests.log", f"done {n}")
        return reply

    @tether.workflow(name="toy")
    async def toy(ctx: tether.Ctx, question: str) -> dict[str, Any]:
        result = await ctx.agent(question, loop=ToolLoop({"lookup": lookup, "convert": convert}), full=True,
                                 model="fake:m", max_output_tokens=100, label="toy")
        return {"answer": result.output, "turns": result.turns}

    model = tether.models.fake("fake", script=script, prices={"m": PRICE})
    return tether.Engine(models=[model], store=store), toy


async def main(url: str, run_id: str, mode: str, logdir: str) -> None:
    engine, toy = build(mode, Path(logdir), url)
    args = {"question": "How warm is Paris, in Fahrenheit?"}
    if mode == "resume":
        out = await engine.resume(run_id, toy, args)
    else:
        out = await engine.run(toy, args, run_id=run_id, budget_usd=CEILING)
    print(json.dumps({"status": out.status, "value": out.value, "spent": out.cost.spent_usd,
                      "orphaned": out.cost.orphaned_usd, "total": out.cost.total_usd,
                      "calls": out.cost.provider_calls, "replay": out.replay.model_dump(mode="json")}))
    await engine.close()


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:5]))
