"""The in-flight exposure cap: holds per attempt, release, waiting, drained, and shortening a turn."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from loopkit import HostDouble, make_spec

import tether
from tether.agents.loop import run_agent
from tether.budget.accounts import Account
from tether.budget.exposure import ExposureGate
from tether.budget.hooks import AccountHooks
from tether.contracts.signal import Signal
from tether.models.fake import FakeModel, Reply

PRICE = tether.Price(input=10.0, output=20.0)


def hooks_for(gate: ExposureGate, account: Account) -> AccountHooks:
    return AccountHooks(account, lambda ref: PRICE, exposure=gate)


async def test_a_hold_is_live_during_the_call_and_released_after() -> None:
    account = Account(None)
    gate = ExposureGate(1.0, account)
    seen: list[float] = []

    def script(request: Any) -> Reply:
        seen.append(gate.live_usd())
        return Reply(text="ok", input_tokens=10, output_tokens=10)

    model = FakeModel("fake", script, prices={"m": PRICE})
    result = await run_agent(make_spec(model, max_output_tokens=100), HostDouble(), hooks_for(gate, account))
    assert result.status == "ok"
    assert seen and seen[0] > 0  # the turn's priced estimate was held while it ran
    assert gate.live_usd() == 0 and not gate.live  # released when the attempt settled


async def test_a_turn_that_overshoots_the_exposure_room_is_shortened_not_refused() -> None:
    account = Account(None)
    gate = ExposureGate(0.001, account)  # room for ~50 output tokens at 20 USD/M
    model = FakeModel("fake", [Reply(text="ok", input_tokens=1, output_tokens=1)], prices={"m": PRICE})
    result = await run_agent(make_spec(model, max_output_tokens=4_000), HostDouble(), hooks_for(gate, account))
    assert result.status == "ok"
    sent = model.requests[0].max_output_tokens
    assert sent is not None and 0 < sent < 50


async def test_without_the_wait_option_an_exposure_refusal_is_a_budget_error() -> None:
    account = Account(None)
    account.spent = 1.0
    gate = ExposureGate(1.0, account)
    model = FakeModel("fake", [Reply(text="never")], prices={"m": PRICE})
    result = await run_agent(make_spec(model), HostDouble(), hooks_for(gate, account))
    assert result.status == "error" and result.error is not None and result.error.kind == "budget"
    assert model.calls == 0


async def test_nothing_in_flight_to_wait_for_settles_exposure_drained_with_zero_attempts() -> None:
    account = Account(None)
    account.spent = 1.0
    gate = ExposureGate(1.0, account)
    model = FakeModel("fake", [Reply(text="never")], prices={"m": PRICE})
    result = await run_agent(make_spec(model, exposure_wait=True), HostDouble(), hooks_for(gate, account))
    assert result.status == "error" and result.error is not None
    assert (result.error.kind, result.error.reason) == ("budget", "exposure-drained")
    assert model.calls == 0


async def test_a_waiting_child_proceeds_when_a_hold_releases() -> None:
    account = Account(None)
    gate = ExposureGate(0.5, account)
    blocker = gate.admit(0.5)  # another dispatch holds all the room
    model = FakeModel("fake", [Reply(text="after release", input_tokens=1, output_tokens=1)], prices={"m": PRICE})
    task = asyncio.create_task(
        run_agent(make_spec(model, exposure_wait=True, max_output_tokens=100), HostDouble(), hooks_for(gate, account))
    )
    await asyncio.sleep(0.02)
    assert model.calls == 0  # parked on the exposure wait
    blocker.release()
    result = await task
    assert result.status == "ok" and result.output == "after release"


async def test_await_release_answers_released_drained_and_aborted() -> None:
    gate = ExposureGate(1.0, Account(None))
    assert await gate.await_release() == "drained"
    hold = gate.admit(0.1)
    waiting = asyncio.create_task(gate.await_release())
    await asyncio.sleep(0)
    hold.release()
    assert await waiting == "released"
    gate.admit(0.1)
    signal = Signal()
    aborting = asyncio.create_task(gate.await_release(signal))
    await asyncio.sleep(0)
    signal.abort("stop")
    assert await aborting == "aborted"
    with pytest.raises(tether.BudgetExhaustedError, match="in-flight exposure cap"):
        gate.admit(0.95)
