"""Child process: a pydantic-ai agent (two tools, a pydantic output) in a tether workflow, SIGKILLed on cue.

Usage: python pydantic_ai_crash_child.py STORE_URL RUN_ID MODE LOGDIR
MODE: `normal`, `resume`, or a crash point: `in-find-city` (a tool that is not idempotent), `in-temperature`
(an idempotent one), `in-request` (while the last model request is in flight), `in-validator` (after the
last reply, in the output validator, before the agent's terminal is journaled). The fake provider appends
`start N` / `done N` to LOGDIR/requests.log (N: the tool results the request carries), the tools append what
they did to LOGDIR/tools.log.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from pathlib import Path

from pydantic import BaseModel
from pydantic_ai import Agent, ModelRetry, RunContext

import tether
from tether.contracts.messages import ChatRequest
from tether.integrations import pydantic_ai as tpai
from tether.testing import Reply, ToolCall

PRICE = tether.Price(input=100.0, output=400.0)  # USD per million tokens: 0.01 + 0.004 USD per request below, four requests


class Forecast(BaseModel):
    city: str
    temp_c: float
    note: str


def build(mode: str, logdir: Path) -> tuple[tether.Engine, tether.Workflow]:
    def log(name: str, line: str) -> None:
        with open(logdir / name, "a") as f:
            f.write(line + "\n")

    agent = Agent(None, output_type=Forecast, name="weather", instructions="Find the city, then its temperature.",
                  retries=1)

    @agent.tool_plain
    def find_city(name: str) -> str:
        """Find the city a name means (lower case)."""
        log("tools.log", f"find_city {name} {tpai.idempotency_key()}")
        if name != name.lower():
            raise ModelRetry("write the name in lower case")
        if mode == "in-find-city":
            os.kill(os.getpid(), signal.SIGKILL)
        return name.upper()

    @agent.tool(metadata={"idempotent": True})
    async def temperature(ctx: RunContext[None], city: str) -> dict[str, object]:
        """The temperature in a city, in Celsius."""
        log("tools.log", f"temperature {city} {tpai.idempotency_key()}")
        if mode == "in-temperature":
            os.kill(os.getpid(), signal.SIGKILL)
        return {"city": city, "celsius": 21.5}

    @agent.output_validator
    def plausible(forecast: Forecast) -> Forecast:
        if mode == "in-validator":
            os.kill(os.getpid(), signal.SIGKILL)
        return forecast

    def script(request: ChatRequest) -> Reply:
        results = [p for m in request.messages if m.role == "tool" for p in m.parts]
        n = len(results)
        log("requests.log", f"start {n}")
        if mode == "in-request" and n == 3:
            os.kill(os.getpid(), signal.SIGKILL)
        if n < 2:  # the first call is refused (upper case) and retried
            name = "Paris" if n == 0 else "paris"
            reply = Reply(tool_calls=[ToolCall("find_city", {"name": name})], input_tokens=100, output_tokens=10)
        elif n == 2:
            reply = Reply(tool_calls=[ToolCall("temperature", {"city": "PARIS"})], input_tokens=100, output_tokens=10)
        else:
            said = " | ".join(getattr(p, "content", "") for p in results)
            reply = Reply(tool_calls=[ToolCall("final_result", {"city": "PARIS", "temp_c": 21.5, "note": said})],
                          input_tokens=100, output_tokens=10)
        log("requests.log", f"done {n}")
        return reply

    @tether.workflow(name="weather")
    async def weather(ctx: tether.Ctx, question: str) -> dict[str, object]:
        answer = await tpai.run(ctx, agent, question, model="fake:m", max_output_tokens=100)
        return {"forecast": answer.output.model_dump(), "requests": answer.usage.requests}

    model = tether.models.fake("fake", script=script, prices={"m": PRICE})
    return tether.Engine(models=[model], store=sys.argv[1]), weather


async def main(url: str, run_id: str, mode: str, logdir: str) -> None:
    engine, weather = build(mode, Path(logdir))
    args = {"question": "What is the weather in Paris?"}
    if mode == "resume":
        out = await engine.resume(run_id, weather, args)
    else:
        out = await engine.run(weather, args, run_id=run_id, budget_usd=1.0)
    print(json.dumps({"status": out.status, "value": out.value, "spent": out.cost.spent_usd,
                      "orphaned": out.cost.orphaned_usd, "calls": out.cost.provider_calls,
                      "replay": out.replay.model_dump(mode="json")}))


if __name__ == "__main__":
    import warnings

    warnings.simplefilter("ignore")
    asyncio.run(main(*sys.argv[1:5]))
