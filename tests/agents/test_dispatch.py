"""Dispatch: retries, failover, the output clamp, budget gates and the live stream cut."""

from __future__ import annotations

import pytest
from loopkit import HooksDouble, HostDouble, make_spec

from tether.agents.host import RetryPolicy
from tether.agents.loop import run_agent
from tether.contracts.errors import PricingError
from tether.models.fake import FakeModel, Reply


async def test_rate_limit_retry_honours_retry_after() -> None:
    fake = FakeModel(script=[Reply(error="rate-limit", retry_after_ms=3_000), Reply(text="ok")])
    host = HostDouble()
    result = await run_agent(make_spec(fake), host, HooksDouble())
    assert (result.status, result.output, result.turns) == ("ok", "ok", 1)
    assert fake.calls == 2
    assert len(host.sleeps) == 1 and host.sleeps[0] >= 3.0
    assert host.of_type("agent:end")[0].provider_calls == 2


async def test_transport_errors_retry_with_doubling_jittered_backoff() -> None:
    fake = FakeModel(script=[Reply(error="transport"), Reply(error="transport"), Reply(text="ok")])
    host = HostDouble()
    result = await run_agent(make_spec(fake), host, HooksDouble())
    assert result.status == "ok"
    first, second = host.sleeps
    assert 0.25 <= first <= 0.5 and 0.5 <= second <= 1.0


async def test_backoff_never_exceeds_the_cap() -> None:
    fake = FakeModel(script=[Reply(error="transport")] * 6 + [Reply(text="ok")])
    host = HostDouble()
    spec = make_spec(fake, retry=RetryPolicy(attempts=7, base_s=0.5, max_s=8.0))
    await run_agent(spec, host, HooksDouble())
    assert all(s <= 8.0 for s in host.sleeps) and max(host.sleeps) >= 4.0


async def test_failover_to_the_next_model_after_the_attempts_are_spent() -> None:
    primary = FakeModel("p", script=[Reply(error="transport")] * 3)
    backup = FakeModel("b", script=[Reply(text="from backup", input_tokens=5, output_tokens=2)])
    host = HostDouble()
    result = await run_agent(make_spec(primary, backup), host, HooksDouble())
    assert (result.status, result.output, result.served_by) == ("ok", "from backup", "b:m")
    assert (primary.calls, backup.calls, len(host.sleeps)) == (3, 1, 2)
    assert result.usage_by_model["b:m"].output_tokens == 2
    assert result.turns == 1


async def test_retries_exhausted_on_every_model_settle_error_with_the_last_kind() -> None:
    fake = FakeModel(script=[Reply(error="rate-limit")] * 3)
    result = await run_agent(make_spec(fake), HostDouble(), HooksDouble())
    assert result.status == "error" and result.error is not None
    assert (result.error.kind, result.error.retryable) == ("rate-limit", True)


async def test_a_non_retryable_error_ends_the_invocation_at_once() -> None:
    fake = FakeModel(script=[Reply(error="terminal", message="bad request"), Reply(text="x")])
    backup = FakeModel("b", script=[Reply(text="never")])
    result = await run_agent(make_spec(fake, backup), HostDouble(), HooksDouble())
    assert result.status == "error" and result.error is not None
    assert (result.error.kind, result.error.message, result.error.retryable) == (
        "terminal",
        "bad request",
        False,
    )
    assert (fake.calls, backup.calls) == (1, 0)


async def test_the_output_clamp_sends_the_affordable_amount() -> None:
    fake = FakeModel(script=[Reply(text="ok")], max_output_tokens=8_192)
    hooks = HooksDouble(affordable=123)
    await run_agent(make_spec(fake), HostDouble(), hooks)
    assert fake.requests[0].max_output_tokens == 123
    [(ref, est_input, planned)] = hooks.admitted
    assert (ref, planned) == ("fake:m", 123) and est_input > 0
    assert hooks.released == 1


@pytest.mark.parametrize(
    ("spec_max", "model_max", "affordable", "exposure", "floor", "sent"),
    [
        (4_096, 8_192, None, None, 1, 4_096),  # the spec's default
        (4_096, 1_000, None, None, 1, 1_000),  # never above the model's cap
        (4_096, 8_192, 5_000, 300, 1, 300),  # the exposure room shortens the turn
        (4_096, 8_192, 5_000, 50, 100, 4_096),  # an exposure answer under the floor is ignored
    ],
)
async def test_output_clamp_takes_the_minimum_of_every_bound(
    spec_max: int,
    model_max: int,
    affordable: int | None,
    exposure: int | None,
    floor: int,
    sent: int,
) -> None:
    fake = FakeModel(script=[Reply(text="ok")], max_output_tokens=model_max, output_floor=floor)
    hooks = HooksDouble(affordable=affordable, exposure=exposure)
    await run_agent(make_spec(fake, max_output_tokens=spec_max), HostDouble(), hooks)
    assert fake.requests[0].max_output_tokens == sent


async def test_an_unaffordable_output_floor_refuses_with_zero_provider_calls() -> None:
    fake = FakeModel(script=[Reply(text="never")], output_floor=200)
    hooks = HooksDouble(affordable=100)
    host = HostDouble()
    result = await run_agent(make_spec(fake), host, hooks)
    assert result.status == "error" and result.error is not None
    assert (result.error.kind, result.error.reason, result.error.stage) == (
        "budget",
        "output-floor",
        "loop",
    )
    assert (fake.calls, result.turns, hooks.admitted) == (0, 0, [])
    assert host.of_type("agent:end")[0].provider_calls == 0


async def test_a_before_turn_refusal_is_a_budget_error_with_its_reason() -> None:
    fake = FakeModel(script=[Reply(text="never")])
    hooks = HooksDouble(refuse_on_turn=1, refusal_reason="exposure-drained")
    result = await run_agent(make_spec(fake), HostDouble(), hooks)
    assert result.error is not None
    assert (result.status, result.error.kind, result.error.stage, result.error.reason) == (
        "error",
        "budget",
        "loop",
        "exposure-drained",
    )
    assert fake.calls == 0


async def test_pricing_errors_propagate_before_the_wire() -> None:
    fake = FakeModel(script=[Reply(text="never")])
    hooks = HooksDouble(pricing_error=PricingError("no price row for fake:m"))
    with pytest.raises(PricingError):
        await run_agent(make_spec(fake), HostDouble(), hooks)
    assert fake.calls == 0


async def test_the_meter_is_fed_every_delta_and_the_settle_remainder() -> None:
    fake = FakeModel(
        script=[Reply(text="abcdefgh" * 10, input_tokens=40, output_tokens=20, chunks=4)]
    )
    hooks = HooksDouble()
    result = await run_agent(make_spec(fake), HostDouble(), hooks)
    assert len(hooks.metered) == 5  # input first, then four output slices
    assert hooks.metered_total() == result.usage
    assert hooks.on_usage_calls == []


async def test_without_a_meter_on_usage_gets_the_increments() -> None:
    fake = FakeModel(script=[Reply(text="hello", input_tokens=7, output_tokens=2)])
    hooks = HooksDouble(with_meter=False)
    result = await run_agent(make_spec(fake), HostDouble(), hooks)
    assert hooks.metered == [] and hooks.metered_total() == result.usage
    assert [ref for ref, _ in hooks.on_usage_calls] == ["fake:m"]


async def test_a_budget_cut_mid_stream_settles_cancelled_with_approximate_usage() -> None:
    reply = Reply(text="x" * 400, input_tokens=50, output_tokens=100, chunks=10, latency_s=0.2)
    fake = FakeModel(script=[reply, Reply(text="never")])
    hooks = HooksDouble(cut_at_output=30)
    host = HostDouble()
    result = await run_agent(make_spec(fake), host, hooks)
    assert result.status == "cancelled" and result.error is not None
    assert (result.error.kind, result.error.stage) == ("budget", "loop")
    assert result.usage.approximate
    assert 30 <= result.usage.output_tokens < 100
    assert fake.calls == 1 and hooks.released == 1
    assert host.of_type("agent:error")[0].error.kind == "budget"


async def test_an_abort_while_the_model_is_streaming_cuts_the_stream() -> None:
    hooks = HooksDouble()

    def abort_on_first_text(type: str, event: object) -> None:
        if type == "agent:stream" and hooks.signal is not None:
            hooks.signal.abort("sibling overshoot")

    reply = Reply(text="y" * 200, input_tokens=10, output_tokens=50, chunks=5, latency_s=0.1)
    fake = FakeModel(script=[reply])
    result = await run_agent(make_spec(fake), HostDouble(on_emit=abort_on_first_text), hooks)
    assert result.status == "cancelled" and result.error is not None
    assert result.error.kind == "budget" and "sibling overshoot" in result.error.message
    assert result.usage.approximate and result.usage.output_tokens < 50


async def test_a_caller_cancellation_mid_stream_is_cancelled_without_a_budget_error() -> None:
    from tether.contracts.signal import Signal

    stop = Signal()

    def abort_on_first_text(type: str, event: object) -> None:
        if type == "agent:stream":
            stop.abort("user pressed stop")

    reply = Reply(text="z" * 200, input_tokens=10, output_tokens=50, chunks=5, latency_s=0.1)
    fake = FakeModel(script=[reply])
    host = HostDouble(on_emit=abort_on_first_text)
    result = await run_agent(make_spec(fake), host, HooksDouble(), signal=stop)
    assert (result.status, result.error) == ("cancelled", None)
    assert result.usage.approximate
