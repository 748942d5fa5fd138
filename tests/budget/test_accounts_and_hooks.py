"""The account chain, admission arithmetic and the per-call meter, without an engine."""

from __future__ import annotations

import pytest

import tether
from tether.budget.accounts import Account
from tether.budget.admission import admit, check_spawn_cap, reserve_usd
from tether.budget.hooks import AccountHooks
from tether.pricing import cost_usd

TIERED = tether.Price(input=3.0, output=15.0, tiers=[tether.Tier(above_input_tokens=200_000, input=6.0, output=22.5)])


def test_an_exact_fill_is_admitted_and_one_cent_more_is_refused() -> None:
    acct = Account(1.0)
    admit(acct, 0.6, what="a", run_id="r")
    admit(acct, 0.4, what="b", run_id="r")  # spent + held + reserve == ceiling
    with pytest.raises(tether.BudgetExhaustedError, match=r"holds 1\.00 of 1\.00 USD; the reserve of 0\.01 "):
        admit(acct, 0.01, what="c", run_id="r")


def test_reserves_come_from_est_cost_then_a_priced_turn_and_an_unpriced_model_holds_nothing() -> None:
    price = tether.Price(input=1.0, output=2.0)
    assert reserve_usd(0.02, None, price, 100, 4096) == 0.02
    assert reserve_usd(None, 0.03, price, 100, 4096) == 0.03
    assert reserve_usd(None, None, price, 1_000_000, 1_000_000) == pytest.approx(3.0)
    assert reserve_usd(None, None, None, 100, 4096) == 0.0  # its spend is not counted against a ceiling


def test_debits_propagate_to_every_ancestor_and_fire_the_ceiling_signal() -> None:
    root = Account(1.0)
    child = root.child(0.5, name="child")
    assert child.ceiling == pytest.approx(0.5)
    child.debit(0.5)
    assert root.spent == pytest.approx(0.5) and child.signal.aborted and not root.signal.aborted
    child.debit(0.5)
    assert root.signal.aborted


def test_an_invocation_sees_its_own_reserve_as_room_and_others_as_taken() -> None:
    acct = Account(1.0)
    mine = acct.hold(0.3)
    acct.hold(0.5)
    assert acct.room() == pytest.approx(0.2)
    assert acct.room(mine.left) == pytest.approx(0.5)
    acct.debit(0.1)
    mine.consume(0.1)  # spend eats the reserve first, so the room does not shrink twice
    assert acct.room(mine.left) == pytest.approx(0.4)


def test_a_tier_crossed_by_accumulated_input_reprices_the_whole_call_live() -> None:
    acct = Account(100.0)
    hooks = AccountHooks(acct, lambda ref: TIERED)
    feed = hooks.open_call_meter("fake:m")
    first = tether.Usage(input_tokens=150_000)
    second = tether.Usage(input_tokens=100_000)
    feed(first)
    assert acct.spent == pytest.approx(cost_usd(first, TIERED))
    feed(second)
    feed(tether.Usage(output_tokens=1_000))
    whole = tether.Usage(input_tokens=250_000, output_tokens=1_000)
    assert acct.spent == pytest.approx(cost_usd(whole, TIERED), abs=1e-12)
    assert round(hooks.cost_usd, 2) == round(cost_usd(whole, TIERED), 2)
    assert cost_usd(whole, TIERED) == pytest.approx(250_000 * 6 / 1e6 + 1_000 * 22.5 / 1e6)


def test_the_clamp_is_tier_aware() -> None:
    hooks = AccountHooks(Account(1.0), lambda ref: TIERED)
    small = hooks.max_affordable_output_tokens("fake:m", 1_000)
    large = hooks.max_affordable_output_tokens("fake:m", 150_000)
    assert small == (1_000_000 - 1_000 * 3) * 1 // 15
    assert large is not None and large < small


def test_strict_pricing_refuses_an_unpriced_model() -> None:
    hooks = AccountHooks(Account(None), lambda ref: None, strict_pricing=True)
    with pytest.raises(tether.PricingError, match="no price row for 'fake:m'"):
        hooks.assert_priced_dispatch("fake:m")


def test_the_lifetime_spawn_cap() -> None:
    check_spawn_cap(499, 500, "r")
    with pytest.raises(tether.AdmissionRejectedError, match="lifetime cap is 500"):
        check_spawn_cap(500, 500, "r")
