"""The agent-tree fold: `AgentEvent`s rebuilt from journaled `tree` facts (seed 003)."""

from __future__ import annotations

from collections.abc import Iterable

from pydantic import BaseModel, Field

from tether.contracts.entries import JournalEntry
from tether.contracts.events import AgentEvent
from tether.journal.cost import agent_spend


def fold_agent_events(entries: Iterable[JournalEntry]) -> list[AgentEvent]:
    """Every spawn, refusal and budget draw in journal order."""
    out: list[AgentEvent] = []
    for e in entries:
        if e.kind == "tree" and isinstance(e.value, dict):
            out.append(AgentEvent.model_validate(e.value))
    return out


class AgentNode(BaseModel):
    """One agent of the tree as the journal records it (its figures are the cost report's, per agent)."""

    agent_id: int
    parent_agent_id: int | None = None
    label: str | None = None
    role: str | None = None
    status: str = "running"
    tokens: int = 0
    """Input plus output tokens: the terminal's, or the drawn turns of an agent still running or parked."""
    cost_usd: float = 0.0
    """`spent_usd + orphaned_usd`: what the agent counts against the ceiling."""
    spent_usd: float = 0.0
    orphaned_usd: float = 0.0
    """Its calls a crash cut off, at their worst case (or as an operator settled them)."""
    cut_calls: int = 0
    provider_calls: int = 0
    refusals: list[str] = Field(default_factory=list)


class TreeReport(BaseModel):
    """The agent tree rebuilt from the store alone: agents with their parents, and the audit events."""

    agents: list[AgentNode]
    events: list[AgentEvent]


def fold_tree(entries: Iterable[JournalEntry]) -> TreeReport:
    """The tree, each node with the figures `fold_cost` sums (one source for every view)."""
    entries = list(entries)
    nodes: dict[int, AgentNode] = {}
    for spend in agent_spend(entries):
        e = spend.running
        if e.agent_id is None:
            continue
        status = (spend.terminal.status if spend.terminal is not None else None) or "running"
        nodes[e.agent_id] = AgentNode(
            agent_id=e.agent_id, parent_agent_id=e.parent_agent_id, label=e.label, role=e.role, status=status,
            tokens=spend.tokens, cost_usd=round(spend.usd, 10), spent_usd=round(spend.spent_usd, 10),
            orphaned_usd=round(spend.orphaned_usd, 10), cut_calls=len(spend.cut), provider_calls=spend.provider_calls,
        )
    events = fold_agent_events(entries)
    for ev in events:
        if ev.kind == "spawn_refused" and ev.agent_id in nodes and ev.detail:
            nodes[ev.agent_id].refusals.append(ev.detail)
    return TreeReport(agents=sorted(nodes.values(), key=lambda n: n.agent_id), events=events)
