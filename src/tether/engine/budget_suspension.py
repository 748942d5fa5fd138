"""The `budget` suspension: where a run under `on_exhausted="suspend"` parks when its USD ceiling stops work.

Instead of settling `exhausted`, the run journals one suspension naming what it needs (the ceiling, what it has
spent, the stop's `StopReason`, a suggested raise) and settles `suspended`. Only a raise closes it (a
`budget-raised` decision and, right after it, the resolution that names the new ceiling), so the next
segment, in any process, continues the stopped agents from their checkpoints (docs/budgets.md, *The suspend
mode*).
"""

from __future__ import annotations

import math
from typing import Any

from pydantic import BaseModel, ConfigDict

from tether.budget.accounts import Account
from tether.contracts.entries import JournalEntry
from tether.contracts.errors import InvalidResolutionError
from tether.contracts.stops import StopReason
from tether.journal.matching import JournalIndex

BUDGET = "budget"
"""The `suspension` member of a budget suspension's value (its entry is an `external` one, keyed `budget:N`)."""


class BudgetNeed(BaseModel):
    """What a run parked on a budget suspension needs: the figures an operator decides a raise from."""

    model_config = ConfigDict(frozen=True)

    key: str
    """The suspension's key (`budget:1`, `budget:2`, ... for each time the run parked)."""
    ceiling_usd: float
    """The USD ceiling that stopped work."""
    spent_usd: float
    """What the run counts against it (the cost report's `total_usd`: settled plus orphaned)."""
    reason: StopReason
    """Which ceiling stopped it (`usd-ceiling` or `output-floor`)."""
    suggested_usd: float
    """A ceiling to raise to: twice the old one, or what is spent plus twice the reserve that did not fit."""
    message: str = ""
    """The refusal, as the run would have settled `exhausted` with it."""
    agent_id: int | None = None
    """The agent the ceiling stopped (None: a spawn or an admission the ceiling refused)."""

    def entry_value(self) -> dict[str, Any]:
        return {"key": self.key, "suspension": BUDGET, **self.model_dump(mode="json", exclude={"key"})}


def is_budget_suspension(entry: JournalEntry) -> bool:
    return entry.kind == "external" and isinstance(entry.value, dict) and entry.value.get("suspension") == BUDGET


def budget_need(entry: JournalEntry) -> BudgetNeed | None:
    """What a budget suspension names (None for any other entry)."""
    if not is_budget_suspension(entry):
        return None
    return BudgetNeed.model_validate({k: v for k, v in entry.value.items() if k != "suspension"})


def open_budget_suspensions(index: JournalIndex) -> list[JournalEntry]:
    return [e for e in index.open_suspensions() if is_budget_suspension(e)]


def budget_closers(index: JournalIndex, new_usd: float, *, reason: str, by: str, at: float) -> list[JournalEntry]:
    """The resolutions a raise journals right after its `budget-raised` decision: one per open budget suspension."""
    return [JournalEntry(kind="resolution", ref=e.seq, scope=e.scope, key=e.key, started_at=at,
                         value={"raised_to": new_usd, "reason": reason, "by": by, "at": at})
            for e in open_budget_suspensions(index)]


def suggested_raise(ceiling: float, spent: float, needed: float | None) -> float:
    """Twice the ceiling, or what is spent plus twice the reserve that did not fit when that is more (rounded up
    to the hundredth of a cent)."""
    wanted = max(ceiling * 2, spent + 2 * (needed or 0.0))
    return math.ceil(wanted * 10_000 - 1e-6) / 10_000


def can_park(root: Account, tokens: Account, index: JournalIndex, money_reset_seq: int) -> bool:
    """Whether the run's own USD ceiling stopped work, so a raise can let it go on: not the tree's token
    ceiling, not a budget across runs (raising the run's ceiling frees neither), and not after an operator
    abandoned the budget suspension since the money last changed (the run then settles `exhausted`)."""
    if root.ceiling is None or not root.exhausted or tokens.exhausted:
        return False
    if StopReason.parse(root.stop_data.get("reason")) is StopReason.TENANT_BUDGET:
        return False
    return not any(is_budget_suspension(e) and (e.seq or 0) > money_reset_seq and (c := index.closer(e.seq or 0))
                   is not None and c.kind == "abandon" for e in index.suspensions())


def park_entry(root: Account, index: JournalIndex, spent_usd: float, message: str, at: float) -> JournalEntry:
    """The budget suspension a run parks on (its run account `root` stopped), naming what it needs."""
    assert root.ceiling is not None
    data = root.stop_data
    reason = StopReason.parse(data.get("reason")) or StopReason.USD_CEILING
    needed = data.get("reserve_usd")
    agent = data.get("agent_id")
    n = 1 + sum(1 for e in index.suspensions() if is_budget_suspension(e))
    need = BudgetNeed(
        key=f"{BUDGET}:{n}", ceiling_usd=root.ceiling, spent_usd=round(spent_usd, 10), reason=reason,
        suggested_usd=suggested_raise(root.ceiling, spent_usd, needed if isinstance(needed, int | float) else None),
        message=message, agent_id=agent if isinstance(agent, int) else None,
    )
    return JournalEntry(kind="external", status="suspended", label=BUDGET, started_at=at, value=need.entry_value())


def raise_of(value: Any, need: BudgetNeed, run_id: str) -> tuple[float, str]:
    """The raise a resolution of a budget suspension asks for: the new ceiling in USD (a number, or
    `{"usd": X, "reason": "..."}`), above the one that stopped the run; else `InvalidResolutionError`."""
    usd, reason = (value.get("usd"), value.get("reason")) if isinstance(value, dict) else (value, "")
    if isinstance(usd, str):
        try:
            usd = float(usd)
        except ValueError:
            usd = None
    if isinstance(usd, bool) or not isinstance(usd, int | float) or not usd > need.ceiling_usd:
        raise InvalidResolutionError(
            f"invalid value for {need.key!r} of run {run_id!r}: a budget suspension is resolved by raising the "
            f"run's USD ceiling, so its value is the new ceiling in USD, above {need.ceiling_usd:g} (e.g. "
            f"{need.suggested_usd:g}), got {value!r}. Nothing was journaled; the suspension stays open.",
            run_id=run_id, key=need.key, ceiling_usd=need.ceiling_usd, suggested_usd=need.suggested_usd,
            issues=[{"loc": [], "msg": f"must be a USD amount above {need.ceiling_usd:g}", "type": "greater_than"}],
        )
    return float(usd), str(reason or "")
