"""Budgets across runs as data, and the store seam that holds their reservations (the ledger protocol).

`tether.Budget` bounds what every run carrying its scope spends together per window; a store that is a
`BudgetLedger` (PostgreSQL) holds the reservations. The gate that reserves and settles is `tether.budget.tenant`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal, Protocol, get_args, runtime_checkable

from tether.contracts.entries import Lease
from tether.contracts.errors import ConfigError
from tether.contracts.money import usd

Window = Literal["day", "hour"]
WINDOWS: tuple[Window, ...] = get_args(Window)
_WINDOW_S = {"day": 86_400.0, "hour": 3_600.0}


@dataclass(frozen=True, slots=True)
class Budget:
    """USD that every run carrying `scope` may spend together per `window` (UTC day or hour; None: ever)."""

    usd: float
    window: Window | None = None
    scope: str = "default"

    def __post_init__(self) -> None:
        if isinstance(self.usd, bool) or not isinstance(self.usd, int | float) or not math.isfinite(self.usd) \
                or self.usd < 0:
            raise ConfigError(f"Budget.usd must be a USD amount >= 0, got {self.usd!r}")
        if self.window is not None and self.window not in WINDOWS:
            raise ConfigError(f"Budget.window must be 'day', 'hour' or None, got {self.window!r}")
        if not isinstance(self.scope, str) or not self.scope.strip() or len(self.scope) > 200:
            raise ConfigError(f"Budget.scope must be a non-empty name of at most 200 characters, got {self.scope!r}")

    def window_start(self, now: float) -> float:
        """The start of the window `now` falls in (0 for a budget without a window)."""
        span = _WINDOW_S.get(self.window or "")
        return 0.0 if span is None else math.floor(now / span) * span

    def describe(self) -> str:
        per = f" per {self.window} (UTC)" if self.window else ""
        return f"{usd(self.usd)} USD{per} for scope {self.scope!r}"

    def to_json(self) -> dict[str, Any]:
        return {"usd": float(self.usd), "window": self.window, "scope": self.scope}

    @classmethod
    def from_json(cls, value: Any) -> Budget:
        if not isinstance(value, dict):
            raise ConfigError(f"a stored budget must be an object with usd, window and scope, got {value!r}")
        return cls(usd=value.get("usd"), window=value.get("window"), scope=value.get("scope"))  # type: ignore[arg-type]


def window_iso(start: float) -> str:
    return datetime.fromtimestamp(start, UTC).strftime("%Y-%m-%dT%H:%MZ")


@dataclass(frozen=True, slots=True)
class ReserveAnswer:
    """What the ledger said to one reservation: `ok` (held, `ids`), `wait` (others' holds are in the way)
    or `refused` (even with nothing held the window cannot cover it), with the scope's figures."""

    outcome: Literal["ok", "wait", "refused"]
    ids: tuple[int, ...] = ()
    scope: str | None = None
    window_start: float = 0.0
    charged_usd: float = 0.0
    held_usd: float = 0.0
    limit_usd: float = 0.0


@dataclass(frozen=True, slots=True)
class ScopeUsage:
    """One scope's window as the ledger holds it: what was charged and what reservations hold now."""

    scope: str
    window_start: float
    charged_usd: float
    held_usd: float


@runtime_checkable
class BudgetLedger(Protocol):
    """A store that holds reservations against budgets across runs (PostgreSQL)."""

    async def budget_reserve(self, run_id: str, lease: Lease | None, budgets: Sequence[Budget], usd: float,
                             what: str) -> ReserveAnswer:
        """Hold `usd` on every budget's current window (all or none), judged by the store's clock."""

    async def budget_settle(self, charges: Sequence[tuple[int, float]]) -> None:
        """Charge each reservation id what its call cost (also after the store reclaimed it), in one write."""

    async def budget_usage(self, scope: str | None = None) -> list[ScopeUsage]:
        """Every window of `scope` (or of every scope), newest first."""
