"""The price book: what one invocation's calls are charged at, and what an attempt may cost at worst."""

from __future__ import annotations

from collections.abc import Callable

from tether.budget.accounts import Account
from tether.budget.calibration import InputCalibration
from tether.contracts.errors import PricingError
from tether.contracts.money import usd
from tether.contracts.prices import Price
from tether.contracts.usage import Usage
from tether.pricing import affordable_output_tokens, cost_usd

PriceLookup = Callable[[str], Price | None]


class PriceBook:
    """The price rows of the models an invocation calls (each looked up once) and the estimates priced from them.

    Input estimates are scaled by what billed input taught the run (`InputCalibration`) before they are priced,
    so every figure the gate plans with agrees with what a call is journaled to risk.
    """

    __slots__ = ("_first", "_lookup", "_rest", "calibration", "free")

    def __init__(self, lookup: PriceLookup, calibration: InputCalibration | None = None, *, free: bool = False) -> None:
        self._lookup = lookup
        self._first: tuple[str, Price | None] | None = None  # the first model's row (almost always the only one)
        self._rest: dict[str, Price | None] | None = None  # the fallbacks' rows, once one is asked for
        self.calibration = calibration or InputCalibration()
        self.free = free
        """Every model the invocation may call is priced at zero: a USD ceiling (even 0) never refuses its turns."""

    def price_of(self, ref: str) -> Price | None:
        """The price row of `ref`, looked up once per model (it is asked several times per turn)."""
        first = self._first
        if first is None:
            price = self._lookup(ref)
            self._first = (ref, price)
            return price
        if first[0] == ref:
            return first[1]
        if self._rest is None:
            self._rest = {}
        if ref not in self._rest:
            self._rest[ref] = self._lookup(ref)
        return self._rest[ref]

    def worst_case_usd(self, served_by: str, est_input: int, max_output: int) -> float | None:
        """The priced worst case of one attempt (input estimate plus its clamped output); None if unpriced."""
        price = self.price_of(served_by)
        if price is None:
            return None
        return cost_usd(Usage(input_tokens=self.calibration.scale(served_by, est_input), output_tokens=max_output),
                        price)

    def affordable_output(self, served_by: str, est_input: int, room_usd: float | None) -> int | None:
        """The output tokens `room_usd` buys beside the (scaled) input estimate; None when either is unbounded."""
        price = self.price_of(served_by)
        if room_usd is None or price is None:
            return None
        return affordable_output_tokens(price, self.calibration.scale(served_by, est_input), room_usd)

    def unpriced_refusal(self, served_by: str, account: Account, *, strict: bool, allowed: bool) -> PricingError | None:
        """The refusal of `served_by` before the wire when it has no price row (None: priced, or it may run)."""
        if self.price_of(served_by) is not None:
            return None
        return unpriced_refusal(served_by, account, strict=strict, allowed=allowed)


def unpriced_refusal(served_by: str, account: Account, *, strict: bool, allowed: bool) -> PricingError | None:
    """The `PricingError` for a model with no price row, or None when it may run (no ceiling, or allowed)."""
    if strict:
        return PricingError(
            f"strict pricing: no price row for {served_by!r}; add one with "
            f"Engine(prices={{{served_by!r}: tether.Price(input=..., output=...)}}).",
            model=served_by,
        )
    ceiling = account.binding()
    if ceiling is None or allowed:
        return None  # no ceiling to protect, or accepted: the usage is itemized under `cost.unpriced`
    return PricingError(
        f"unpriced model under a USD ceiling: {served_by!r} has no price row, so its calls could "
        f"spend without bound against the {usd(ceiling.ceiling)} USD ceiling of {ceiling.name!r}. "
        f"Price it with Engine(prices={{{served_by!r}: tether.Price(input=..., output=...)}}), or "
        f"for a gateway pass price_provider='<genai-prices provider, e.g. groq>' to "
        f"tether.models.openai_compatible(...) (local=True for a server of your own with no bill, which prices "
        f"every model at 0 USD), or price it free with tether.Price.free(), or run with allow_unpriced=True "
        f"(`tether run --allow-unpriced`) to accept it.",
        model=served_by,
        ceiling=ceiling.ceiling,
    )
