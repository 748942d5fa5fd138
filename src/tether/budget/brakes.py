"""The spend-rate brake: a run whose spend over the last minute passes `max_spend_rate_usd_per_min` stops.

Fed by every live debit of the run (the figures its cost report folds), judged before each turn on the run's
clock (so tests control time). Once it trips it stays tripped for the segment: every agent's next turn stops
with the same evidence. docs/budgets.md, *Runaway brakes*.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any

from tether.contracts.errors import BudgetExhaustedError
from tether.contracts.money import usd
from tether.contracts.stops import StopReason

WINDOW_S = 60.0


class SpendRate:
    """The run's debits of the last `window_s` seconds, and whether their sum passed the limit."""

    __slots__ = ("_debits", "_sum", "clock", "limit", "tripped", "window_s")

    def __init__(self, limit_usd_per_min: float, clock: Callable[[], float], window_s: float = WINDOW_S) -> None:
        self.limit, self.clock, self.window_s = limit_usd_per_min, clock, window_s
        self._debits: deque[tuple[float, float]] = deque()
        self._sum = 0.0
        self.tripped: dict[str, Any] | None = None

    def add(self, usd_drawn: float) -> None:
        """One live debit of the run, at the clock's now."""
        self._debits.append((self.clock(), usd_drawn))
        self._sum += usd_drawn

    def check(self) -> None:
        """Before a turn: `BudgetExhaustedError` (`StopReason.SPEND_RATE`, the measured rate in `evidence`) once
        the last minute's spend is over the limit."""
        if self.tripped is None:
            now = self.clock()
            while self._debits and self._debits[0][0] <= now - self.window_s:
                self._sum -= self._debits.popleft()[1]
            rate = self._sum * 60.0 / self.window_s
            if rate <= self.limit:
                return
            self.tripped = {"usd_per_min": round(rate, 10), "limit_usd_per_min": self.limit,
                            "window_s": self.window_s, "debits": len(self._debits), "at": now}
        t = self.tripped
        raise BudgetExhaustedError(
            f"runaway brake: the run spent {usd(t['usd_per_min'])} USD in the last minute, over its "
            f"max_spend_rate_usd_per_min of {usd(t['limit_usd_per_min'])}; its agents stop before their next turn. "
            f"Look for a loop, or raise max_spend_rate_usd_per_min= for a run that is meant to spend this fast.",
            kind="budget", reason=StopReason.SPEND_RATE, evidence=dict(t),
        )
