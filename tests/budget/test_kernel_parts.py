"""The money kernel's parts, each on its own: the price book, the tally, the gate of holds; and the rule that
nothing outside `tether.budget` writes their state."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import tether
from tether.budget.accounts import Account, Hold
from tether.budget.calibration import InputCalibration
from tether.budget.gate import HoldGate
from tether.budget.pricebook import PriceBook
from tether.budget.tally import SpendTally
from tether.contracts.stops import StopReason
from tether.contracts.usage import Usage

PRICE = tether.Price(input=10.0, output=20.0)  # 1,000 in + 500 out = 0.02 USD
SRC = Path(tether.__file__).resolve().parent


# -- the price book --------------------------------------------------------------------------------------
def test_the_price_book_looks_each_model_up_once_and_prices_the_worst_case() -> None:
    asked: list[str] = []

    def lookup(ref: str) -> tether.Price | None:
        asked.append(ref)
        return PRICE if ref == "a:m" else None

    book = PriceBook(lookup)
    assert [book.price_of("a:m") for _ in range(3)] == [PRICE] * 3
    assert book.price_of("b:m") is None and book.price_of("b:m") is None
    assert asked == ["a:m", "b:m"]
    assert book.worst_case_usd("a:m", 1_000, 500) == pytest.approx(0.02)
    assert book.worst_case_usd("b:m", 1_000, 500) is None
    assert book.affordable_output("a:m", 1_000, 0.02) == 500
    assert book.affordable_output("a:m", 1_000, None) is None and book.affordable_output("b:m", 1_000, 1.0) is None


def test_the_price_book_prices_inputs_as_calibrated() -> None:
    calibration = InputCalibration()
    calibration.observe("a:m", 1_000, 2_000)  # billed input was twice the estimate
    book = PriceBook(lambda ref: PRICE, calibration)
    assert book.worst_case_usd("a:m", 1_000, 0) == pytest.approx(cost(calibration.scale("a:m", 1_000), 0))
    assert calibration.scale("a:m", 1_000) > 1_000


def test_the_price_book_refuses_an_unpriced_model_only_where_it_could_spend_without_bound() -> None:
    book = PriceBook(lambda ref: None)
    capped, open_ = Account(1.0), Account(None)
    assert isinstance(book.unpriced_refusal("x:m", capped, strict=False, allowed=False), tether.PricingError)
    assert book.unpriced_refusal("x:m", capped, strict=False, allowed=True) is None
    assert book.unpriced_refusal("x:m", open_, strict=False, allowed=False) is None
    assert isinstance(book.unpriced_refusal("x:m", open_, strict=True, allowed=True), tether.PricingError)
    assert PriceBook(lambda ref: PRICE).unpriced_refusal("x:m", capped, strict=True, allowed=False) is None


def cost(tokens_in: int, tokens_out: int) -> float:
    return (tokens_in * PRICE.input + tokens_out * PRICE.output) / 1e6


# -- the tally ---------------------------------------------------------------------------------------------
def test_the_tally_records_priced_free_and_unpriced_usage_and_draws_it_once() -> None:
    spend = SpendTally()
    spend.call_made()
    spend.record("a:m", Usage(input_tokens=100, output_tokens=10), 0.5)
    spend.record("free:m", Usage(input_tokens=5, output_tokens=5), 0.0)
    spend.record("x:m", Usage(input_tokens=7, output_tokens=3), None)
    assert spend.costs == {"a:m": 0.5, "free:m": 0.0} and spend.cost_usd == 0.5
    assert spend.unpriced == {"x:m": Usage(input_tokens=7, output_tokens=3)}
    assert spend.usage.input_tokens == 112 and spend.provider_calls == 1
    tokens, costs, usage = spend.take_draw()
    assert (tokens, costs, usage.output_tokens) == (130, {"a:m": 0.5, "free:m": 0.0}, 18)
    assert spend.take_draw()[:2] == (0, {})  # drawn once


def test_the_tally_round_trips_through_its_checkpoint_and_carries_what_a_crash_cut_off() -> None:
    spend = SpendTally()
    spend.call_made()
    spend.record("a:m", Usage(input_tokens=100, output_tokens=50), 0.002)
    snapshot = spend.snapshot(through=1)
    again = SpendTally()
    assert again.restore(snapshot) == 150
    assert again.snapshot(through=1) == snapshot
    again.carry_lost({"a:m": 0.001}, {"a:m": 0.02}, [3], calls=2)
    assert again.costs == {"a:m": pytest.approx(0.003)} and again.orphaned_usd == 0.02 and again.cut == [3]
    assert again.provider_calls == 3


def test_a_call_that_never_left_is_taken_off_the_count_never_below_zero() -> None:
    spend = SpendTally()
    spend.call_made()
    spend.call_unsent()
    spend.call_unsent()
    assert spend.provider_calls == 0


# -- the gate of holds -------------------------------------------------------------------------------------
def gate(ceiling: float, *, reserve: float = 0.0, hard: bool = True) -> HoldGate:
    account = Account(ceiling)
    hold = Hold(account, reserve) if reserve else None
    return HoldGate(account, PriceBook(lambda ref: PRICE), hold=hold, hard=hard)


def test_an_attempt_holds_its_worst_case_until_settled_and_a_retry_then_plans_with_all_of_it() -> None:
    g = gate(0.05)
    first = g.max_affordable_output_tokens("a:m", 1_000)
    assert first == 2_000  # (0.05 - 0.01 input) / 20 per million
    g.admit("a:m", 1_000, first)
    assert g.account.spent + g.account.exposed <= 0.05 + 1e-12
    assert g.max_affordable_output_tokens("a:m", 1_000) == 0  # its own worst case is still held
    g.settle()  # the failed attempt's draw is journaled: it cost nothing
    assert g.account.exposed == 0 and g.max_affordable_output_tokens("a:m", 1_000) == first


def test_an_attempt_that_does_not_fit_beside_the_ones_in_flight_is_refused_with_a_typed_reason() -> None:
    account = Account(0.05)
    book = PriceBook(lambda ref: PRICE)
    one, two = (HoldGate(account, book, hard=True) for _ in range(2))
    one.admit("a:m", 1_000, 2_000)  # 0.05: all of it
    with pytest.raises(tether.BudgetExhaustedError) as refused:
        two.admit("a:m", 1_000, 100)
    assert refused.value.data["reason"] is StopReason.IN_FLIGHT
    one.settle()
    assert two.admit("a:m", 1_000, 100) is None and account.exposed == pytest.approx(0.012)


def test_spend_uses_up_the_reserve_before_what_is_held_beyond_it() -> None:
    g = gate(1.0, reserve=0.01)
    g.admit("a:m", 1_000, 500)  # 0.02: 0.01 from the reserve, 0.01 held beyond it
    assert g.account.exposed == pytest.approx(0.01)
    g.spent(0.015)
    assert g.hold is not None and g.hold.left == 0 and g.account.spent == pytest.approx(0.015)
    assert g.account.exposed == pytest.approx(0.005)
    g.release_all()
    assert g.account.exposed == 0 and g.account.held == 0


def test_a_turn_is_refused_at_a_ceiling_with_the_ceiling_it_hit() -> None:
    g = gate(0.01)
    g.spent(0.01)
    with pytest.raises(tether.BudgetExhaustedError) as usd_stop:
        g.before_turn()
    assert usd_stop.value.data["reason"] is StopReason.USD_CEILING and "0.01 USD" in str(usd_stop.value)
    tokens = Account(100.0)
    t = HoldGate(Account(None), PriceBook(lambda ref: PRICE), tokens=tokens)
    t.drew_tokens(100)
    with pytest.raises(tether.BudgetExhaustedError) as token_stop:
        t.before_turn()
    assert token_stop.value.data["reason"] is StopReason.TOKEN_CEILING


def test_a_free_invocation_is_never_refused_by_a_usd_ceiling() -> None:
    account = Account(0.0)
    HoldGate(account, PriceBook(lambda ref: tether.Price.free(), free=True)).before_turn()


# -- nothing outside writes the kernel's state -----------------------------------------------------------
KERNEL_STATE = {"spend", "gate", "book", "hooks"}


def _writes_into(target: ast.expr) -> str | None:
    """The kernel object an assignment target writes into (`x.hooks.costs[...] = `, `self.spend.cut = `)."""
    node: ast.expr = target
    written = False
    while isinstance(node, ast.Attribute | ast.Subscript):
        if isinstance(node, ast.Attribute) and node.attr in KERNEL_STATE and written:
            return node.attr
        written = True
        node = node.value
    return None


def test_no_module_outside_the_budget_package_writes_the_kernels_state() -> None:
    offenders: list[str] = []
    for path in sorted(SRC.rglob("*.py")):
        if path.is_relative_to(SRC / "budget"):
            continue
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            targets: list[ast.expr] = []
            if isinstance(node, ast.Assign):
                targets = list(node.targets)
            elif isinstance(node, ast.AugAssign | ast.AnnAssign):
                targets = [node.target]
            for target in targets:
                owner = _writes_into(target)
                if owner is not None:
                    offenders.append(f"{path.relative_to(SRC)}:{node.lineno} writes into .{owner}")
    assert not offenders, "the money kernel's state is written only by its own methods:\n" + "\n".join(offenders)
