"""Budgets across runs: one segment's gate (reserve before a call leaves, settle after it is drawn).

A `Budget(usd=5.0, window="day", scope="tenant:acme")` attached to runs bounds what every run carrying
that scope spends, together, in each window, across every worker sharing the store. Each provider call
reserves its priced worst case (the figure its dispatch record journals) in the store before it leaves,
and settles to what it cost once its turn is drawn; a reservation whose run's lease died is charged at
its worst case by the store. `Budget` and the ledger protocol a store implements are contracts
(`tether.contracts.budgets`). docs/budgets.md ("Budgets across runs") has the long form.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from tether.contracts.budgets import Budget as Budget
from tether.contracts.budgets import BudgetLedger as BudgetLedger
from tether.contracts.budgets import ReserveAnswer, window_iso
from tether.contracts.entries import Lease
from tether.contracts.errors import BudgetExhaustedError, ConfigError
from tether.contracts.money import usd
from tether.contracts.stops import StopReason

_WAIT_S = (0.05, 0.5)  # a reservation that must wait for others to settle polls from 50 ms up to 0.5 s


def check_budgets(value: Any) -> tuple[Budget, ...] | None:
    """`budgets=` as a tuple of `Budget`s (None: none); one budget per scope and window."""
    if value is None:
        return None
    if isinstance(value, Budget) or not isinstance(value, Iterable) or isinstance(value, str | bytes | dict):
        raise ConfigError(f"budgets must be a list of tether.Budget, got {type(value).__name__}")
    out = tuple(value)
    for b in out:
        if not isinstance(b, Budget):
            raise ConfigError(f"budgets must be a list of tether.Budget, got an item of type {type(b).__name__}")
    keys = [(b.scope, b.window) for b in out]
    if len(set(keys)) != len(keys):
        raise ConfigError("budgets names the same scope and window twice; give each (scope, window) one Budget")
    return out or None


def require_ledger(store: object, budgets: Sequence[Budget] | None) -> None:
    """`ConfigError` before anything is written when a run carries budgets its store cannot hold."""
    if budgets and not isinstance(store, BudgetLedger):
        raise ConfigError(
            f"budgets= (across runs) need a store every run and worker shares, and {type(store).__name__} holds "
            f"none; use a PostgreSQL store (store='postgresql://user@host:5432/db'), or bound this run alone "
            f"with budget_usd=.",
            store=type(store).__name__,
        )


@dataclass(slots=True)
class Grant:
    """One call's reservation: the ledger's ids, the worst case held, and what the call has spent so far."""

    ids: tuple[int, ...]
    worst_usd: float
    spent_usd: float = 0.0


@dataclass
class TenantGate:
    """One segment's side of its budgets across runs: reserve before a call leaves, settle after it is drawn."""

    ledger: BudgetLedger
    budgets: tuple[Budget, ...]
    run_id: str
    lease: Lease | None
    on_refused: Callable[[str, dict[str, Any]], None]
    """Records the refusal on the run's account, so the run settles `exhausted` saying why."""
    wait_s: float = 120.0
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep

    async def reserve(self, worst_usd: float, what: str) -> Grant:
        """Hold `worst_usd` on every budget, waiting (up to `wait_s`) while other calls' holds are in the way;
        `BudgetExhaustedError` when the window cannot cover it."""
        began, pause = time.monotonic(), _WAIT_S[0]
        while True:
            answer = await self.ledger.budget_reserve(self.run_id, self.lease, self.budgets, worst_usd, what)
            if answer.outcome == "ok":
                return Grant(ids=answer.ids, worst_usd=worst_usd)
            waited = time.monotonic() - began
            if answer.outcome == "refused" or waited + pause > self.wait_s:
                raise self._refusal(answer, worst_usd, what, waited)
            await self.sleep(pause)
            pause = min(pause * 2, _WAIT_S[1])

    def _refusal(self, answer: ReserveAnswer, worst: float, what: str, waited: float) -> BudgetExhaustedError:
        budget = next((b for b in self.budgets if b.scope == answer.scope), None)
        window = f" in its {budget.window} window from {window_iso(answer.window_start)}" if budget and \
            budget.window else ""
        left = max(0.0, answer.limit_usd - answer.charged_usd)
        why = (f"other runs' calls in flight hold {usd(answer.held_usd)} and none settled within {waited:.0f} s"
               if answer.outcome == "wait" else "it cannot fit until the window rolls over" if window else
               "it never will: the scope has no window")
        message = (
            f"budget exhausted: scope {answer.scope!r} has charged {usd(answer.charged_usd)} of "
            f"{usd(answer.limit_usd)} USD{window} across its runs; {what} of run {self.run_id!r} needs up to "
            f"{usd(worst)} (its worst case) and {usd(left)} is left, so it was refused ({why}). Raise the scope's "
            f"Budget(usd=...) for new runs, wait for the next window, or lower max_output_tokens= for cheaper calls."
        )
        data = {"scope": answer.scope, "charged": answer.charged_usd, "held": answer.held_usd,
                "limit": answer.limit_usd, "reserve": worst, "remaining": left, "what": what}
        self.on_refused(message, {**data, "reason": StopReason.TENANT_BUDGET})  # the run settles on this reason
        return BudgetExhaustedError(message, run_id=self.run_id, account=answer.scope,
                                    reason=StopReason.TENANT_BUDGET, **data)

    async def settle(self, grants: Sequence[Grant]) -> None:
        """Charge each call what it cost (its turn is drawn, or its invocation ended): one store write."""
        charges = [(i, g.spent_usd) for g in grants for i in g.ids]
        if charges:
            await self.ledger.budget_settle(charges)
