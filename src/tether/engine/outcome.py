"""`RunOutcome`: how a run (or a resume of it) ended, with what it cost and what it lost."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from pydantic_core import to_jsonable_python

from tether.contracts.entries import RunStatus
from tether.contracts.errors import BudgetExhaustedError
from tether.contracts.stops import StopReason
from tether.contracts.usage import Usage
from tether.journal.cost import CostReport


def error_dict(error: BaseException | dict[str, Any] | None) -> dict[str, Any] | None:
    """The JSON form of an error as the journal keeps it (type, message, and a TetherError's code)."""
    if error is None or isinstance(error, dict):
        return error
    out: dict[str, Any] = {"type": type(error).__name__, "message": str(error)}
    code = getattr(error, "code", None)
    if isinstance(code, str):
        out["code"] = code
    return out


def settled_error(error: BaseException | dict[str, Any] | None) -> dict[str, Any] | None:
    """The error as the settle decision keeps it: a refusal keeps its figures and typed reason (`data`), so
    a reader of the settle (`engine.wait`) gets the same `BudgetExhaustedError` the run reported."""
    out = error_dict(error)
    if isinstance(error, BudgetExhaustedError) and out is not None:
        out["data"] = to_jsonable_python(error.data, fallback=str)
    return out


def outcome_error(settled: Any) -> Any:
    """A settle's journaled error as the outcome reports it: a refusal typed again (read by its stable `code`),
    anything else as the journal keeps it."""
    if not isinstance(settled, dict) or settled.get("code") != BudgetExhaustedError.code:
        return settled
    data = dict(settled.get("data") or {})
    reason = StopReason.parse(data.get("reason"))
    if reason is not None:
        data["reason"] = reason
    return BudgetExhaustedError(str(settled.get("message") or "budget exhausted"), **data)


class ReplayStats(BaseModel):
    """What a segment did with the journal it found."""

    hits: int = 0
    misses: int = 0
    reruns: int = 0
    skipped: int = 0
    orphaned: list[str] = Field(default_factory=list)


class DroppedBranch(BaseModel):
    """A branch whose result was lost (an agent with `on_error="none"`, a settled parallel branch)."""

    model_config = ConfigDict(frozen=True)

    scope: str
    seq: int | None = None
    error: dict[str, Any] | None = None


class RunOutcome(BaseModel):
    """The typed end of a run. Exhaustion and suspension are outcomes, never a bare None."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    run_id: str
    status: RunStatus
    value: Any = None
    error: Any = None
    cost: CostReport = Field(default_factory=CostReport)
    usage: Usage = Usage()
    dropped: list[DroppedBranch] = Field(default_factory=list)
    pending: list[str] = Field(default_factory=list)
    replay: ReplayStats = Field(default_factory=ReplayStats)
    warnings: list[str] = Field(default_factory=list)
    """What the run wants you to know but did not stop for (e.g. an unpriced model under allow_unpriced)."""

    @property
    def ok(self) -> bool:
        return self.status == "ok"
