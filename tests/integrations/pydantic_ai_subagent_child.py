"""Child process: a planner agent whose tool delegates to an expert agent, SIGKILLed after the expert answered.

Usage: python pydantic_ai_subagent_child.py STORE_URL RUN_ID (crash|resume) LOGDIR
The fake provider appends `done <agent>` to LOGDIR/requests.log for every request it answers.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from pathlib import Path

from pydantic_ai import Agent, RunContext

import tether
from tether.contracts.messages import ChatRequest
from tether.integrations import pydantic_ai as tpai
from tether.testing import Reply, ToolCall


def build(mode: str, logdir: Path) -> tuple[tether.Engine, tether.Workflow]:
    expert = tpai.durable(Agent(None, name="expert", instructions="You are the expert."))
    planner: Agent[None, str] = Agent(None, name="planner", instructions="Plan; ask the expert when unsure.")

    @planner.tool(metadata={"idempotent": True})
    async def ask_expert(ctx: RunContext[None], question: str) -> str:
        """Ask the expert a question."""
        answer = await expert.run(question, usage=ctx.usage)
        if mode == "crash":  # the expert has answered (its terminal is journaled); this tool has not returned
            os.kill(os.getpid(), signal.SIGKILL)
        return answer.output

    def script(request: ChatRequest) -> Reply:
        system = request.messages[0].text_content
        if "Plan" not in system:
            who, reply = "expert", Reply(text="Use a monorepo.", input_tokens=200, output_tokens=25)
        elif not any(m.role == "tool" for m in request.messages):
            who, reply = "planner", Reply(tool_calls=[ToolCall("ask_expert", {"question": "Monorepo?"})],
                                          input_tokens=100, output_tokens=25)
        else:
            who, reply = "planner", Reply(text="Plan: monorepo.", input_tokens=100, output_tokens=25)
        with open(logdir / "requests.log", "a") as f:
            f.write(f"done {who}\n")
        return reply

    @tether.workflow(name="plan")
    async def plan(ctx: tether.Ctx) -> str:
        return (await tpai.run(ctx, planner, "Plan the repository layout.", max_output_tokens=100)).output

    model = tether.models.fake("fake", script=script, prices={"m": tether.Price(input=100.0, output=400.0)})
    return tether.Engine(models=[model], routing={"loop": "fake:m"}, store=sys.argv[1]), plan


async def main(url: str, run_id: str, mode: str, logdir: str) -> None:
    engine, plan = build(mode, Path(logdir))
    out = await (engine.resume(run_id, plan) if mode == "resume" else engine.run(plan, run_id=run_id, budget_usd=1.0))
    tree = await engine.agent_tree(run_id)
    print(json.dumps({"status": out.status, "value": out.value, "spent": out.cost.spent_usd,
                      "agents": [[a.label, a.parent_agent_id, a.status, a.provider_calls] for a in tree.agents]}))


if __name__ == "__main__":
    import warnings

    warnings.simplefilter("ignore")
    asyncio.run(main(*sys.argv[1:5]))
