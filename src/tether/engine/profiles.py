"""Agent profiles: the defaults an `agent_type` registered with `engine.profile(...)` gives `ctx.agent`."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tether.mcp.source import ToolLike
from tether.routing import ModelLike


@dataclass(frozen=True)
class AgentProfile:
    """Defaults for an `agent_type` registered on the engine (`engine.profile(...)`)."""

    model: ModelLike | None = None
    system: str | None = None
    tools: Sequence[ToolLike] = ()
    max_turns: int | None = None
    max_output_tokens: int | None = None
    est_cost: float | None = None


NO_PROFILE = AgentProfile()
"""The defaults of an agent type that has no profile (frozen, so one instance serves every call)."""
