"""The `spawn_agent` tool of `ctx.orchestrate`: children as typed results, refusals as typed text."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Protocol

from tether.contracts.errors import AdmissionRejectedError, BudgetExhaustedError
from tether.engine.frame import CURRENT_FRAME, Frame
from tether.engine.replay import Abandoned
from tether.engine.tree import CapLabel
from tether.journal.keys import orchestrator_refusal_key
from tether.mcp.source import ToolLike
from tether.tools.definition import Tool, tool

SPAWN_TOOL = "spawn_agent"


def refused_text(reason: str) -> str:
    return f"[spawn refused] {reason} — adapt or finish with what you have"


class Spawner(Protocol):
    """What the `spawn_agent` tool needs of the agents of a segment (`AgentCall`)."""

    async def call(
        self, prompt: str, *, tools: Sequence[ToolLike] = (), output: Any = None, full: bool = False,
        label: str | None = None, exposure_wait: bool = False,
    ) -> Any: ...
    async def refused(self, frame: Frame, key: str, label: CapLabel, goal: str) -> None: ...
    def repeated_spawn(self, frame: Frame, goal: str) -> dict[str, Any] | None: ...


def spawn_tool(agents: Spawner, allowed: Sequence[Tool], max_spawns: int | None) -> Tool:
    """A fresh `spawn_agent` tool for one orchestrator; `allowed` are the tools children may ask for."""
    by_name = {t.name: t for t in allowed}
    spawned = 0

    async def spawn_agent(goal: str, tools: list[str] | None = None, output: dict[str, Any] | None = None) -> Any:
        """Start a child agent on a goal; it returns the child's status, tokens, cost and final text.

        Args:
            goal: What the child agent should do, self-contained.
            tools: Names of your tools the child may use (add "spawn_agent" to let it spawn in turn).
            output: An optional JSON schema the child's final answer must follow.
        """
        nonlocal spawned
        frame = CURRENT_FRAME.get()
        repeated = agents.repeated_spawn(frame, goal)
        if repeated is not None:  # the runaway brake: the orchestrator's next turn stops on it
            return refused_text(f"runaway brake: this goal already finished {repeated['finished']} time(s)")
        if max_spawns is not None and spawned >= max_spawns:
            key = orchestrator_refusal_key("max_spawns", spawned, goal)
            await agents.refused(frame, key, "agents", goal)
            return refused_text(f"spawn cap of this orchestrator reached ({max_spawns} spawns)")
        spawned += 1
        names = list(tools or ())
        child_tools = [by_name[n] for n in names if n in by_name]
        if SPAWN_TOOL in names:
            child_tools.append(spawn_tool(agents, allowed, max_spawns))
        try:
            result = await agents.call(goal, tools=child_tools, output=output, full=True, label=f"spawn: {goal[:60]}",
                                       exposure_wait=True)
        except Abandoned:  # an operator abandoned this child: the orchestrator goes on without it
            return {"status": "skipped", "text": "[abandoned] an operator abandoned this child; it did not run"}
        except (AdmissionRejectedError, BudgetExhaustedError) as exc:
            if "agent_id" in exc.data:  # the child ran and the budget stopped it: a result, not a refusal
                return {"agent_id": exc.data["agent_id"], "status": "error", "text": f"[budget] {exc.message}"}
            if "label" not in exc.data:  # a USD admission refusal: journal it with the budget label
                key = orchestrator_refusal_key("usd", spawned, goal)
                await agents.refused(frame, key, "budget", goal)
            return refused_text(str(exc.data.get("detail") or exc.message))
        text = result.output if isinstance(result.output, str) else json.dumps(result.output, default=str)
        return {
            "agent_id": result.agent_id,
            "status": result.status,
            "tokens": result.usage.input_tokens + result.usage.output_tokens,
            "cost_usd": round(result.cost_usd, 8),
            "text": text,
        }

    # Idempotent: its effect (the child agent) is journaled, so a re-run after a crash replays it.
    return tool(name=SPAWN_TOOL, parallel_safe=True, idempotent=True)(spawn_agent)
