"""Run diffs: two runs' agent calls side by side (a fork beside its source): outputs, models and cost.

Calls pair by label and occurrence (the 2nd `critic` of one run with the 2nd of the other); unlabelled
calls pair by their position among the unlabelled ones. A call of the second run that is a copy of the
first's (a fork's reused entry) is marked `reused`: it cost the second run nothing.
"""

from __future__ import annotations

from collections.abc import Sequence, Set
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from tether.contracts.entries import JournalEntry
from tether.journal.cost import fold_cost
from tether.journal.lineage import UNREUSED_MEMBER, lineage_of


class CallSide(BaseModel):
    """One run's side of a paired agent call."""

    model_config = ConfigDict(frozen=True)

    seq: int
    status: str | None = None
    model: str | None = None
    usd: float = 0.0
    output: Any = None


class CallDiff(BaseModel):
    """An agent call in either run, with each side (None where the run has no such call)."""

    model_config = ConfigDict(frozen=True)

    label: str
    a: CallSide | None = None
    b: CallSide | None = None
    reused: bool = False
    """The second run's side is a copy of the first's (it was not paid for again)."""

    @property
    def same_output(self) -> bool:
        return self.a is not None and self.b is not None and self.a.output == self.b.output


class RunDiff(BaseModel):
    """Two runs' agent calls side by side, and what each spent."""

    model_config = ConfigDict(frozen=True)

    run_a: str
    run_b: str
    calls: list[CallDiff] = Field(default_factory=list)
    a_usd: float = 0.0
    b_usd: float = 0.0
    """The second run's own spend (a fork's reused calls are in `b_reused_usd`)."""
    b_reused_usd: float = 0.0


def _calls(entries: Sequence[JournalEntry], dead: Set[int] = frozenset()) -> dict[str, CallSide]:
    """Every settled agent call by its pairing name (`label#n`), in journal order (but the `dead` ones: a fork's
    copies its code did not reach)."""
    out: dict[str, CallSide] = {}
    seen: dict[str, int] = {}
    running = {e.seq: e for e in entries if e.kind == "agent" and e.ref is None}
    for e in entries:
        if e.kind != "agent" or e.ref is None or e.ref not in running or e.ref in dead:
            continue
        label = running[e.ref].label or "(unlabelled)"
        n = seen[label] = seen.get(label, 0) + 1
        output = e.value.get("output") if isinstance(e.value, dict) else None
        out[f"{label}#{n}"] = CallSide(seq=e.ref, status=e.status, model=e.served_by, usd=float(e.cost_usd or 0.0),
                                       output=output)
    return out


def diff_runs(run_a: str, a: Sequence[JournalEntry], run_b: str, b: Sequence[JournalEntry]) -> RunDiff:
    """The agent calls of run `a` and run `b` paired, with their outputs and costs."""
    lineage = lineage_of(b[:1])
    copied_through = lineage.reused_through if lineage is not None and lineage.forked_from == run_a else 0
    unreused = _unreused(b)
    left, right = _calls(a), _calls(b, unreused)
    names = list(left) + [n for n in right if n not in left]
    calls = []
    for name in names:
        side = right.get(name)
        reused = side is not None and side.seq <= copied_through and side.seq not in unreused
        calls.append(CallDiff(label=name.rpartition("#")[0] if name.endswith("#1") else name, a=left.get(name),
                              b=side, reused=reused))
    cost_a, cost_b = fold_cost(a), fold_cost(b)
    return RunDiff(run_a=run_a, run_b=run_b, calls=calls, a_usd=cost_a.total_usd, b_usd=cost_b.total_usd,
                   b_reused_usd=cost_b.reused_usd)


def _unreused(entries: Sequence[JournalEntry]) -> set[int]:
    for e in reversed(entries):
        if e.kind == "decision" and isinstance(e.value, dict) and e.value.get("decision") == "settle":
            return {int(s) for s in e.value.get(UNREUSED_MEMBER) or ()}
    return set()
