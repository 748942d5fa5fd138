"""`AccountHooks`: the engine's `BudgetHooks`, one invocation's view of the money kernel.

The kernel's parts each own one concept and their own state: the price book (`pricebook.PriceBook`: price rows
and what an attempt may cost), the tally (`tally.SpendTally`: what the calls spent), the gate (`gate.HoldGate`:
which turns start, how much output each may ask for, the worst cases held while calls are in flight), and the
budgets across runs (`tenant.TenantGate`). The hooks wire a call's meter through them and answer the loop's
questions; they keep no money state of their own.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

from tether.budget.accounts import Account, Hold
from tether.budget.calibration import InputCalibration
from tether.budget.exposure import ExposureGate
from tether.budget.gate import DISPATCH_WAIT_S, HoldGate
from tether.budget.pricebook import PriceBook, PriceLookup
from tether.budget.tally import SpendTally, Tally
from tether.budget.tenant import Grant, TenantGate
from tether.contracts.errors import PricingError
from tether.contracts.prices import Price
from tether.contracts.protocols import ExposureWait
from tether.contracts.signal import Signal
from tether.contracts.usage import ZERO_USAGE, Usage
from tether.pricing import cost_usd

DebitListener = Callable[[str, float], None]
UnpricedListener = Callable[[str], None]



class AccountHooks:
    """Budget hooks for one agent invocation over its price book, tally, gate and budgets across runs."""

    __slots__ = ("_expected", "_grants", "_next_grant", "allow_unpriced", "book", "brake", "gate", "on_debit",
                 "on_unpriced", "spend", "strict_pricing", "tenant")

    def __init__(
        self,
        account: Account,
        price_of: PriceLookup,
        *,
        hold: Hold | None = None,
        exposure: ExposureGate | None = None,
        strict_pricing: bool = False,
        allow_unpriced: bool = False,
        on_debit: DebitListener | None = None,
        on_unpriced: UnpricedListener | None = None,
        tokens: Account | None = None,
        token_hold: Hold | None = None,
        calibration: InputCalibration | None = None,
        hard: bool = False,
        wait_s: float = DISPATCH_WAIT_S,
        run_id: str = "",
        tenant: TenantGate | None = None,
        free: bool = False,
        brake: Callable[[], None] | None = None,
    ) -> None:
        self.book = PriceBook(price_of, calibration, free=free)
        self.brake = brake
        """The run's spend-rate brake, judged before each turn (None: off)."""
        self.spend = SpendTally()
        self.gate = HoldGate(account, self.book, hold=hold, exposure=exposure, tokens=tokens, token_hold=token_hold,
                             hard=hard, wait_s=wait_s, run_id=run_id)
        self.strict_pricing = strict_pricing
        self.allow_unpriced = allow_unpriced
        self.on_debit = on_debit
        self.on_unpriced = on_unpriced
        self.tenant = tenant
        """The run's budgets across runs: every call reserves its worst case on them before it leaves."""
        self._grants: list[Grant] | None = None  # (made at the first grant: most invocations take none)
        """This invocation's reservations on them not settled yet; the last one is the call being metered."""
        self._next_grant: Grant | None = None
        self._expected: tuple[str, int] | None = None

    # -- read-only views of the parts (what terminals, events and views read) ---------------------------
    @property
    def account(self) -> Account:
        return self.gate.account

    @property
    def signal(self) -> Signal | None:
        return self.gate.signal

    @property
    def binding(self) -> Account | None:
        return self.gate.binding

    @property
    def calibration(self) -> InputCalibration:
        return self.book.calibration

    @property
    def cost_usd(self) -> float:
        return self.spend.cost_usd

    @property
    def orphaned_usd(self) -> float:
        return self.spend.orphaned_usd

    @property
    def usage(self) -> Usage:
        return self.spend.usage

    @property
    def costs(self) -> dict[str, float]:
        return self.spend.costs

    @property
    def orphaned(self) -> dict[str, float]:
        return self.spend.orphaned

    @property
    def cut(self) -> list[int]:
        return list(self.spend.cut)

    @property
    def unpriced(self) -> dict[str, Usage]:
        return self.spend.unpriced

    @property
    def usage_by_model(self) -> dict[str, Usage]:
        return self.spend.usage_by_model

    @property
    def provider_calls(self) -> int:
        return self.spend.provider_calls

    def price_of(self, ref: str) -> Price | None:
        return self.book.price_of(ref)

    def worst_case_usd(self, served_by: str, est_input: int, max_output: int) -> float | None:
        return self.book.worst_case_usd(served_by, est_input, max_output)

    # -- the tally -------------------------------------------------------------------------------------
    def tally(self, through: int = 0) -> Tally:
        return self.spend.snapshot(through)

    def restore(self, tally: Tally) -> None:
        """Carry a redispatched invocation's checkpointed spend into its terminal.

        The USD is on the accounts already: a segment starts by restoring every agent's journaled
        spend, settled or not (`journal.cost.spent_under`). Tree tokens are folded from terminals
        only, so the checkpoint's tokens are drawn here.
        """
        self.gate.drew_tokens(self.spend.restore(tally))

    def take_draw(self) -> tuple[int, dict[str, float], Usage]:
        return self.spend.take_draw()

    # -- the gate (BudgetHooks) ------------------------------------------------------------------------
    def before_turn(self) -> None:
        self.gate.before_turn()
        if self.brake is not None:
            self.brake()

    def expect_input(self, served_by: str, est_input: int) -> None:
        """The next call's raw input estimate, so its billed input can calibrate later estimates."""
        self._expected = (served_by, est_input)

    def max_affordable_output_tokens(self, served_by: str, est_input: int) -> int | None:
        return self.gate.max_affordable_output_tokens(served_by, est_input)

    def limited_by(self) -> Literal["usd", "tokens"] | None:
        return self.gate.limited_by()

    def max_exposure_output_tokens(self, served_by: str, est_input: int) -> int | None:
        return self.gate.max_exposure_output_tokens(served_by, est_input)

    def admit_turn_exposure(self, served_by: str, est_input: int, planned_output: int) -> Callable[[], None] | None:
        return self.gate.admit(served_by, est_input, planned_output)

    async def await_exposure_release(self, signal: Signal | None = None) -> ExposureWait:
        return await self.gate.await_release(signal)

    def live_exposure_usd(self) -> float:
        return self.gate.live_exposure_usd()

    def remaining_usd(self) -> float | None:
        return self.gate.remaining_usd()

    def settle_dispatches(self) -> None:
        """A journaled draw or terminal now says what this invocation's dispatches cost (see `HoldGate.settle`)."""
        self.gate.settle()

    def release_all(self) -> None:
        self.gate.release_all()

    def assert_priced_dispatch(self, served_by: str) -> None:
        """Refuse an unpriced model before the wire under strict pricing or a USD ceiling (unless allowed)."""
        refusal = self.book.unpriced_refusal(served_by, self.account, strict=self.strict_pricing,
                                             allowed=self.allow_unpriced)
        if refusal is not None:
            raise refusal
        if self.price_of(served_by) is None and self.account.binding() is not None and self.on_unpriced is not None:
            self.on_unpriced(served_by)

    # -- budgets across runs ---------------------------------------------------------------------------
    async def reserve_across_runs(self, served_by: str, est_input: int, max_output: int, what: str) -> None:
        """Hold this call's worst case (the figure its dispatch record journals) on the run's budgets across
        runs before it leaves; `BudgetExhaustedError` when a scope cannot cover it (nothing is held then)."""
        if self.tenant is None:
            return
        worst = self.worst_case_usd(served_by, est_input, max_output)
        if worst is None:
            if self.allow_unpriced:
                return  # accepted unpriced: itemized, not counted (as against the run's own ceiling)
            raise PricingError(
                f"unpriced model under budgets across runs: {served_by!r} has no price row, so its calls could "
                f"spend without bound against {self.tenant.budgets[0].describe()}. Price it with "
                f"Engine(prices={{{served_by!r}: tether.Price(input=..., output=...)}}), or run with "
                f"allow_unpriced=True to accept it.",
                model=served_by,
            )
        grant = await self.tenant.reserve(worst, what)
        if self._grants is None:
            self._grants = [grant]
        else:
            self._grants.append(grant)
        self._next_grant = grant

    async def settle_across_runs(self) -> None:
        """Charge the budgets across runs what this invocation's reserved calls cost (their turns are drawn)."""
        grants, self._grants = self._grants or [], None
        if grants and self.tenant is not None:
            try:
                await self.tenant.settle(grants)
            except BaseException:
                self._grants = grants + (self._grants or [])  # settled later, or at worst case once the lease dies
                raise

    # -- the meter -------------------------------------------------------------------------------------
    def open_call_meter(self, served_by: str) -> Callable[[Usage], None]:
        """Price the call's accumulated usage and debit only the increment (tier-correct live)."""
        self.spend.call_made()
        grant, self._next_grant = self._next_grant, None
        price = self.price_of(served_by)
        expected, self._expected = self._expected, None
        est = expected[1] if expected is not None and expected[0] == served_by else 0
        return _CallMeter(self, served_by, price, est, grant)

    def on_usage(self, usage: Usage, served_by: str) -> None:
        """Meter-less accounting: one meter per report (per-slice pricing)."""
        self.open_call_meter(served_by)(usage)
        self.spend.call_unsent()


class _CallMeter:
    """One model call's meter (`AccountHooks.open_call_meter`): prices the call's accumulated usage and debits only
    the increment. A slotted object rather than a closure: one object the cycle collector tracks per call in
    flight, where a closure over its ten variables was twelve (docs/performance.md)."""

    __slots__ = ("acc", "est", "grant", "hooks", "paid", "price", "served_by")

    def __init__(self, hooks: AccountHooks, served_by: str, price: Price | None, est: int, grant: Grant | None) -> None:
        self.hooks = hooks
        self.served_by = served_by
        self.price = price
        self.est = est
        self.grant = grant
        self.acc = ZERO_USAGE
        self.paid = 0.0

    def __call__(self, delta: Usage) -> None:
        hooks, served_by = self.hooks, self.served_by
        acc = self.acc = self.acc + delta
        if delta.input_tokens:
            hooks.book.calibration.observe(served_by, self.est, acc.input_tokens)
        inc: float | None = None
        if self.price is not None:
            total = cost_usd(acc, self.price)
            inc, self.paid = total - self.paid, total
        hooks.spend.record(served_by, delta, inc)
        gate = hooks.gate
        gate.drew_tokens(delta.input_tokens + delta.output_tokens)
        if not inc:
            return
        if self.grant is not None:
            self.grant.spent_usd += inc
        gate.spent(inc)
        if hooks.on_debit is not None:
            hooks.on_debit(served_by, inc)
