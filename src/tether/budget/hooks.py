"""`AccountHooks`: the engine's `BudgetHooks` over an account chain (layers 2 and 3, exposure)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Literal

from pydantic import BaseModel

from tether.budget.accounts import EPSILON, Account, Hold
from tether.budget.calibration import InputCalibration
from tether.budget.exposure import ExposureGate, ExposureHold
from tether.budget.tenant import Grant, TenantGate
from tether.contracts.errors import BudgetExhaustedError, PricingError
from tether.contracts.prices import Price
from tether.contracts.protocols import ExposureWait
from tether.contracts.signal import Signal
from tether.contracts.stops import StopReason
from tether.contracts.usage import ZERO_USAGE, Usage
from tether.pricing import affordable_output_tokens, cost_usd

PriceLookup = Callable[[str], Price | None]
DebitListener = Callable[[str, float], None]
UnpricedListener = Callable[[str], None]


class Tally(BaseModel):
    """What an invocation's calls cost so far; checkpointed so a redispatch never loses it."""

    costs: dict[str, float] = {}
    unpriced: dict[str, Usage] = {}
    usage_by_model: dict[str, Usage] = {}
    provider_calls: int = 0
    through: int = 0
    """The highest journaled dispatch number whose spend this tally holds (see `journal.cost`)."""
    orphaned: dict[str, float] = {}
    """Spend of dispatches earlier crashes cut off (charged at their worst case), so a later crash keeps it."""
    cut: list[int] = []
    """The numbers of those dispatches."""


DISPATCH_WAIT_S = 120.0
"""How long a dispatch waits under the hard ceiling for its siblings' in-flight worst cases to settle."""


class AccountHooks:
    """Budget hooks for one agent invocation; also the tally its terminal entry records.

    Under the hard ceiling (`hard=True`) every dispatch holds its priced worst case (input estimate plus
    the output limit it puts on the wire) on the account chain from the moment it is planned until a
    journaled draw or terminal settles it, so `spent + the worst case of every dispatch in flight` never
    passes a ceiling. The invocation's admission reserve covers that first; the rest (`exposure`) comes
    from the unreserved remainder. A dispatch that does not fit beside its siblings' exposure waits for a
    release (`await_exposure_release`) instead of being admitted past the ceiling or shortened.
    """

    __slots__ = (
        "_expected", "_grants", "_in_flight", "_lookup", "_next_grant", "_price", "_prices", "_unsettled", "_waiting",
        "_worst", "account", "allow_unpriced", "binding", "calibration", "costs", "cut", "exposure", "free", "hard",
        "hold", "on_debit", "on_unpriced", "orphaned", "provider_calls", "run_id", "signal", "strict_pricing", "tenant",
        "token_hold", "tokens", "undrawn_costs", "undrawn_tokens", "undrawn_usage", "unpriced", "usage_by_model",
        "wait_s",
    )

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
    ) -> None:
        self.account = account
        self.free = free
        """Every model the invocation may call is priced at zero: a USD ceiling (even 0) never refuses its turns."""
        self.run_id = run_id
        self._lookup = price_of
        self._price: tuple[str, Price | None] | None = None  # the first model's row (almost always the only one)
        self._prices: dict[str, Price | None] | None = None  # the fallbacks' rows, once one is asked for
        self.hold = hold
        self.exposure = exposure
        self.strict_pricing = strict_pricing
        self.allow_unpriced = allow_unpriced
        self.on_debit = on_debit
        self.on_unpriced = on_unpriced
        self.tokens = tokens
        self.token_hold = token_hold
        self.calibration = calibration or InputCalibration()
        self._expected: tuple[str, int] | None = None
        self.signal: Signal | None = account.signal if tokens is None else Signal.any(account.signal, tokens.signal)
        self.undrawn_tokens = 0
        self.undrawn_usage = ZERO_USAGE
        self.undrawn_costs: dict[str, float] = {}
        self.costs: dict[str, float] = {}
        self.orphaned: dict[str, float] = {}
        """Spend of dispatches a crash cut off before they settled, per model (already on the accounts)."""
        self.cut: list[int] = []
        """The numbers of the dispatches `orphaned` charges."""
        self.hard = hard
        self.wait_s = wait_s
        self._worst: Hold | None = None
        """The worst case of its calls in flight beyond what its admission reserve covers (hard ceiling)."""
        self._unsettled = 0.0
        """What this invocation's dispatches not yet settled by a journaled draw may still cost at worst."""
        self._waiting: str | None = None
        """What the last refused dispatch waits for: `in-flight` (hard ceiling) or `exposure` (the cap)."""
        self.unpriced: dict[str, Usage] = {}
        self.usage_by_model: dict[str, Usage] = {}
        self.provider_calls = 0
        self.binding: Account | None = None
        """The ceiling that bounded the last output clamp (the account, or the tree's tokens)."""
        self._in_flight: ExposureHold | None = None
        self.tenant = tenant
        """The run's budgets across runs: every call reserves its worst case on them before it leaves."""
        self._grants: list[Grant] = []
        """This invocation's reservations on them not settled yet; the last one is the call being metered."""
        self._next_grant: Grant | None = None

    def price_of(self, ref: str) -> Price | None:
        """The price row of `ref`, looked up once per model (it is asked several times per turn)."""
        first = self._price
        if first is None:
            price = self._lookup(ref)
            self._price = (ref, price)
            return price
        if first[0] == ref:
            return first[1]
        if self._prices is None:
            self._prices = {}
        if ref not in self._prices:
            self._prices[ref] = self._lookup(ref)
        return self._prices[ref]

    @property
    def cost_usd(self) -> float:
        return sum(self.costs.values())

    @property
    def orphaned_usd(self) -> float:
        return sum(self.orphaned.values())

    @property
    def usage(self) -> Usage:
        total = ZERO_USAGE
        for u in self.usage_by_model.values():
            total = total + u
        return total

    # -- layer 2 -------------------------------------------------------------------------------
    def tally(self, through: int = 0) -> Tally:
        return Tally(costs=dict(self.costs), unpriced=dict(self.unpriced), usage_by_model=dict(self.usage_by_model),
                     provider_calls=self.provider_calls, through=through, orphaned=dict(self.orphaned),
                     cut=list(self.cut))

    def restore(self, tally: Tally) -> None:
        """Carry a redispatched invocation's checkpointed spend into its terminal.

        The USD is on the accounts already: a segment starts by restoring every agent's journaled
        spend, settled or not (`journal.cost.spent_under`). Tree tokens are folded from terminals
        only, so the checkpoint's tokens are drawn here.
        """
        self.costs = dict(tally.costs)
        self.unpriced = dict(tally.unpriced)
        self.usage_by_model = dict(tally.usage_by_model)
        self.provider_calls = tally.provider_calls
        if self.tokens is not None:
            tokens = sum(u.input_tokens + u.output_tokens for u in tally.usage_by_model.values())
            self.tokens.debit(float(tokens))
            if self.token_hold is not None:
                self.token_hold.consume(float(tokens))

    def take_draw(self) -> tuple[int, dict[str, float], Usage]:
        """Tokens, USD per model and usage drawn since the last call (one `budget_draw` per model turn)."""
        drawn = (self.undrawn_tokens, self.undrawn_costs, self.undrawn_usage)
        self.undrawn_tokens, self.undrawn_costs, self.undrawn_usage = 0, {}, ZERO_USAGE
        return drawn

    def before_turn(self) -> None:
        if self.tokens is not None and (self.tokens.at_ceiling() or self.tokens.signal.aborted):
            self.tokens.stop("turn refused: tree token ceiling reached")
            raise BudgetExhaustedError(
                f"tree token ceiling reached: {int(self.tokens.spent)} of {int(self.tokens.ceiling or 0)} tokens "
                f"drawn; no further turn is admitted anywhere in the tree.",
                tokens=self.tokens.spent, ceiling=self.tokens.ceiling, reason=StopReason.TOKEN_CEILING,
            )
        for acct in () if self.free else self.account.capped():
            if acct.at_ceiling():
                acct.stop("turn refused: ceiling reached", remaining_usd=0.0)
                raise BudgetExhaustedError(
                    f"budget exhausted: account {acct.name!r} has {acct.spent_phrase(self.run_id or 'RUN')} of "
                    f"{acct.ceiling:.4f} USD; no further turn is admitted.",
                    account=acct.name, spent=acct.spent, orphaned=acct.orphaned, ceiling=acct.ceiling,
                    remaining=0.0, reason=StopReason.USD_CEILING,
                )

    def expect_input(self, served_by: str, est_input: int) -> None:
        """The next call's raw input estimate, so its billed input can calibrate later estimates."""
        self._expected = (served_by, est_input)

    def max_affordable_output_tokens(self, served_by: str, est_input: int) -> int | None:
        est_input = self.calibration.scale(served_by, est_input)
        room = self.remaining_usd()  # net of other invocations' reserves, as if every dispatch in flight settled
        price = self.price_of(served_by)
        by_money = None if room is None or price is None else affordable_output_tokens(price, est_input, room)
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

    # -- exposure ------------------------------------------------------------------------------
    def max_exposure_output_tokens(self, served_by: str, est_input: int) -> int | None:
        est_input = self.calibration.scale(served_by, est_input)
        price = self.price_of(served_by)
        if self.exposure is None or price is None:
            return None
        return affordable_output_tokens(price, est_input, self.exposure.room())

    def admit_turn_exposure(self, served_by: str, est_input: int, planned_output: int) -> Callable[[], None] | None:
        """Hold this attempt's estimate under the in-flight exposure cap, and (hard ceiling) its worst case on
        the account chain; `BudgetExhaustedError` when either does not fit (nothing is held then)."""
        worst = self._hard_worst(served_by, est_input, planned_output)
        release: Callable[[], None] | None = None
        if self.exposure is not None:
            price = self.price_of(served_by)
            scaled = self.calibration.scale(served_by, est_input)
            estimate = cost_usd(Usage(input_tokens=scaled, output_tokens=planned_output), price) if price else 0.0
            try:
                hold = self.exposure.admit(estimate)
            except BudgetExhaustedError:
                self._waiting = "exposure"  # what the last refused dispatch waits for (not a stop reason)
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
        worst = self.worst_case_usd(served_by, est_input, planned_output)
        if worst is None:
            return None
        room = self.account.room(self._own(in_flight=True))
        if room is not None and worst > room + EPSILON:
            self._waiting = "in-flight"
            raise BudgetExhaustedError(
                f"hard ceiling: this call's worst case of {worst:.6f} USD does not fit beside the worst cases of "
                f"the calls in flight ({room:.6f} USD unreserved); it waits for one of them to settle",
                reason=StopReason.IN_FLIGHT, worst=worst, room=room,
            )
        return worst

    def _hold_worst(self, worst: float) -> None:
        """Hold `worst` for a dispatch about to leave: the admission reserve first, the rest as exposure."""
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
        less what its unsettled dispatches may still cost."""
        mine = self.hold.left if self.hold is not None else 0.0
        if in_flight:
            mine += self._worst_left()
        return mine - self._unsettled

    def settle_dispatches(self) -> None:
        """A journaled draw or terminal now says what this invocation's dispatches cost: release their exposure.

        Called only once that entry is staged, so a dispatch that reuses the room is journaled after it (a
        crash before then charges the settled calls at their worst case, and the new one not at all).
        """
        self._unsettled = 0.0
        if self._worst is not None:
            self._worst.release()
            self.account.root().notify_released()  # also when spend used it all: a waiter re-checks what is left

    def release_all(self) -> None:
        """The invocation settled: drop its reserve and exposure."""
        self.settle_dispatches()
        if self.hold is not None:
            self.hold.release()

    async def await_exposure_release(self, signal: Signal | None = None) -> ExposureWait:
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

    # -- layer 3 -------------------------------------------------------------------------------
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
        self._grants.append(grant)
        self._next_grant = grant

    async def settle_across_runs(self) -> None:
        """Charge the budgets across runs what this invocation's reserved calls cost (their turns are drawn)."""
        grants, self._grants = self._grants, []
        if grants and self.tenant is not None:
            try:
                await self.tenant.settle(grants)
            except BaseException:
                self._grants = grants + self._grants  # settled later, or charged at worst case once the lease dies
                raise

    def open_call_meter(self, served_by: str) -> Callable[[Usage], None]:
        """Price the call's accumulated usage and debit only the increment (tier-correct live)."""
        self.provider_calls += 1
        grant, self._next_grant = self._next_grant, None
        price = self.price_of(served_by)
        expected, self._expected = self._expected, None
        est = expected[1] if expected is not None and expected[0] == served_by else 0
        acc = ZERO_USAGE
        paid = 0.0

        def feed(delta: Usage) -> None:
            nonlocal acc, paid
            acc = acc + delta
            if delta.input_tokens:
                self.calibration.observe(served_by, est, acc.input_tokens)
            self.usage_by_model[served_by] = self.usage_by_model.get(served_by, ZERO_USAGE) + delta
            drawn = delta.input_tokens + delta.output_tokens
            self.undrawn_tokens += drawn
            self.undrawn_usage = self.undrawn_usage + delta
            if self.tokens is not None and drawn:
                self.tokens.debit(float(drawn))
                if self.token_hold is not None:
                    self.token_hold.consume(float(drawn))
            if price is None:
                self.unpriced[served_by] = self.unpriced.get(served_by, ZERO_USAGE) + delta
                return
            total = cost_usd(acc, price)
            inc, paid = total - paid, total
            # A free (local) model is priced at 0: it still belongs in `by_model`, as 0, never missing.
            self.costs.setdefault(served_by, 0.0)
            self.undrawn_costs.setdefault(served_by, 0.0)
            if not inc:
                return
            self.costs[served_by] = self.costs.get(served_by, 0.0) + inc
            self.undrawn_costs[served_by] = self.undrawn_costs.get(served_by, 0.0) + inc
            if grant is not None:
                grant.spent_usd += inc
            self.account.debit(inc)
            left = inc
            for hold in (self.hold, self._worst):  # the reserve first, then the exposure beyond it
                if hold is not None and left > 0:
                    left -= hold.consume(left)
            if self._in_flight is not None:
                self._in_flight.consume(inc)
            self._unsettled = max(0.0, self._unsettled - inc)
            if self.on_debit is not None:
                self.on_debit(served_by, inc)

        return feed

    def remaining_usd(self) -> float | None:
        """The chain's headroom for this invocation: net of other invocations' reserves and of what its own
        unsettled dispatches may still cost (as if every other dispatch in flight settled)."""
        return self.account.room(self._own(in_flight=False), in_flight=False)

    def worst_case_usd(self, served_by: str, est_input: int, max_output: int) -> float | None:
        """The priced worst case of one attempt (input estimate plus its clamped output); None if unpriced."""
        price = self.price_of(served_by)
        est_input = self.calibration.scale(served_by, est_input)
        return None if price is None else cost_usd(Usage(input_tokens=est_input, output_tokens=max_output), price)

    def assert_priced_dispatch(self, served_by: str) -> None:
        """Refuse an unpriced model before the wire under strict pricing or a USD ceiling (unless allowed)."""
        if self.price_of(served_by) is not None:
            return
        refusal = unpriced_refusal(served_by, self.account, strict=self.strict_pricing, allowed=self.allow_unpriced)
        if refusal is not None:
            raise refusal
        if self.account.binding() is not None and self.on_unpriced is not None:
            self.on_unpriced(served_by)

    def uncount_call(self) -> None:
        """The last call's request never left (its connection failed): it is no provider call."""
        self.provider_calls = max(0, self.provider_calls - 1)

    def on_usage(self, usage: Usage, served_by: str) -> None:
        """Meter-less accounting: one meter per report (per-slice pricing)."""
        self.open_call_meter(served_by)(usage)
        self.provider_calls -= 1


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
        f"spend without bound against the {ceiling.ceiling:.4f} USD ceiling of {ceiling.name!r}. "
        f"Price it with Engine(prices={{{served_by!r}: tether.Price(input=..., output=...)}}), or "
        f"for a gateway pass price_provider='<genai-prices provider, e.g. groq>' to "
        f"tether.models.openai_compatible(...), or run with allow_unpriced=True (`tether run --allow-unpriced`) "
        f"to accept it.",
        model=served_by,
        ceiling=ceiling.ceiling,
    )
