"""The agent-tree fold: `AgentEvent`s rebuilt from journaled `tree` facts (seed 003)."""

from __future__ import annotations

from collections.abc import Iterable

from pydantic import BaseModel, Field

from tether.contracts.entries import JournalEntry
from tether.contracts.events import AgentEvent


def fold_agent_events(entries: Iterable[JournalEntry]) -> list[AgentEvent]:
    """Every spawn, refusal and budget draw in journal order."""
    out: list[AgentEvent] = []
    for e in entries:
        if e.kind == "tree" and isinstance(e.value, dict):
            out.append(AgentEvent.model_validate(e.value))
    return out


class AgentNode(BaseModel):
    """One agent of the tree as the journal records it."""

    agent_id: int
    parent_agent_id: int | None = None
    label: str | None = None
    role: str | None = None
    status: str = "running"
    tokens: int = 0
    cost_usd: float = 0.0
    refusals: list[str] = Field(default_factory=list)


class TreeReport(BaseModel):
    """The agent tree rebuilt from the store alone: agents with their parents, and the audit events."""

    agents: list[AgentNode]
    events: list[AgentEvent]


def fold_tree(entries: Iterable[JournalEntry]) -> TreeReport:
    entries = list(entries)
    nodes: dict[int, AgentNode] = {}
    by_seq: dict[int, int] = {}
    for e in entries:
        if e.kind == "agent" and e.status == "running" and e.agent_id is not None and e.seq is not None:
            nodes[e.agent_id] = AgentNode(agent_id=e.agent_id, parent_agent_id=e.parent_agent_id, label=e.label,
                                          role=e.role)
            by_seq[e.seq] = e.agent_id
        elif e.kind == "agent" and e.ref in by_seq and e.status is not None:
            node = nodes[by_seq[e.ref]]
            node.status = e.status
            if e.usage is not None:
                node.tokens += e.usage.input_tokens + e.usage.output_tokens
            node.cost_usd += e.cost_usd or 0.0
    events = fold_agent_events(entries)
    for ev in events:
        if ev.kind == "spawn_refused" and ev.agent_id in nodes and ev.detail:
            nodes[ev.agent_id].refusals.append(ev.detail)
    return TreeReport(agents=sorted(nodes.values(), key=lambda n: n.agent_id), events=events)
