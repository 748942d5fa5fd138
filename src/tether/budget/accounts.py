"""USD accounts: a run account with an optional ceiling, child sub-accounts, and held reserves.

Two kinds of hold sit on an account chain: an invocation's admission reserve, and (under the hard
ceiling, `overshoot="hard"`) the priced worst case of its dispatches in flight, the *exposure*. The
exposure is the part of `held` that is released when a dispatch settles; a dispatch that cannot fit
beside its siblings' exposure waits for one of those releases (`Account.released`).
"""

from __future__ import annotations

import asyncio
from typing import Any

from tether.contracts.money import usd
from tether.contracts.signal import Signal
from tether.contracts.stops import StopReason

DEFAULT_CHILD_FRACTION = 0.3
EPSILON = 1e-12


class Hold:
    """USD held on an account chain until released; spend consumes it first.

    `exposure=True` marks a dispatch's worst case in flight (counted in `Account.exposed` as well).
    """

    __slots__ = ("account", "amount", "exposure", "left")

    def __init__(self, account: Account, amount: float, *, exposure: bool = False) -> None:
        self.account = account
        self.exposure = exposure
        self.amount = 0.0
        self.left = 0.0
        self.grow(amount)

    def grow(self, amount: float) -> None:
        """Hold `amount` more."""
        if amount <= 0:
            return
        self.amount += amount
        self.left += amount
        for acct in self.account.chain():
            acct.held += amount
            if self.exposure:
                acct.exposed += amount

    def consume(self, usd: float) -> float:
        """Take up to `usd` of spend out of the hold; returns what it took."""
        take = min(self.left, max(0.0, usd))
        self.left -= take
        for acct in self.account.chain():
            acct.held -= take
            if self.exposure:
                acct.exposed -= take
        return take

    def release(self) -> None:
        """Drop what is left; waiters for room are woken."""
        if self.left > 0:
            self.consume(self.left)
            self.account.root().notify_released()


class Account:
    """Spend against a ceiling fixed for the segment; every debit propagates to every ancestor."""

    def __init__(
        self, ceiling: float | None, parent: Account | None = None, *, name: str = "run",
        stop_reason: StopReason = StopReason.USD_CEILING,
    ) -> None:
        self.ceiling = ceiling
        self.stop_reason = stop_reason
        """What this account's ceiling stands for when it stops work (USD, or the tree's tokens)."""
        self.parent = parent
        self._above: tuple[Account, ...] = parent.chain() if parent is not None else ()  # (no cycle to itself)
        self.name = name
        self.spent = 0.0
        self.orphaned = 0.0
        """The part of `spent` that is calls a crash cut off, charged at their worst case (restored at start)."""
        self.held = 0.0
        self.exposed = 0.0
        """The part of `held` that is dispatches' worst cases in flight (hard ceiling only)."""
        self.signal: Signal = Signal() if parent is None else Signal.any(parent.signal)
        self.stopped: str | None = None
        """Why this account's ceiling stopped work (a refusal, a cut, a halt); None while it has not."""
        self.stop_data: dict[str, Any] = {}
        """The figures of the first stop (the agent, the reserve that did not fit, what was left)."""
        self._released: asyncio.Event | None = None

    def chain(self) -> tuple[Account, ...]:
        """This account and its ancestors, innermost first (fixed at construction: a parent never changes)."""
        return (self, *self._above)

    def root(self) -> Account:
        acct = self
        while acct.parent is not None:
            acct = acct.parent
        return acct

    def capped(self) -> list[Account]:
        return [a for a in self.chain() if a.ceiling is not None]

    def debit(self, amount: float) -> None:
        """Record spend on the whole chain; an account reaching its ceiling fires its signal (layer 3)."""
        for acct in self.chain():
            acct.spent += amount
            if acct.at_ceiling():
                acct.signal.abort(f"ceiling reached: {acct.name!r} at {usd(acct.spent)} of {usd(acct.ceiling)}",
                                  acct.stop_reason)

    def at_ceiling(self) -> bool:
        return self.ceiling is not None and self.spent >= self.ceiling - EPSILON

    def stop(self, why: str, **data: Any) -> None:
        """Record that this account's own ceiling stopped work (the first reason and its figures are kept)."""
        if self.stopped is None:
            self.stopped = why
            self.stop_data = {"account": self.name, **{k: v for k, v in data.items() if v is not None}}

    def reached(self) -> bool:
        """Whether spend has reached the ceiling. A zero ceiling nothing was charged against (a run of free
        models under `budget_usd=0`) is not reached: it stopped nothing, and refusing a paid call sets `stopped`."""
        return self.at_ceiling() and self.spent > EPSILON

    @property
    def exhausted(self) -> bool:
        """True once this account's ceiling stopped work or was reached: the scope settles `exhausted`."""
        return self.stopped is not None or self.reached()

    def binding(self) -> Account | None:
        """The capped account on the chain with the least room: the ceiling that limits this one."""
        capped = self.capped()
        if not capped:
            return None
        return min(capped, key=lambda a: (a.ceiling or 0.0) - a.spent - a.held)

    def restore(self, usd: float, orphaned: float = 0.0) -> None:
        """Spend folded from the journal at segment start (this account only); `orphaned` is part of `usd`."""
        self.spent += usd
        self.orphaned += orphaned

    def spent_phrase(self, run_id: str) -> str:
        """`spent 0.1650 USD` with its settled and orphaned parts when a crash cut calls off."""
        if self.orphaned <= EPSILON:
            return f"spent {usd(self.spent)}"
        return (f"spent {usd(self.spent)} ({usd(self.spent - self.orphaned)} settled + {usd(self.orphaned)} orphaned: "
                f"calls a crash cut off, at their worst case; `tether settle-orphans {run_id} --usd X` replaces "
                f"that with the provider's figure)")

    def hold(self, amount: float) -> Hold:
        return Hold(self, amount)

    def room(self, own: float = 0.0, *, in_flight: bool = True) -> float | None:
        """Headroom of the tightest capped account, net of what others hold, plus `own` (the caller's share).

        `in_flight=False` leaves out the exposure of dispatches in flight: the room once they settle.
        """
        rooms = [a.ceiling - a.spent - a.held + (0.0 if in_flight else a.exposed)
                 for a in self.capped() if a.ceiling is not None]
        return max(0.0, min(rooms) + own) if rooms else None

    def remaining(self) -> float | None:
        """Headroom of the tightest capped account on the chain, net of held reserves."""
        return self.room()

    def child(self, fraction: float | None, *, name: str, ceiling: float | None = None) -> Account:
        """A sub-account: `fraction` (default 0.3) of this chain's remainder, or a journaled ceiling."""
        if ceiling is None:
            room = self.remaining()
            if room is not None:
                ceiling = room * (DEFAULT_CHILD_FRACTION if fraction is None else fraction)
        return Account(ceiling, self, name=name)

    # -- waiting for room ------------------------------------------------------------------------
    def notify_released(self) -> None:
        """Wake every dispatch waiting for room (called on the root when exposure is released)."""
        if self._released is not None:
            self._released.set()
            self._released = None

    def released(self) -> asyncio.Event:
        """An event set at the next release of held room anywhere under this (root) account."""
        if self._released is None:
            self._released = asyncio.Event()
        return self._released
