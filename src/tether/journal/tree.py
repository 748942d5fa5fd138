"""The agent-tree fold: `AgentEvent`s rebuilt from journaled `tree` facts (seed 003)."""

from __future__ import annotations

from collections.abc import Iterable

from pydantic import BaseModel, Field

from tether.contracts.entries import JournalEntry
from tether.contracts.events import AgentEvent
from tether.journal.cost import CostReport, cost_report, fold_spend


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
    reused_usd: float = 0.0
    """A fork's copy its code reused: what the source paid for it (its own figures above are then 0)."""
    reused: bool = False
    """A copy of the source's call the fork reused: the source paid for it, this run did not."""


class TreeReport(BaseModel):
    """The agent tree rebuilt from the store alone: agents with their parents, and the audit events."""

    agents: list[AgentNode]
    events: list[AgentEvent]
    cost: CostReport = CostReport()
    """The run's cost report: the nodes' `cost_usd` sum to its `total_usd`, their `reused_usd` to its `reused_usd`."""


def fold_tree(entries: Iterable[JournalEntry]) -> TreeReport:
    """The tree, each node with the figures `fold_cost` sums (one source for every view). A fork's copies its
    code did not reach are left out; the ones it reused carry only what the source paid (`reused_usd`)."""
    entries = list(entries)
    folded = fold_spend(entries)
    nodes: dict[int, AgentNode] = {}
    for spend in folded.agents:
        e = spend.running
        if e.agent_id is None or (folded.copied(spend) and not folded.reused(spend)):
            continue
        status = (spend.terminal.status if spend.terminal is not None else None) or "running"
        node = AgentNode(agent_id=e.agent_id, parent_agent_id=e.parent_agent_id, label=e.label, role=e.role,
                         status=status, tokens=spend.tokens, provider_calls=spend.provider_calls)
        if folded.copied(spend):
            node.reused, node.reused_usd = True, round(spend.spent_usd, 10)
        else:
            node.cost_usd, node.spent_usd = round(spend.usd, 10), round(spend.spent_usd, 10)
            node.orphaned_usd, node.cut_calls = round(spend.orphaned_usd, 10), len(spend.cut)
        nodes[e.agent_id] = node
    events = fold_agent_events(entries)
    for ev in events:
        if ev.kind == "spawn_refused" and ev.agent_id in nodes and ev.detail:
            nodes[ev.agent_id].refusals.append(ev.detail)
    return TreeReport(agents=sorted(nodes.values(), key=lambda n: n.agent_id), events=events,
                      cost=cost_report(folded))
