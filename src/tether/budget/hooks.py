"""`AccountHooks`: the engine's `BudgetHooks` over an account chain, metering each provider call."""

from __future__ import annotations

from collections.abc import Callable

from tether.budget.accounts import Account
from tether.contracts.errors import BudgetExhaustedError, PricingError
from tether.contracts.prices import Price
from tether.contracts.protocols import ExposureWait
from tether.contracts.signal import Signal
from tether.contracts.usage import Usage
from tether.pricing import affordable_output_tokens, cost_usd

PriceLookup = Callable[[str], Price | None]


class AccountHooks:
    """Budget hooks for one agent invocation; also the tally its terminal entry records."""

    def __init__(self, account: Account, price_of: PriceLookup, *, strict_pricing: bool = False) -> None:
        self.account = account
        self.price_of = price_of
        self.strict_pricing = strict_pricing
        self.signal: Signal | None = account.signal
        self.costs: dict[str, float] = {}
        self.unpriced: dict[str, Usage] = {}
        self.provider_calls = 0

    @property
    def cost_usd(self) -> float:
        return sum(self.costs.values())

    def _exhausted(self, acct: Account) -> BudgetExhaustedError:
        return BudgetExhaustedError(
            f"budget exhausted: account {acct.name!r} has spent {acct.spent:.4f} of "
            f"{acct.ceiling:.4f} USD. Raise budget_usd for the next run.",
            account=acct.name,
            spent=acct.spent,
            ceiling=acct.ceiling,
        )

    def before_turn(self) -> None:
        for acct in self.account.chain():
            if acct.ceiling is not None and acct.spent >= acct.ceiling - 1e-12:
                raise self._exhausted(acct)

    def max_affordable_output_tokens(self, served_by: str, est_input: int) -> int | None:
        room = self.account.remaining()
        price = self.price_of(served_by)
        if room is None or price is None:
            return None
        return affordable_output_tokens(price, est_input, room)

    def max_exposure_output_tokens(self, served_by: str, est_input: int) -> int | None:
        return None

    def admit_turn_exposure(self, served_by: str, est_input: int, planned_output: int) -> Callable[[], None] | None:
        return None

    async def await_exposure_release(self, signal: Signal | None = None) -> ExposureWait:
        return "drained"

    def live_exposure_usd(self) -> float:
        return 0.0

    def open_call_meter(self, served_by: str) -> Callable[[Usage], None]:
        """Price the call's accumulated usage and debit only the increment (tier-correct live)."""
        self.provider_calls += 1
        price = self.price_of(served_by)
        acc = Usage()
        paid = 0.0

        def feed(delta: Usage) -> None:
            nonlocal acc, paid
            acc = acc + delta
            if price is None:
                self.unpriced[served_by] = self.unpriced.get(served_by, Usage()) + delta
                return
            total = cost_usd(acc, price)
            inc = total - paid
            paid = total
            self.costs[served_by] = self.costs.get(served_by, 0.0) + inc
            if inc:
                self.account.debit(inc)

        return feed

    def remaining_usd(self) -> float | None:
        return self.account.remaining()

    def assert_priced_dispatch(self, served_by: str) -> None:
        if self.strict_pricing and self.price_of(served_by) is None:
            raise PricingError(
                f"strict pricing: no price row for {served_by!r}; add one with "
                f"tether.PriceTable({{{served_by!r}: tether.Price(input=..., output=...)}}).",
                model=served_by,
            )

    def on_usage(self, usage: Usage, served_by: str) -> None:
        self.open_call_meter(served_by)(usage)
        self.provider_calls -= 1
