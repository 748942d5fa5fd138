"""Telemetry of an agent served from the journal: its events, its models' usage and its whole subtree.

A replayed agent runs nothing, so nothing below it emits; these events (all `replayed=True`) let a
live view, an event log or a trace show what the journal holds: the agent, the usage of each model
that served it, and every agent it spawned (or was refused), in journal order.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

from tether.contracts.entries import JournalEntry
from tether.contracts.events import AgentStart, ModelEnd, Spawn, SpawnRefused
from tether.contracts.results import AgentResult
from tether.engine.agent_result import restore_result
from tether.journal.matching import JournalIndex

if TYPE_CHECKING:
    from tether.engine.events import EventStream
    from tether.engine.frame import Frame


class ReplayFacts:
    """One pass over the journal a segment loaded: children, tree facts and dispatches per agent.

    Replayed agents' entries all predate the segment, so the index built at the first replay holds
    every fact any replay of this segment needs.
    """

    def __init__(self, index: JournalIndex) -> None:
        self.index = index
        self.children: dict[int, list[JournalEntry]] = {}
        self.facts: dict[int, list[JournalEntry]] = {}
        self.dispatches: Counter[tuple[int | None, str]] = Counter()
        for e in index.entries:
            if e.kind == "agent" and e.ref is None and e.status == "running" and e.parent_agent_id is not None:
                self.children.setdefault(e.parent_agent_id, []).append(e)
            elif e.kind == "tree" and isinstance(e.value, dict) and e.value.get("kind") in ("spawn", "spawn_refused"):
                self.facts.setdefault(int(e.value.get("agent_id") or 0), []).append(e)
            elif e.kind == "decision" and e.label == "dispatch" and isinstance(e.value, dict):
                self.dispatches[(e.agent_id, str(e.value.get("model")))] += 1

    def emit(
        self, events: EventStream, frame: Frame, running: JournalEntry, terminal: JournalEntry, result: AgentResult
    ) -> None:
        """Emit the replayed agent at `running` (its result already restored) and its journaled subtree."""
        self._agent(events, running, terminal, result, frame.depth + 1, frame.span_id)
        depth = {running.agent_id: frame.depth + 1}
        span_of = {running.agent_id: f"agent-{running.seq}"}
        for e in self._subtree(running.agent_id):
            if e.kind == "tree":
                assert isinstance(e.value, dict)
                fields = {k: v for k, v in e.value.items() if k != "kind"}
                model = Spawn if e.value.get("kind") == "spawn" else SpawnRefused
                events.emit(model.model_validate({**fields, "replayed": True, "span_id": span_of[e.value["agent_id"]]}))
                continue
            term = self.index.terminal_of.get(e.seq or 0)
            if term is None or e.parent_agent_id not in depth:
                continue  # a child that never settled: nothing to re-tell
            depth[e.agent_id] = depth[e.parent_agent_id] + 1
            span_of[e.agent_id] = f"agent-{e.seq}"
            child = restore_result(e, term, None)
            self._agent(events, e, term, child, depth[e.agent_id], span_of[e.parent_agent_id])

    def _subtree(self, root: int | None) -> list[JournalEntry]:
        """Every spawn fact and spawned agent under `root`, in journal order."""
        out: list[JournalEntry] = []
        todo = [root]
        while todo:
            agent_id = todo.pop()
            if agent_id is None:
                continue
            out += self.facts.get(agent_id, [])
            kids = self.children.get(agent_id, [])
            out += kids
            todo += [k.agent_id for k in kids]
        return sorted(out, key=lambda e: e.seq or 0)

    def _agent(
        self, events: EventStream, running: JournalEntry, terminal: JournalEntry, result: AgentResult, depth: int,
        parent_span: str,
    ) -> None:
        from tether.agents.loop import end_event

        span, agent_id, label = f"agent-{running.seq}", running.agent_id, running.label
        model = running.value.get("model") if isinstance(running.value, dict) else None
        events.emit(AgentStart(
            agent_id=agent_id, label=label, depth=depth, replayed=True, parent_agent_id=running.parent_agent_id,
            agent_type=running.agent_type, model=model if isinstance(model, str) else None, phase=running.phase,
            turns=result.turns, span_id=span, parent_span_id=parent_span,
        ))
        costs = terminal.costs or {}
        for n, (ref, usage) in enumerate((terminal.usage_by_model or {}).items(), start=1):
            events.emit(ModelEnd(
                agent_id=agent_id, label=label, depth=depth, replayed=True, call=n, model=ref,
                provider=ref.partition(":")[0], usage=usage, cost_usd=float(costs.get(ref, 0.0)),
                calls=max(1, self.dispatches[(agent_id, ref)]), span_id=f"{span}:call-{n}", parent_span_id=span,
            ))
        end = end_event(result, provider_calls=terminal.provider_calls or 0)
        end.agent_id, end.label, end.depth, end.replayed = agent_id, label, depth, True
        end.span_id, end.parent_span_id = span, parent_span
        events.emit(end)
