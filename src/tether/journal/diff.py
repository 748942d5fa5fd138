"""Run diffs: two runs' agent calls side by side (a fork beside its source): outputs, models and cost.

Calls pair by label and occurrence (the 2nd `critic` of one run with the 2nd of the other); unlabelled
calls pair by their position among the unlabelled ones. A call of the second run that is a copy of the
first's (a fork's reused entry) is marked `reused`: it cost the second run nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from tether.contracts.entries import JournalEntry
from tether.journal.cost import SpendFold, cost_report, fold_spend


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
    """The second run's side is a copy it reused from its source (a fork): it did not pay for it; its `usd` is
    what the source paid."""

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
    """The first run's cost report `total_usd` (its rows sum to it)."""
    b_usd: float = 0.0
    """The second run's own spend, its `total_usd` (a fork's reused calls are in `b_reused_usd`)."""
    b_reused_usd: float = 0.0
    """The second run's `reused_usd`: what the first paid for the calls it reused (its reused rows sum to it)."""


def _calls(folded: SpendFold) -> dict[str, CallSide]:
    """Every agent call by its pairing name (`label#n`), in the order they started, each with the cost report's
    figure for it (spent + orphaned; a fork's reused copy: what the source paid), a fork's copies its code did
    not reach left out."""
    out: dict[str, CallSide] = {}
    seen: dict[str, int] = {}
    for spend in folded.agents:
        if folded.copied(spend) and not folded.reused(spend):
            continue
        run, end = spend.running, spend.terminal
        label = run.label or "(unlabelled)"
        n = seen[label] = seen.get(label, 0) + 1
        output = end.value.get("output") if end is not None and isinstance(end.value, dict) else None
        usd = spend.spent_usd if folded.copied(spend) else spend.usd
        out[f"{label}#{n}"] = CallSide(seq=run.seq or 0, status=end.status if end is not None else "running",
                                       model=end.served_by if end is not None else None, usd=round(usd, 10),
                                       output=output)
    return out


def diff_runs(run_a: str, a: Sequence[JournalEntry], run_b: str, b: Sequence[JournalEntry]) -> RunDiff:
    """The agent calls of run `a` and run `b` paired, with their outputs and costs: the rows of each run sum to
    its cost report's total (the second's reused rows to its `reused_usd`)."""
    fold_a, fold_b = fold_spend(a), fold_spend(b)
    left, right = _calls(fold_a), _calls(fold_b)
    reused_seqs = {s.running.seq for s in fold_b.agents if fold_b.reused(s)}
    names = list(left) + [n for n in right if n not in left]
    calls = []
    for name in names:
        side = right.get(name)
        reused = side is not None and side.seq in reused_seqs
        calls.append(CallDiff(label=name.rpartition("#")[0] if name.endswith("#1") else name, a=left.get(name),
                              b=side, reused=reused))
    cost_a, cost_b = cost_report(fold_a), cost_report(fold_b)
    return RunDiff(run_a=run_a, run_b=run_b, calls=calls, a_usd=cost_a.total_usd, b_usd=cost_b.total_usd,
                   b_reused_usd=cost_b.reused_usd)
