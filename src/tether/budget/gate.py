"""The gate: which turns an invocation may start, how much output each may ask for, and the worst cases it holds.

Under the hard ceiling (`hard=True`) every attempt holds its priced worst case (input estimate plus the output
limit it puts on the wire) on the account chain from the moment it is admitted until a journaled draw or the
terminal settles it, so `spent + the worst case of every attempt in flight` never passes a ceiling. The
invocation's admission reserve covers that first; the rest (`exposure`) comes from the unreserved remainder. An
attempt that does not fit beside its siblings' exposure waits for a release (`await_release`) instead of being
admitted past the ceiling or shortened. A failed attempt is settled (its draw journaled, even of nothing) before
its retry is sized, so the retry plans with what is then free.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Literal

from tether.budget.accounts import EPSILON, Account, Hold
from tether.budget.exposure import ExposureGate, ExposureHold
from tether.budget.pricebook import PriceBook
from tether.contracts.errors import BudgetExhaustedError
from tether.contracts.money import usd
from tether.contracts.prices import Price
from tether.contracts.protocols import ExposureWait
from tether.contracts.signal import Signal
from tether.contracts.stops import StopReason
from tether.contracts.usage import Usage
from tether.pricing import cost_usd

DISPATCH_WAIT_S = 120.0
"""How long a dispatch waits under the hard ceiling for its siblings' in-flight worst cases to settle."""


class HoldGate:
    """One invocation's gate on its account chain (and the tree's tokens, and the in-flight exposure cap)."""

    __slots__ = ("_in_flight", "_unsettled", "_waiting", "_worst", "account", "binding", "book", "exposure", "hard",
                 "hold", "run_id", "signal", "token_hold", "tokens", "wait_s")

    def __init__(
        self, account: Account, book: PriceBook, *, hold: Hold | None = None, exposure: ExposureGate | None = None,
        tokens: Account | None = None, token_hold: Hold | None = None, hard: bool = False,
        wait_s: float = DISPATCH_WAIT_S, run_id: str = "",
    ) -> None:
        self.account = account
        self.book = book
        self.hold = hold
        """The invocation's admission reserve."""
        self.exposure = exposure
        self.tokens = tokens
        self.token_hold = token_hold
        self.hard = hard
        self.wait_s = wait_s
        self.run_id = run_id
        self.signal: Signal | None = account.signal if tokens is None else Signal.any(account.signal, tokens.signal)
        self.binding: Account | None = None
        """The ceiling that bounded the last output clamp (the account, or the tree's tokens)."""
        self._worst: Hold | None = None
        """The worst case of its attempts in flight beyond what its admission reserve covers (hard ceiling)."""
        self._unsettled = 0.0
        """What this invocation's attempts not yet settled by a journaled draw may still cost at worst."""
        self._waiting: str | None = None
        """What the last refused attempt waits for: `in-flight` (hard ceiling) or `exposure` (the cap)."""
        self._in_flight: ExposureHold | None = None

    # -- before a turn ---------------------------------------------------------------------------------
    def before_turn(self) -> None:
        """Refuse a turn once the tree's tokens or a USD ceiling on the chain is reached."""
        if self.tokens is not None and (self.tokens.at_ceiling() or self.tokens.signal.aborted):
            self.tokens.stop("turn refused: tree token ceiling reached")
            raise BudgetExhaustedError(
                f"tree token ceiling reached: {int(self.tokens.spent)} of {int(self.tokens.ceiling or 0)} tokens "
                f"drawn; no further turn is admitted anywhere in the tree.",
                tokens=self.tokens.spent, ceiling=self.tokens.ceiling, reason=StopReason.TOKEN_CEILING,
            )
        for acct in () if self.book.free else self.account.capped():
            if acct.at_ceiling():
                acct.stop("turn refused: ceiling reached", remaining_usd=0.0)
                raise BudgetExhaustedError(
                    f"budget exhausted: account {acct.name!r} has {acct.spent_phrase(self.run_id or 'RUN')} of "
                    f"{usd(acct.ceiling)} USD; no further turn is admitted.",
                    account=acct.name, spent=acct.spent, orphaned=acct.orphaned, ceiling=acct.ceiling,
                    remaining=0.0, reason=StopReason.USD_CEILING,
                )

    # -- the output clamp ------------------------------------------------------------------------------
    def remaining_usd(self) -> float | None:
        """The chain's headroom for this invocation: net of other invocations' reserves and of what its own
        unsettled attempts may still cost (as if every other attempt in flight settled)."""
        return self.account.room(self._own(in_flight=False), in_flight=False)

    def max_affordable_output_tokens(self, served_by: str, est_input: int) -> int | None:
        by_money = self.book.affordable_output(served_by, est_input, self.remaining_usd())
        est_input = self.book.calibration.scale(served_by, est_input)
        token_room = self.tokens.room(self.token_hold.left if self.token_hold else 0.0) if self.tokens else None
        by_tokens = None if token_room is None else max(0, int(token_room) - est_input)
        if by_tokens is not None and (by_money is None or by_tokens < by_money):
            self.binding = self.tokens
            return by_tokens
        self.binding = self.account.binding() if by_money is not None else None
        return by_money

    def limited_by(self) -> Literal["usd", "tokens"] | None:
        """The ceiling that set the last output limit: the tree's tokens or a USD account (None: neither)."""
        if self.binding is None:
            return None
        return "tokens" if self.binding is self.tokens else "usd"

    def max_exposure_output_tokens(self, served_by: str, est_input: int) -> int | None:
        if self.exposure is None:
            return None
        return self.book.affordable_output(served_by, est_input, self.exposure.room())

    # -- admitting an attempt --------------------------------------------------------------------------
    def admit(self, served_by: str, est_input: int, planned_output: int) -> Callable[[], None] | None:
        """Hold this attempt's estimate under the in-flight exposure cap, and (hard ceiling) its worst case on
        the account chain; `BudgetExhaustedError` when either does not fit (nothing is held then)."""
        worst = self._hard_worst(served_by, est_input, planned_output)
        release: Callable[[], None] | None = None
        if self.exposure is not None:
            price = self.book.price_of(served_by)
            estimate = _estimate(price, self.book.calibration.scale(served_by, est_input), planned_output)
            try:
                hold = self.exposure.admit(estimate)
            except BudgetExhaustedError:
                self._waiting = "exposure"  # what the last refused attempt waits for (not a stop reason)
                raise
            self._in_flight = hold

            def release() -> None:
                hold.release()
                if self._in_flight is hold:
                    self._in_flight = None

        if worst is not None:
            self._hold_worst(worst)
        return release

    def _hard_worst(self, served_by: str, est_input: int, planned_output: int) -> float | None:
        """Under the hard ceiling, this attempt's worst case if it fits beside the exposure in flight (None when
        there is nothing to hold); `BudgetExhaustedError` with reason `in-flight` when it does not fit."""
        if not self.hard or not self.account.capped():
            return None
        worst = self.book.worst_case_usd(served_by, est_input, planned_output)
        if worst is None:
            return None
        room = self.account.room(self._own(in_flight=True))
        if room is not None and worst > room + EPSILON:
            self._waiting = "in-flight"
            raise BudgetExhaustedError(
                f"hard ceiling: this call's worst case of {usd(worst)} USD does not fit beside the worst cases of "
                f"the calls in flight ({usd(room)} USD unreserved); it waits for one of them to settle",
                reason=StopReason.IN_FLIGHT, worst=worst, room=room,
            )
        return worst

    def _hold_worst(self, worst: float) -> None:
        """Hold `worst` for an attempt about to leave: the admission reserve first, the rest as exposure."""
        covered = (self.hold.left if self.hold is not None else 0.0) + self._worst_left()
        more = self._unsettled + worst - covered
        if more > 0:
            if self._worst is None:
                self._worst = Hold(self.account, more, exposure=True)
            else:
                self._worst.grow(more)
        self._unsettled += worst

    def _worst_left(self) -> float:
        return self._worst.left if self._worst is not None else 0.0

    def _own(self, *, in_flight: bool) -> float:
        """What of the chain's held room is this invocation's to plan with: its reserve (and its exposure),
        less what its unsettled attempts may still cost."""
        mine = self.hold.left if self.hold is not None else 0.0
        if in_flight:
            mine += self._worst_left()
        return mine - self._unsettled

    # -- while a call spends ---------------------------------------------------------------------------
    def spent(self, inc: float) -> None:
        """A call spent `inc` USD: debit the chain, using up its reserve first, then what it holds beyond it."""
        self.account.debit(inc)
        left = inc
        for hold in (self.hold, self._worst):
            if hold is not None and left > 0:
                left -= hold.consume(left)
        if self._in_flight is not None:
            self._in_flight.consume(inc)
        self._unsettled = max(0.0, self._unsettled - inc)

    def drew_tokens(self, tokens: int) -> None:
        """A call's usage drew `tokens` from the tree's token ceiling."""
        if self.tokens is not None and tokens:
            self.tokens.debit(float(tokens))
            if self.token_hold is not None:
                self.token_hold.consume(float(tokens))

    # -- settling --------------------------------------------------------------------------------------
    def settle(self) -> None:
        """A journaled draw or terminal now says what this invocation's attempts cost: release their exposure.

        Called only once that entry is staged, so an attempt that reuses the room is journaled after it (a
        crash before then charges the settled calls at their worst case, and the new one not at all).
        """
        self._unsettled = 0.0
        if self._worst is not None:
            self._worst.release()
            self.account.root().notify_released()  # also when spend used it all: a waiter re-checks what is left

    def release_all(self) -> None:
        """The invocation settled: drop its reserve and exposure."""
        self.settle()
        if self.hold is not None:
            self.hold.release()

    async def await_release(self, signal: Signal | None = None) -> ExposureWait:
        """Park until room is released: `released`, `drained` at once when nothing is in flight to wait for,
        `timeout` after `wait_s` (hard ceiling), or `aborted` when the signal fires first."""
        waiting, self._waiting = self._waiting, None
        if waiting == "in-flight":
            return await self._await_settle(signal)
        if self.exposure is None:
            return "drained"
        return await self.exposure.await_release(signal)

    async def _await_settle(self, signal: Signal | None) -> ExposureWait:
        others = max(a.exposed for a in self.account.capped()) - self._worst_left()
        if others <= EPSILON:
            return "drained"
        released = asyncio.ensure_future(self.account.root().released().wait())
        stopper = asyncio.ensure_future(signal.wait()) if signal is not None else None
        try:
            pending = {released} | ({stopper} if stopper is not None else set())
            done, _ = await asyncio.wait(pending, timeout=self.wait_s, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (released, stopper):
                if task is not None:
                    task.cancel()
        if released in done:
            return "released"
        return "aborted" if done else "timeout"

    def live_exposure_usd(self) -> float:
        return self.exposure.live_usd() if self.exposure is not None else 0.0


def _estimate(price: Price | None, scaled_input: int, planned_output: int) -> float:
    """An attempt's estimate under the exposure cap (0 when unpriced: the cap cannot see it)."""
    if price is None:
        return 0.0
    return cost_usd(Usage(input_tokens=scaled_input, output_tokens=planned_output), price)

