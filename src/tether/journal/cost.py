"""The cost report: a pure fold over the journal, identical for a run and its replays.

An agent invocation's spend comes from its terminal once it has one (the priced tally of every call
it made, plus `orphaned_usd`: calls a crash cut off before they settled). An invocation without a
terminal (its segment crashed, and no resume has finished it yet) is charged what its journaled
turn draws say it spent, plus the priced worst case of every dispatch after its last draw: the
provider may have billed those calls, and nothing journaled says otherwise. That worst-case part is
`orphaned_usd`, and it is in `total_usd` and in every ceiling check of a resumed run.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from tether.contracts.entries import JournalEntry, extra
from tether.contracts.usage import Usage, sum_usage
from tether.journal.scope import is_under

UNTYPED = "(untyped)"
"""The `by_agent_type` bucket of agents started without an `agent_type`."""


class CostReport(BaseModel):
    """What a run spent, attributed by model, phase, role and agent type; unpriced usage itemized."""

    model_config = ConfigDict(frozen=True)

    total_usd: float = 0.0
    by_model: dict[str, float] = Field(default_factory=dict)
    by_phase: dict[str, float] = Field(default_factory=dict)
    by_role: dict[str, float] = Field(default_factory=dict)
    by_agent_type: dict[str, float] = Field(default_factory=dict)
    unpriced: dict[str, Usage] = Field(default_factory=dict)
    orphaned_usd: float = 0.0
    """Estimated spend of calls cut off by a crash (priced at their worst case); included in `total_usd`."""
    approximate: bool = False
    usage: Usage = Usage()
    """Tokens of every terminal summed; `usage.reasoning_tokens` is the reasoning part of `output_tokens`."""
    provider_calls: int = 0


@dataclass
class AgentSpend:
    """What one agent invocation spent, as the journal tells it."""

    running: JournalEntry
    settled: bool = False
    costs: dict[str, float] = field(default_factory=dict)
    orphaned: dict[str, float] = field(default_factory=dict)
    covered: list[tuple[int, int]] = field(default_factory=list)
    """The dispatch numbers journaled turn draws settled, as (first, last) ranges."""
    dispatches: list[tuple[int, str, float | None]] = field(default_factory=list)

    @property
    def usd(self) -> float:
        return sum(self.costs.values()) + sum(self.orphaned.values())

    def settles(self, call: int) -> bool:
        """Whether a journaled draw settled dispatch `call` (a later draw never settles an earlier kill's call)."""
        return any(first <= call <= last for first, last in self.covered)

    def unsettled(self, after: int = 0) -> list[tuple[int, str, float | None]]:
        """Dispatches numbered above `after` that no draw settled: cut off by a crash, billed at worst."""
        return [d for d in self.dispatches if d[0] > after and not self.settles(d[0])]


def draw_range(entry: JournalEntry) -> tuple[int, int]:
    """The dispatches a `budget_draw` settles; a draw written before ranges existed settles all up to `through`."""
    last = int(extra(entry, "through") or 0)
    return int(extra(entry, "from_call") or 1), last


def _add(d: dict[str, float], k: str, v: float) -> None:
    d[k] = d.get(k, 0.0) + v


def _floats(raw: Any) -> dict[str, float]:
    return {str(k): float(v) for k, v in raw.items()} if isinstance(raw, dict) else {}


def dispatch_value(entry: JournalEntry) -> dict[str, Any] | None:
    """The payload of a `dispatch` fact (written before a provider call leaves), else None."""
    if entry.kind == "decision" and isinstance(entry.value, dict) and entry.value.get("decision") == "dispatch":
        return entry.value
    return None


def is_draw(entry: JournalEntry) -> bool:
    return entry.kind == "tree" and isinstance(entry.value, dict) and entry.value.get("kind") == "budget_draw"


def agent_spend(entries: Iterable[JournalEntry]) -> list[AgentSpend]:
    """Every agent invocation's spend, settled or not, in the order the invocations started."""
    by_seq: dict[int, AgentSpend] = {}
    by_agent: dict[int, AgentSpend] = {}
    for e in entries:
        if e.kind == "agent":
            if e.status == "running" and e.ref is None and e.seq is not None:
                spend = AgentSpend(e)
                by_seq[e.seq] = spend
                if e.agent_id is not None:
                    by_agent[e.agent_id] = spend
            elif e.ref is not None and e.ref in by_seq and not by_seq[e.ref].settled:
                spend = by_seq[e.ref]
                spend.settled = True
                spend.costs = _floats(extra(e, "costs"))
                if not spend.costs and e.cost_usd:
                    spend.costs = {e.served_by or "": float(e.cost_usd)}
                spend.orphaned = _floats(extra(e, "orphaned"))
            continue
        if e.agent_id is None:
            continue  # not an agent's fact (so a fold may be handed only the agents' entries)
        open_spend = by_agent.get(e.agent_id)
        if open_spend is None or open_spend.settled:
            continue
        if is_draw(e):
            for model, usd in _floats(extra(e, "costs")).items():
                _add(open_spend.costs, model, usd)
            open_spend.covered.append(draw_range(e))
        elif (d := dispatch_value(e)) is not None:
            worst = d.get("worst_usd")
            open_spend.dispatches.append((int(d.get("call", 0)), str(d.get("model", "")),
                                          None if worst is None else float(worst)))
    spends = list(by_seq.values())
    for spend in spends:
        if not spend.settled:
            for _, model, worst in spend.unsettled():
                if worst:
                    _add(spend.orphaned, model, worst)
    return spends


def fold_cost(entries: Iterable[JournalEntry]) -> CostReport:
    """Sum what every invocation spent: once per invocation, never per redispatch."""
    entries = list(entries)
    by_model: dict[str, float] = {}
    by_phase: dict[str, float] = {}
    by_role: dict[str, float] = {}
    by_type: dict[str, float] = {}
    total = orphaned = 0.0
    for spend in agent_spend(entries):
        usd = spend.usd
        total += usd
        orphaned += sum(spend.orphaned.values())
        for model, v in (*spend.costs.items(), *spend.orphaned.items()):
            _add(by_model, model, v)
        run = spend.running
        _add(by_phase, run.phase or "", usd)
        _add(by_role, run.role or "loop", usd)
        _add(by_type, run.agent_type or UNTYPED, usd)
    unpriced: dict[str, Usage] = {}
    usages: list[Usage] = []
    calls = 0
    for e in entries:
        if e.ref is None or e.kind != "agent" or e.status == "running":
            continue
        for model, raw in (extra(e, "unpriced") or {}).items():
            unpriced[model] = unpriced.get(model, Usage()) + Usage.model_validate(raw)
        if e.usage is not None:
            usages.append(e.usage)
        calls += e.provider_calls or 0
    usage = sum_usage(usages)
    approximate = orphaned > 0 or usage.approximate
    return CostReport(
        total_usd=round(total, 10),
        by_model=by_model,
        by_phase={k: v for k, v in by_phase.items() if k},
        by_role=by_role,
        by_agent_type=by_type,
        unpriced=unpriced,
        orphaned_usd=round(orphaned, 10),
        approximate=approximate,
        usage=usage,
        provider_calls=calls,
    )


def spent_under(entries: Iterable[JournalEntry], scope: str | None) -> float:
    """Spend of every invocation under `scope` (the whole run for None), orphaned dispatches included."""
    return sum(s.usd for s in agent_spend(entries) if scope is None or is_under(s.running.scope, scope))
