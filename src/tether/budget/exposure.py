"""The in-flight exposure cap: holds per dispatch attempt so concurrent turns cannot jointly overshoot."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from tether.budget.accounts import EPSILON, Account
from tether.contracts.errors import BudgetExhaustedError
from tether.contracts.money import usd
from tether.contracts.protocols import ExposureWait
from tether.contracts.signal import Signal
from tether.contracts.stops import StopReason


class ExposureHold:
    """One attempt's priced estimate; the call's live spend consumes it, release drops the rest."""

    def __init__(self, gate: ExposureGate, amount: float) -> None:
        self.gate = gate
        self.left = amount

    def consume(self, usd: float) -> None:
        self.left = max(0.0, self.left - usd)

    def release(self) -> None:
        self.gate.release(self)


class ExposureGate:
    """Refuses an attempt when `spent + live holds + its estimate` would pass the cap (run-wide)."""

    def __init__(self, cap: float, account: Account) -> None:
        self.cap = cap
        self.account = account
        self.live: list[ExposureHold] = []
        self._changed = asyncio.Event()

    def live_usd(self) -> float:
        return sum(h.left for h in self.live)

    def room(self) -> float:
        return max(0.0, self.cap - self.account.spent - self.live_usd())

    def admit(self, estimate: float) -> ExposureHold:
        if self.account.spent + self.live_usd() + estimate > self.cap + EPSILON:
            raise BudgetExhaustedError(
                f"in-flight exposure cap: spent {usd(self.account.spent)} + in flight {usd(self.live_usd())} + "
                f"this turn {usd(estimate)} USD would pass max_in_flight_exposure_usd={usd(self.cap)}",
                reason=StopReason.EXPOSURE_CAP, spent=self.account.spent, live=self.live_usd(), estimate=estimate,
                cap=self.cap,
            )
        hold = ExposureHold(self, estimate)
        self.live.append(hold)
        return hold

    def release(self, hold: ExposureHold) -> None:
        if hold in self.live:
            self.live.remove(hold)
            self._changed.set()
            self._changed = asyncio.Event()

    async def await_release(self, signal: Signal | None = None) -> ExposureWait:
        """`released` on the next release, `drained` at once when nothing is in flight, `aborted` on signal."""
        if not self.live:
            return "drained"
        waiter = asyncio.ensure_future(self._changed.wait())
        stopper = asyncio.ensure_future(signal.wait()) if signal is not None else None
        try:
            pending = {waiter} | ({stopper} if stopper else set())
            done, _ = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for t in (waiter, stopper):
                if t is not None:
                    t.cancel()
        return "released" if waiter in done else "aborted"


ReleaseFn = Callable[[], None]
