"""Property: random spawn trees against random caps never break containment (hypothesis)."""

from __future__ import annotations

import asyncio
import random
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tether
from tether.contracts.messages import ChatRequest
from tether.engine.options import Containment
from tether.testing import Reply, ToolCall

IN_TOKENS, OUT_TOKENS = 40, 10


def plan_for(seed: int, fanout: int) -> dict[str, list[str]]:
    """A random tree of goals: each goal lists the child goals its agent will try to spawn."""
    rng = random.Random(seed)
    plan: dict[str, list[str]] = {}
    frontier = ["root"]
    while frontier and len(plan) < 40:
        goal = frontier.pop(0)
        kids = [f"{goal}.{i}" for i in range(rng.randint(0, fanout))]
        plan[goal] = kids
        frontier += kids
    return plan


async def grow(plan: dict[str, list[str]], caps: Containment, tmp: Any) -> tuple[tether.RunOutcome, Any, dict[int, int]]:
    def script(request: ChatRequest) -> Reply:
        goal = next(m.text_content for m in request.messages if m.role == "user")
        turned = any(m.role == "assistant" for m in request.messages)
        kids = plan.get(goal, [])
        if kids and not turned:
            calls = [ToolCall("spawn_agent", {"goal": k, "tools": ["spawn_agent"]}) for k in kids]
            return Reply(tool_calls=calls, input_tokens=IN_TOKENS, output_tokens=OUT_TOKENS, latency_s=0.001)
        return Reply(text=f"{goal} done", input_tokens=IN_TOKENS, output_tokens=OUT_TOKENS, latency_s=0.002)

    model = tether.models.fake("fake", script=script)
    engine = tether.Engine(models=[model], routing={"loop": "fake:m"}, store=f"sqlite:///{tmp}/t.db")
    working: dict[int, int] = {}
    peak: dict[int, int] = {}

    def track(event: tether.events.AgentStart | tether.events.AgentEnd) -> None:
        d = event.depth
        working[d] = working.get(d, 0) + (1 if event.type == "agent:start" else -1)
        peak[d] = max(peak.get(d, 0), working[d])

    @tether.workflow(name="grow")
    async def flow(ctx: tether.Ctx) -> Any:
        return await ctx.orchestrate("root")

    handle = engine.start(flow, run_id="g", containment=caps)
    handle.on("agent:start", track)
    handle.on("agent:end", track)
    out = await asyncio.wait_for(handle.result(), 60)
    tree = await engine.agent_tree("g")
    await engine.close()
    return out, tree, peak


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    seed=st.integers(0, 10_000),
    fanout=st.integers(0, 4),
    max_agents=st.integers(1, 12),
    max_concurrent=st.integers(1, 3),
    max_depth=st.integers(1, 4),
    max_tokens=st.one_of(st.none(), st.integers(60, 1_500)),
)
def test_random_trees_never_break_the_caps(tmp_path_factory: Any, seed: int, fanout: int, max_agents: int,
                                          max_concurrent: int, max_depth: int, max_tokens: int | None) -> None:
    caps = Containment(max_agents=max_agents, max_concurrent=max_concurrent, max_depth=max_depth,
                       max_tokens=max_tokens)
    out, tree, peak = asyncio.run(grow(plan_for(seed, fanout), caps, tmp_path_factory.mktemp("tree")))
    assert out.status in ("ok", "exhausted", "error")
    assert len(tree.agents) <= max_agents
    parents = {a.agent_id: a.parent_agent_id for a in tree.agents}

    def depth(agent_id: int) -> int:
        parent = parents[agent_id]
        return 1 if parent is None else 1 + depth(parent)

    assert all(depth(a) <= max_depth for a in parents)
    assert all(n <= max_concurrent for n in peak.values()), peak
    if max_tokens is not None:
        drawn = sum(e.tokens or 0 for e in tree.events if e.kind == "budget_draw")
        in_flight = max_concurrent * max_depth  # at most this many turns are in flight at once
        assert drawn <= max_tokens + in_flight * (IN_TOKENS + OUT_TOKENS)
        refused = [e.detail for e in tree.events if e.kind == "spawn_refused"]
        assert set(refused) <= {"agents", "depth", "budget"}
