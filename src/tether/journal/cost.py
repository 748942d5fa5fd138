"""The cost report: a pure fold over terminal entries, identical for a run and its replays."""

from __future__ import annotations

from collections.abc import Iterable

from pydantic import BaseModel, ConfigDict, Field

from tether.contracts.entries import JournalEntry
from tether.contracts.usage import Usage
from tether.journal.scope import is_under


class CostReport(BaseModel):
    """What a run spent, attributed by model, phase, role and agent type; unpriced usage itemized."""

    model_config = ConfigDict(frozen=True)

    total_usd: float = 0.0
    by_model: dict[str, float] = Field(default_factory=dict)
    by_phase: dict[str, float] = Field(default_factory=dict)
    by_role: dict[str, float] = Field(default_factory=dict)
    by_agent_type: dict[str, float] = Field(default_factory=dict)
    unpriced: dict[str, Usage] = Field(default_factory=dict)
    approximate: bool = False
    usage: Usage = Usage()
    """Tokens of every terminal summed; `usage.reasoning_tokens` is the reasoning part of `output_tokens`."""
    provider_calls: int = 0


def _add(d: dict[str, float], k: str, v: float) -> None:
    d[k] = d.get(k, 0.0) + v


def fold_cost(entries: Iterable[JournalEntry]) -> CostReport:
    """Sum what every terminal recorded: spend counts once per terminal, never per redispatch."""
    total = 0.0
    by_model: dict[str, float] = {}
    by_phase: dict[str, float] = {}
    by_role: dict[str, float] = {}
    by_type: dict[str, float] = {}
    unpriced: dict[str, Usage] = {}
    usage = Usage()
    approximate = False
    calls = 0
    for e in entries:
        if e.ref is None or e.kind != "agent" or e.status == "running":
            continue
        costs = getattr(e, "costs", None) or {}
        for model, usd in costs.items():
            _add(by_model, model, float(usd))
        spent = float(e.cost_usd or 0.0)
        total += spent
        _add(by_phase, e.phase or "", spent)
        _add(by_role, e.role or "loop", spent)
        _add(by_type, e.agent_type or "", spent)
        for model, raw in (getattr(e, "unpriced", None) or {}).items():
            u = Usage.model_validate(raw)
            unpriced[model] = unpriced.get(model, Usage()) + u
        if e.usage is not None:
            usage = usage + e.usage
            approximate = approximate or e.usage.approximate
        calls += e.provider_calls or 0
    return CostReport(
        total_usd=round(total, 10),
        by_model=by_model,
        by_phase={k: v for k, v in by_phase.items() if k},
        by_role=by_role,
        by_agent_type={k: v for k, v in by_type.items() if k},
        unpriced=unpriced,
        approximate=approximate,
        usage=usage,
        provider_calls=calls,
    )


def spent_under(entries: Iterable[JournalEntry], scope: str | None) -> float:
    """Spend folded from terminal entries only (under `scope`, or the whole run for None)."""
    total = 0.0
    for e in entries:
        if e.ref is not None and e.kind == "agent" and e.cost_usd and (scope is None or is_under(e.scope, scope)):
            total += e.cost_usd
    return total
