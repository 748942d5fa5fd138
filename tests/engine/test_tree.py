"""Agent trees: containment, the orchestrator's spawns and refusals, and the tree audit (seed 003)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import tether
from tether.contracts.messages import ChatRequest
from tether.engine.options import Containment
from tether.testing import Reply, ToolCall


def assistant_turns(request: ChatRequest) -> int:
    return sum(1 for m in request.messages if m.role == "assistant")


def is_orchestrator(request: ChatRequest) -> bool:
    return any(t.name == "spawn_agent" for t in request.tools)


async def test_the_seed_003_tree_draws_9280_tokens_and_leaves_720(tmp_path: Path) -> None:
    def script(request: ChatRequest) -> Reply:
        if not is_orchestrator(request):
            return Reply(text="child done", input_tokens=2_800, output_tokens=480)
        turn = assistant_turns(request)
        if turn == 0:
            return Reply(tool_calls=[ToolCall("spawn_agent", {"goal": "research a"}),
                                     ToolCall("spawn_agent", {"goal": "research b"})],
                         input_tokens=2_500, output_tokens=500)
        return Reply(tool_calls=[ToolCall("spawn_agent", {"goal": "one more"})], input_tokens=2_500, output_tokens=500)

    model = tether.models.fake("fake", script=script)
    engine = tether.Engine(models=[model], routing={"loop": "fake:m"}, store=f"sqlite:///{tmp_path}/t.db")

    @tether.workflow(name="tree")
    async def tree(ctx: tether.Ctx) -> Any:
        return await ctx.orchestrate("plan the research")

    out = await engine.run(tree, run_id="r", containment=Containment(max_agents=2, max_concurrent=4, max_depth=2,
                                                                      max_tokens=10_000))
    events = await engine.agent_events("r")
    draws = [e for e in events if e.kind == "budget_draw"]
    assert sum(e.tokens or 0 for e in draws[:3]) == 9_280
    assert draws[2].remaining == 720
    assert [e.child_agent_id for e in events if e.kind == "spawn"] == [2]
    assert [e.detail for e in events if e.kind == "spawn_refused"][:1] == ["agents"]
    # the next step ends the tree: the run has learned its prompts bill ~2,400 tokens beyond the estimate,
    # so with 720 left that turn is refused before the wire (no fourth draw, nothing spent past the ceiling)
    assert len(draws) == 3
    assert out.status == "exhausted"
    terminal = next(e for e in await engine.inspect("r") if e.kind == "agent" and e.ref is not None and e.agent_id == 1)
    assert terminal.error is not None and terminal.error["kind"] == "budget"
    assert terminal.error.get("reason") == "output-floor"
    assert all(e.agent_id == 1 for e in events if e.kind != "budget_draw" or e.tokens != 3_280)


async def test_fifty_children_at_max_concurrent_4_finish_without_deadlock(tmp_path: Path) -> None:
    working = {"now": 0, "peak": 0}

    def script(request: ChatRequest) -> Reply:
        if is_orchestrator(request):
            if assistant_turns(request) == 0:
                return Reply(tool_calls=[ToolCall("spawn_agent", {"goal": f"task {i}"}) for i in range(50)])
            return Reply(text="all done")
        return Reply(text="ok", latency_s=0.01)

    model = tether.models.fake("fake", script=script)
    engine = tether.Engine(models=[model], routing={"loop": "fake:m"}, store=f"sqlite:///{tmp_path}/t.db")

    def track(event: tether.events.AgentStart | tether.events.AgentEnd) -> None:
        if event.depth == 2:
            working["now"] += 1 if event.type == "agent:start" else -1
            working["peak"] = max(working["peak"], working["now"])

    @tether.workflow(name="fan")
    async def fan(ctx: tether.Ctx) -> Any:
        return await ctx.orchestrate("fan out")

    handle = engine.start(fan, run_id="r", containment=Containment(max_agents=60, max_concurrent=4, max_depth=2))
    handle.on("agent:start", track)
    handle.on("agent:end", track)
    out = await asyncio.wait_for(handle.result(), 60)
    assert out.status == "ok" and out.value == "all done"
    events = await engine.agent_events("r")
    assert len([e for e in events if e.kind == "spawn"]) == 50
    assert 1 <= working["peak"] <= 4


async def test_depth_and_orchestrator_spawn_caps_refuse_with_their_labels(tmp_path: Path) -> None:
    def script(request: ChatRequest) -> Reply:
        depth_two_child = "nested" in request.messages[-1].text_content
        if is_orchestrator(request) and assistant_turns(request) == 0 and not depth_two_child:
            return Reply(tool_calls=[ToolCall("spawn_agent", {"goal": "nested spawner", "tools": ["spawn_agent"]}),
                                     ToolCall("spawn_agent", {"goal": "second"})])
        if is_orchestrator(request) and assistant_turns(request) == 0:
            return Reply(tool_calls=[ToolCall("spawn_agent", {"goal": "too deep"})])
        last = request.messages[-1]
        return Reply(text="saw: " + (last.parts[0].content if last.role == "tool" else "nothing"))  # type: ignore[union-attr]

    model = tether.models.fake("fake", script=script)
    engine = tether.Engine(models=[model], routing={"loop": "fake:m"}, store=f"sqlite:///{tmp_path}/t.db")

    @tether.workflow(name="caps")
    async def caps(ctx: tether.Ctx) -> Any:
        return await ctx.orchestrate("go", max_spawns=1)

    out = await engine.run(caps, run_id="r", containment=Containment(max_agents=10, max_concurrent=2, max_depth=2))
    assert out.status == "ok"
    events = await engine.agent_events("r")
    assert sorted(e.detail for e in events if e.kind == "spawn_refused") == ["agents", "depth"]
    tool_texts = [p.content for r in model.requests for m in r.messages if m.role == "tool" for p in m.parts]
    assert any(t.startswith("[spawn refused] spawn cap of this orchestrator reached (1 spawns)") for t in tool_texts)
    assert any(t.startswith("[spawn refused] depth cap reached") for t in tool_texts)


async def test_workflow_agents_past_the_agent_cap_are_refused_before_any_call(tmp_path: Path) -> None:
    model = tether.models.fake("fake", script=lambda r: Reply(text="ok"))
    engine = tether.Engine(models=[model], routing={"loop": "fake:m"}, store=f"sqlite:///{tmp_path}/t.db")

    @tether.workflow(name="many")
    async def many(ctx: tether.Ctx) -> Any:
        return [await ctx.agent(f"a{i}") for i in range(3)]

    out = await engine.run(many, run_id="r", containment=Containment(max_agents=2, max_concurrent=2, max_depth=1))
    assert out.status == "error" and isinstance(out.error, tether.AdmissionRejectedError)
    assert model.calls == 2
    assert [e.detail for e in await engine.agent_events("r") if e.kind == "spawn_refused"] == ["agents"]


def test_the_tree_is_rebuilt_from_the_store_in_a_new_process(tmp_path: Path) -> None:
    def script(request: ChatRequest) -> Reply:
        if is_orchestrator(request) and assistant_turns(request) == 0:
            return Reply(tool_calls=[ToolCall("spawn_agent", {"goal": "x"}), ToolCall("spawn_agent", {"goal": "y"})],
                         input_tokens=100, output_tokens=10)
        return Reply(text="done", input_tokens=50, output_tokens=5)

    url = f"sqlite:///{tmp_path}/t.db"
    model = tether.models.fake("fake", script=script)
    engine = tether.Engine(models=[model], routing={"loop": "fake:m"}, store=url)

    @tether.workflow(name="rebuild")
    async def rebuild(ctx: tether.Ctx) -> Any:
        return await ctx.orchestrate("split the work")

    async def run() -> None:
        await engine.run(rebuild, run_id="r", containment=Containment(max_agents=5, max_concurrent=2, max_depth=2,
                                                                       max_tokens=5_000))
        await engine.close()

    asyncio.run(run())
    exe = Path(sys.executable).with_name("tether")
    done = subprocess.run([str(exe), "tree", "r", "--store", url, "--json"], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    tree = json.loads(done.stdout)
    agents = {a["agent_id"]: a for a in tree["agents"]}
    assert agents[1]["parent_agent_id"] is None and agents[2]["parent_agent_id"] == 1
    assert agents[3]["parent_agent_id"] == 1 and agents[2]["status"] == "ok"
    assert [e["kind"] for e in tree["events"]].count("spawn") == 2
    draws = [e for e in tree["events"] if e["kind"] == "budget_draw"]
    assert draws[-1]["remaining"] == 5_000 - sum(e["tokens"] for e in draws)
    text = subprocess.run([str(exe), "tree", "r", "--store", url], capture_output=True, text=True, timeout=60)
    assert text.returncode == 0 and "spawn: x" in text.stdout
