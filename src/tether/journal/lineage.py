"""A fork's lineage: where its journal came from, as its genesis records it (docs/forks.md).

The genesis of a fork carries a `fork` member: the source run, the seq it was forked `at` (None: the
whole journal), the last seq of the copied prefix (`reused_through`) and the model swaps by agent label.
Every entry at or below `reused_through` (but the genesis) was paid for by the source run, never by
the fork: the cost folds report it as `reused_usd`, and the fork's ceiling bounds only its new spend.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from tether.contracts.entries import JournalEntry, RunMeta
from tether.journal.matching import JournalIndex

FORK_MEMBER = "fork"
"""The genesis member that holds a fork's lineage."""
UNREUSED_MEMBER = "unreused"
"""The settle member listing the copied agent entries (by seq) the fork's code did not reuse."""


@dataclass(frozen=True, slots=True)
class Lineage:
    """Where a fork came from: its source run, the cut, the copied prefix and the model swaps."""

    forked_from: str
    at: int | None
    """The source seq the fork re-runs from (entries before it were copied); None: the whole journal."""
    reused_through: int
    """The fork's own seq of the last copied entry: everything at or below it the source paid for."""
    models: Mapping[str, str] = field(default_factory=dict)
    """Agent label (or agent type) -> the `adapter:model` the fork runs it on instead."""
    seq_map: Mapping[int, int] = field(default_factory=dict)
    """The fork's seq of every copied entry -> its seq in the source run."""

    def to_json(self) -> dict[str, Any]:
        return {"forked_from": self.forked_from, "at": self.at, "reused_through": self.reused_through,
                "models": dict(self.models), "seq_map": {str(k): v for k, v in self.seq_map.items()}}

    def model_for(self, label: str | None, agent_type: str | None) -> str | None:
        """The swapped model of an agent call, by its label first, then its agent type."""
        if label is not None and label in self.models:
            return self.models[label]
        if agent_type is not None and agent_type in self.models:
            return self.models[agent_type]
        return None


def lineage_from(value: Any) -> Lineage | None:
    """The lineage in a genesis value (None for a run that is not a fork)."""
    raw = value.get(FORK_MEMBER) if isinstance(value, dict) else None
    if not isinstance(raw, dict) or not isinstance(raw.get("forked_from"), str):
        return None
    at = raw.get("at")
    models = raw.get("models") if isinstance(raw.get("models"), dict) else {}
    seq_map = raw.get("seq_map") if isinstance(raw.get("seq_map"), dict) else {}
    return Lineage(
        forked_from=raw["forked_from"], at=at if isinstance(at, int) else None,
        reused_through=int(raw.get("reused_through") or 0),
        models={str(k): str(v) for k, v in (models or {}).items()},
        seq_map={int(k): int(v) for k, v in (seq_map or {}).items()},
    )


def is_genesis(entry: JournalEntry) -> bool:
    return entry.kind == "decision" and entry.scope == "" and isinstance(entry.value, dict) \
        and entry.value.get("decision") == "genesis"


def lineage_of(entries: Iterable[JournalEntry]) -> Lineage | None:
    """The lineage of a run, from its genesis (the first entry; None when it is not a fork)."""
    for e in entries:
        if is_genesis(e):
            return lineage_from(e.value)
    return None


def settle_members(index: JournalIndex) -> dict[str, Any]:
    """What a fork's settle adds: the copied agent calls (by seq) its code did not reach (none for other runs)."""
    lineage = lineage_of(index.entries[:1])
    if lineage is None:
        return {}
    left = [e.seq for e in index.unconsumed() if e.kind == "agent" and (e.seq or 0) <= lineage.reused_through]
    return {UNREUSED_MEMBER: left}


def kept_meta(meta: RunMeta | None) -> dict[str, Any]:
    """The members of a run's meta every later segment keeps: its lineage (`parent_run_id`, `fork_at`, ...)."""
    if meta is None:
        return {}
    return {"parent_run_id": meta.parent_run_id, **(meta.model_extra or {})}
