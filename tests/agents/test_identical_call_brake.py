"""The identical-call brake in the loop: the old no-progress guard carries the typed stop, `max_identical_tool_calls`
counts repeats anywhere in the invocation, and a brake saved in the checkpoint stops a resumed invocation again
without a model call."""

from __future__ import annotations

from loopkit import HooksDouble, HostDouble, make_spec

from tether.agents.loop import run_agent
from tether.contracts.stops import StopReason
from tether.models.fake import FakeModel, Reply, ToolCall
from tether.tools.definition import tool


@tool
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


async def test_no_progress_is_the_typed_identical_call_brake_with_its_evidence() -> None:
    fake = FakeModel(script=[Reply(tool_calls=[ToolCall("add", {"a": 1, "b": 1})])] * 10)
    host = HostDouble()
    result = await run_agent(make_spec(fake, tools=[add], no_progress_turns=3), host, HooksDouble())
    assert result.status == "limit" and result.error is not None and fake.calls == 4
    assert result.error.kind == "budget" and result.error.reason is StopReason.IDENTICAL_TOOL_CALLS
    assert result.error.evidence == {"tool": "add", "args": {"a": 1, "b": 1}, "count": 4, "limit": 3,
                                     "consecutive": True}


async def test_a_brake_in_the_checkpoint_stops_the_resumed_invocation_without_a_model_call() -> None:
    script = [Reply(tool_calls=[ToolCall("add", {"a": 1, "b": n % 2})]) for n in range(10)]
    fake = FakeModel(script=script)
    host = HostDouble()
    spec = make_spec(fake, tools=[add], max_identical_tool_calls=2)
    first = await run_agent(spec, host, HooksDouble())
    assert first.error is not None and first.error.reason is StopReason.IDENTICAL_TOOL_CALLS and fake.calls == 5
    assert host.stored is not None and host.stored.braked is not None
    again = await run_agent(spec, host, HooksDouble())  # a crash before the terminal: the resume reads the brake
    assert again.error == first.error and fake.calls == 5
