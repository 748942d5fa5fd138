"""Telemetry of an agent served from the journal: its events, its models' usage and its whole subtree.

A replayed agent runs nothing, so nothing below it emits; these events (all `replayed=True`) let a
live view, an event log or a trace show what the journal holds: the agent, the usage of each model
that served it, and every agent it spawned (or was refused), in journal order.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tether.contracts.entries import JournalEntry
from tether.contracts.events import AgentStart, BaseEvent, ModelEnd, Spawn, SpawnRefused
from tether.contracts.results import AgentResult
from tether.journal.matching import JournalIndex
from tether.journal.scope import is_under

if TYPE_CHECKING:
    from tether.engine.events import EventStream
    from tether.engine.frame import Frame


def emit_replayed_agent(
    events: EventStream, index: JournalIndex, frame: Frame, running: JournalEntry, terminal: JournalEntry,
    result: AgentResult,
) -> None:
    """Emit the replayed agent at `running` (result already restored) and its journaled subtree."""
    depth = {running.agent_id: frame.depth + 1}
    span_of = {running.agent_id: f"agent-{running.seq}"}
    _emit_agent(events, index, running, terminal, result, depth[running.agent_id], frame.span_id)
    inner = JournalIndex.inner_scope(running)
    if inner is None:
        return
    from tether.engine.agent_call import restore_result  # agent_call imports this module

    for e in index.entries:
        if e.kind == "tree" and isinstance(e.value, dict) and e.value.get("agent_id") in depth:
            fact = _tree_event(e.value)
            if fact is not None:
                events.emit(fact.model_copy(update={"span_id": span_of[fact.agent_id]}))
        elif e.kind == "agent" and e.ref is None and e.status == "running" and is_under(e.scope, inner):
            term = index.terminal_of.get(e.seq or 0)
            if term is None or e.parent_agent_id not in depth:
                continue
            depth[e.agent_id] = depth[e.parent_agent_id] + 1
            span_of[e.agent_id] = f"agent-{e.seq}"
            child = restore_result(e, term, None)
            _emit_agent(events, index, e, term, child, depth[e.agent_id], span_of[e.parent_agent_id])


def _emit_agent(
    events: EventStream, index: JournalIndex, running: JournalEntry, terminal: JournalEntry, result: AgentResult,
    depth: int, parent_span: str,
) -> None:
    from tether.agents.loop import end_event

    span, agent_id, label = f"agent-{running.seq}", running.agent_id, running.label
    model = running.value.get("model") if isinstance(running.value, dict) else None
    events.emit(AgentStart(
        agent_id=agent_id, label=label, depth=depth, replayed=True, parent_agent_id=running.parent_agent_id,
        agent_type=running.agent_type, model=model if isinstance(model, str) else None, phase=running.phase,
        turns=result.turns, span_id=span, parent_span_id=parent_span,
    ))
    costs = getattr(terminal, "costs", None) or {}
    for n, (ref, usage) in enumerate((terminal.usage_by_model or {}).items(), start=1):
        events.emit(ModelEnd(
            agent_id=agent_id, label=label, depth=depth, replayed=True, call=n, model=ref,
            provider=ref.partition(":")[0], usage=usage, cost_usd=float(costs.get(ref, 0.0)),
            calls=max(1, _dispatches(index, agent_id, ref)), span_id=f"{span}:call-{n}", parent_span_id=span,
        ))
    end = end_event(result, provider_calls=terminal.provider_calls or 0)
    events.emit(end.model_copy(update={
        "agent_id": agent_id, "label": label, "depth": depth, "replayed": True, "span_id": span,
        "parent_span_id": parent_span,
    }))


def _dispatches(index: JournalIndex, agent_id: int | None, model: str) -> int:
    """Provider calls the journal recorded for one agent and model (`dispatch` decisions)."""
    return sum(
        1 for e in index.entries
        if e.kind == "decision" and e.label == "dispatch" and e.agent_id == agent_id
        and isinstance(e.value, dict) and e.value.get("model") == model
    )


def _tree_event(value: dict[str, object]) -> Spawn | SpawnRefused | None:
    kind = value.get("kind")
    fields = {k: v for k, v in value.items() if k != "kind"}
    event: BaseEvent
    if kind == "spawn":
        event = Spawn.model_validate({**fields, "replayed": True})
    elif kind == "spawn_refused":
        event = SpawnRefused.model_validate({**fields, "replayed": True})
    else:
        return None
    assert isinstance(event, Spawn | SpawnRefused)
    return event
