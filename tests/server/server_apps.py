"""Engines and workflows the server tests serve: fake models only, tool gates the tests open by hand.

`research` is the recorded multi-agent run (parallel agents, an orchestrator with spawns and a
refused spawn, a tool through the subprocess executor so the effect ledger has rows). `live_panel`
blocks each agent on a gate file until the test opens it, then waits for a human (`approve`).
"""

from __future__ import annotations

import asyncio
import itertools
import os
import re
import time
from collections.abc import Callable, Sequence
from typing import Any, Literal

import tether
from tether.contracts.messages import ChatRequest
from tether.testing import Reply, ToolCall

PRICES = {"m": tether.Price(input=3.0, output=15.0)}
RESEARCH_BUDGET = 0.25
RESEARCH_CONTAINMENT = tether.Containment(max_agents=5, max_concurrent=4, max_depth=2)


def measure(metric: str) -> dict[str, Any]:
    """A 'benchmark' run in a subprocess (so the effect ledger records it)."""
    return {"metric": metric, "value": len(metric) * 7}


async def gate_opened(gate: str) -> None:
    """Wait for the gate file. The test thread (or a browser test) opens it: a file is the simplest signal
    that crosses from there into the server's event loop."""
    while not await asyncio.to_thread(os.path.exists, gate):  # noqa: ASYNC110
        await asyncio.sleep(0.02)


@tether.tool
async def wait_gate(gate: str) -> str:
    """Block until the test creates the gate file (how a test holds an agent in `running`)."""
    await gate_opened(gate)
    return "gate open"


measure_tool = tether.tool(executor="subprocess", timeout_s=60)(measure)


def _turns(request: ChatRequest) -> int:
    return sum(1 for m in request.messages if m.role == "assistant")


def _prompt(request: ChatRequest) -> str:
    return request.messages[0].text_content if request.messages else ""


def script(request: ChatRequest) -> Reply:
    """Deterministic replies by prompt: what each agent of both workflows says."""
    prompt, turn = _prompt(request), _turns(request)
    if any(t.name == "spawn_agent" for t in request.tools):
        if turn == 0:
            goals = ["survey prior work", "collect benchmark numbers", "draft the related-work section"]
            return Reply(tool_calls=[ToolCall("spawn_agent", {"goal": g, "tools": ["measure"]}) for g in goals],
                         input_tokens=2_400, output_tokens=380)
        return Reply(text="Plan: two findings merged; the third seat was refused by the agent cap.",
                     input_tokens=3_900, output_tokens=520)
    if any(t.name == "deploy" for t in request.tools):
        if turn == 0:
            return Reply(tool_calls=[ToolCall("deploy", {"env": "prod"})], input_tokens=700, output_tokens=40)
        return Reply(text="deployed to prod", input_tokens=900, output_tokens=30)
    gate = re.search(r"gate=(\S+)", prompt)
    if gate is not None:
        if turn == 0:
            return Reply(tool_calls=[ToolCall("wait_gate", {"gate": gate.group(1)})], input_tokens=900,
                         output_tokens=60)
        return Reply(text=f"view done ({prompt.split('.')[0]})", input_tokens=1_300, output_tokens=240)
    if ("benchmark" in prompt or "numbers" in prompt) and turn == 0:
        return Reply(tool_calls=[ToolCall("measure", {"metric": "latency_p95"})], input_tokens=1_500,
                     output_tokens=90)
    return Reply(text=f"done: {prompt[:40]}", input_tokens=1_800 + 40 * len(prompt) % 700, output_tokens=310)


@tether.workflow(name="research")
async def research(ctx: tether.Ctx, topic: str) -> dict[str, Any]:
    checks = await ctx.parallel([
        lambda: ctx.agent(f"Critique the question: {topic}", label="critic"),
        lambda: ctx.agent(f"Check the numbers behind {topic}", label="fact-check", tools=[measure_tool]),
    ])
    plan = await ctx.orchestrate(f"Plan the research on {topic}", tools=[measure_tool], label="planner")
    return {"checks": checks, "plan": plan}


@tether.workflow(name="live_panel")
async def live_panel(ctx: tether.Ctx, question: str, gates: str) -> dict[str, Any]:
    views = await ctx.parallel([
        lambda a=angle: ctx.agent(f"{a} view of {question}. gate={gates}/{a}", label=a, tools=[wait_gate])
        for angle in ("practical", "skeptical", "optimistic")
    ])
    verdict = await ctx.await_external("approve")
    summary = await ctx.agent(f"Summarize for {question} given {verdict}", label="summary")
    return {"views": views, "verdict": verdict, "summary": summary}


@tether.workflow(name="wait_with_work")
async def wait_with_work(ctx: tether.Ctx, gate: str) -> dict[str, Any]:
    """One branch parks on `go` while the other works until the gate opens: the run stays live."""

    async def worker() -> str:
        ctx.log("info", "worker waiting for its gate")  # telemetry only: never in the journal

        async def hold() -> str:
            await gate_opened(gate)
            return "worked"

        result: str = await ctx.step("work", hold)
        return result

    got, worked = await ctx.parallel([lambda: ctx.await_external("go"), worker])
    return {"got": got, "worked": worked}


@tether.workflow(name="wait")
async def wait(ctx: tether.Ctx) -> Any:
    await ctx.step("prepare", lambda: 1)
    return await ctx.await_external("approve")


@tether.tool(needs_approval=True)
def deploy(env: str) -> str:
    """Ship it (a human approves first)."""
    return f"shipped to {env}"


@tether.workflow(name="ship")
async def ship(ctx: tether.Ctx) -> Any:
    return await ctx.agent("Deploy the release", label="deployer", tools=[deploy])


@tether.workflow(name="echo")
async def echo(ctx: tether.Ctx, **args: Any) -> dict[str, Any]:
    return args


@tether.workflow(name="score")
async def score(ctx: tether.Ctx) -> Any:
    return await ctx.await_external("score", schema=int)


@tether.workflow(name="triage")
async def triage(ctx: tether.Ctx) -> Any:
    return await ctx.await_external("severity", schema=Literal["low", "high"])


WORKFLOWS = (research, live_panel, wait_with_work, wait, ship, echo, score, triage)


def stepping_clock(step_s: float = 0.35) -> Callable[[], float]:
    """A clock that moves `step_s` per reading: a recorded run's timestamps spread like a real one's."""
    start = time.time() - 120.0
    counter = itertools.count()
    return lambda: start + step_s * next(counter)


def make_engine(store: str, *, clock: Callable[[], float] = time.time,
                workflows: Sequence[tether.Workflow] = WORKFLOWS) -> tether.Engine:
    model = tether.models.fake("fake", script=script, prices=PRICES)
    return tether.Engine(models=[model], routing={"loop": "fake:m", "orchestrate": "fake:m"}, store=store,
                         workflows=workflows, clock=clock)


async def record_research(store: str, run_id: str = "research-1", topic: str = "monorepos") -> tether.RunOutcome:
    """Record the multi-agent run with a stepping clock (so its spend chart spans a couple of minutes)."""
    engine = make_engine(store, clock=stepping_clock())
    try:
        return await engine.run(research, {"topic": topic}, run_id=run_id, budget_usd=RESEARCH_BUDGET,
                                containment=RESEARCH_CONTAINMENT)
    finally:
        await engine.close()
