"""The agent-tree fold: `AgentEvent`s rebuilt from journaled `tree` facts (seed 003)."""

from __future__ import annotations

from collections.abc import Iterable

from tether.contracts.entries import JournalEntry
from tether.contracts.events import AgentEvent


def fold_agent_events(entries: Iterable[JournalEntry]) -> list[AgentEvent]:
    """Every spawn, refusal and budget draw in journal order."""
    out: list[AgentEvent] = []
    for e in entries:
        if e.kind == "tree" and isinstance(e.value, dict):
            out.append(AgentEvent.model_validate(e.value))
    return out
