"""The agent loop over the fake model: answers, tool turns, stops, permissions and resume."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from loopkit import HooksDouble, HostDouble, Suspended, make_spec, tool_results

from tether.agents.loop import run_agent
from tether.agents.unbounded import UnboundedHooks
from tether.contracts.messages import ChatRequest, RawPart
from tether.contracts.protocols import BudgetHooks
from tether.contracts.signal import Signal
from tether.models.fake import FakeModel, Reply, ToolCall
from tether.tools.definition import ModelRetry, tool
from tether.tools.permissions import Permissions


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


async def test_a_text_reply_is_the_output() -> None:
    fake = FakeModel(script=[Reply(text="hello", input_tokens=10, output_tokens=3)])
    host = HostDouble()
    result = await run_agent(make_spec(fake, system="be brief"), host, HooksDouble())
    assert (result.status, result.output, result.turns) == ("ok", "hello", 1)
    assert result.served_by == "fake:m"
    assert result.usage.input_tokens == 10 and result.usage.output_tokens == 3
    assert result.usage_by_model == {"fake:m": result.usage}
    assert fake.requests[0].system == "be brief"
    assert host.events[0][0] == "agent:start"
    assert host.of_type("agent:end")[0].status == "ok"
    assert "".join(e.text for e in host.of_type("agent:stream")) == "hello"


async def test_unbounded_hooks_satisfy_the_protocol_and_run_an_agent() -> None:
    hooks = UnboundedHooks()
    assert isinstance(hooks, BudgetHooks)
    fake = FakeModel(script=[Reply(text="ok")])
    result = await run_agent(make_spec(fake), HostDouble(), hooks)
    assert result.status == "ok"


async def test_a_tool_loop_runs_over_several_turns_with_engine_minted_ids() -> None:
    fake = FakeModel(
        script=[
            Reply(tool_calls=[ToolCall("add", {"a": 1, "b": 2})]),
            Reply(
                tool_calls=[ToolCall("add", {"a": 3, "b": 4}), ToolCall("add", {"a": 5, "b": 6})]
            ),
            Reply(text="done"),
        ]
    )
    host = HostDouble()
    result = await run_agent(make_spec(fake, tools=[add]), host, HooksDouble())
    assert (result.status, result.output, result.turns) == ("ok", "done", 3)
    assert [(n, a, cid, o) for n, a, cid, o in host.executed] == [
        ("add", {"a": 1, "b": 2}, "call_1_0", 0),
        ("add", {"a": 3, "b": 4}, "call_2_0", 1),
        ("add", {"a": 5, "b": 6}, "call_2_1", 2),
    ]
    results = tool_results(fake.requests[2].messages)
    assert [r.content for r in results] == ["3", "7", "11"]
    assert fake.requests[0].tools[0].name == "add"
    assert len(host.of_type("tool:start")) == 3 and len(host.of_type("tool:end")) == 3
    assert host.stored is not None and host.stored.tool_calls == 3


async def test_consecutive_parallel_safe_calls_run_concurrently_in_call_order() -> None:
    barrier = asyncio.Barrier(2)
    order: list[str] = []

    @tool(parallel_safe=True)
    async def fetch(url: str) -> str:
        """Fetch a URL."""
        # Both calls must be inside at once, or the barrier times out: proof of concurrency.
        await asyncio.wait_for(barrier.wait(), timeout=2)
        order.append(url)
        return f"body of {url}"

    calls = [ToolCall("fetch", {"url": "a"}), ToolCall("fetch", {"url": "b"})]
    fake = FakeModel(script=[Reply(tool_calls=calls), Reply(text="ok")])
    result = await run_agent(make_spec(fake, tools=[fetch]), HostDouble(), HooksDouble())
    assert result.status == "ok"
    results = tool_results(fake.requests[1].messages)
    assert [(r.content, r.is_error) for r in results] == [
        ("body of a", False),
        ("body of b", False),
    ]
    assert sorted(order) == ["a", "b"]


async def test_a_non_parallel_call_splits_the_concurrent_groups() -> None:
    running = 0
    peak = 0

    @tool(parallel_safe=True)
    async def slow(n: int) -> int:
        """Slow."""
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await asyncio.sleep(0)
        running -= 1
        return n

    calls = [
        ToolCall("slow", {"n": 1}),
        ToolCall("add", {"a": 1, "b": 1}),
        ToolCall("slow", {"n": 3}),
    ]
    fake = FakeModel(script=[Reply(tool_calls=calls), Reply(text="ok")])
    await run_agent(make_spec(fake, tools=[slow, add]), HostDouble(), HooksDouble())
    assert peak == 1
    assert [r.content for r in tool_results(fake.requests[1].messages)] == ["1", "2", "3"]


async def test_tool_exceptions_and_invalid_args_become_error_results_and_the_agent_goes_on() -> (
    None
):
    @tool
    def explode() -> str:
        """Always fails."""
        raise ValueError("disk on fire")

    calls = [
        ToolCall("explode", {}),
        ToolCall("add", {"a": "x"}),
        ToolCall("nope", {}),
        ToolCall("add", {"a": 1, "b": 1}),
    ]
    fake = FakeModel(script=[Reply(tool_calls=calls), Reply(text="recovered")])
    host = HostDouble()
    result = await run_agent(make_spec(fake, tools=[explode, add]), host, HooksDouble())
    assert (result.status, result.output) == ("ok", "recovered")
    boom, invalid, unknown, fine = tool_results(fake.requests[1].messages)
    assert boom.is_error and "ValueError: disk on fire" in boom.content
    assert invalid.is_error and "a:" in invalid.content and "b: Field required" in invalid.content
    assert unknown.is_error and "unknown tool 'nope'" in unknown.content
    assert (fine.content, fine.is_error) == ("2", False)
    assert [name for name, *_ in host.executed] == ["explode", "add"]
    assert host.stored is not None and host.stored.tool_calls == 2


async def test_model_retry_message_becomes_the_tool_result() -> None:
    @tool
    def sqrt(x: float) -> float:
        """Square root."""
        if x < 0:
            raise ModelRetry("x must be non-negative; try again with abs(x)")
        return float(x**0.5)

    script = [
        Reply(tool_calls=[ToolCall("sqrt", {"x": -4})]),
        Reply(tool_calls=[ToolCall("sqrt", {"x": 4})]),
        Reply(text="2"),
    ]
    fake = FakeModel(script=script)
    result = await run_agent(make_spec(fake, tools=[sqrt]), HostDouble(), HooksDouble())
    assert result.output == "2"
    first = tool_results(fake.requests[1].messages)[0]
    assert (first.content, first.is_error) == (
        "x must be non-negative; try again with abs(x)",
        True,
    )
    assert tool_results(fake.requests[2].messages)[1].content == "2"  # canonical JSON number


async def test_max_turns_is_checked_before_dispatch() -> None:
    counter = iter(range(1000))

    def script(request: ChatRequest) -> Reply:
        return Reply(tool_calls=[ToolCall("add", {"a": next(counter), "b": 0})])

    fake = FakeModel(script=script)
    host = HostDouble()
    result = await run_agent(make_spec(fake, tools=[add], max_turns=3), host, HooksDouble())
    assert (result.status, result.turns) == ("limit", 3)
    assert fake.calls == 3
    assert host.of_type("agent:end")[0].reason == "max-turns"


async def test_repeating_the_same_tool_batch_settles_limit_for_no_progress() -> None:
    same = Reply(tool_calls=[ToolCall("add", {"a": 1, "b": 1})])
    fake = FakeModel(script=[same] * 10)
    host = HostDouble()
    result = await run_agent(make_spec(fake, tools=[add], no_progress_turns=3), host, HooksDouble())
    assert result.status == "limit"
    assert fake.calls == 4  # the first batch is progress; three repeats are not
    assert len(host.executed) == 3
    assert host.of_type("agent:end")[0].reason == "no-progress"


async def test_a_deny_rule_gives_an_error_result_and_never_runs_the_tool() -> None:
    @tool
    def delete_everything() -> str:
        """Dangerous."""
        raise AssertionError("must not run")

    fake = FakeModel(script=[Reply(tool_calls=[ToolCall("delete_everything")]), Reply(text="ok")])
    spec = make_spec(fake, tools=[delete_everything], permissions=Permissions(deny=["delete_*"]))
    host = HostDouble()
    result = await run_agent(spec, host, HooksDouble())
    assert result.status == "ok"
    denied = tool_results(fake.requests[1].messages)[0]
    assert (
        denied.is_error and "permission denied" in denied.content and "delete_*" in denied.content
    )
    assert host.executed == []


@tool(needs_approval=True)
def send_email(to: str) -> str:
    """Send an email."""
    return f"sent to {to}"


async def test_ask_saves_a_checkpoint_before_asking_the_host() -> None:
    fake = FakeModel(
        script=[Reply(tool_calls=[ToolCall("send_email", {"to": "x@y"})]), Reply("ok")]
    )
    host = HostDouble(approvals={"send_email": True})
    result = await run_agent(make_spec(fake, tools=[send_email]), host, HooksDouble())
    assert result.status == "ok"
    [(name, args, checkpoint)] = host.approve_calls
    assert (name, args) == ("send_email", {"to": "x@y"})
    assert checkpoint is not None and checkpoint.pending is not None
    assert checkpoint.pending.calls[0].name == "send_email"
    assert host.executed[0][:2] == ("send_email", {"to": "x@y"})


async def test_anything_but_an_explicit_allow_is_a_deny() -> None:
    fake = FakeModel(
        script=[Reply(tool_calls=[ToolCall("send_email", {"to": "x@y"})]), Reply("ok")]
    )
    host = HostDouble(approvals={"send_email": False})
    await run_agent(make_spec(fake, tools=[send_email]), host, HooksDouble())
    refused = tool_results(fake.requests[1].messages)[0]
    assert refused.is_error and "not approved" in refused.content
    assert host.executed == []


async def test_resume_continues_the_same_turn_without_rerunning_executed_tools() -> None:
    calls = [ToolCall("add", {"a": 1, "b": 1}), ToolCall("send_email", {"to": "x@y"})]
    fake = FakeModel(script=[Reply(tool_calls=calls), Reply(text="all done")])
    spec = make_spec(fake, tools=[add, send_email])

    first = HostDouble()  # no scripted answer: approve suspends
    with pytest.raises(Suspended):
        await run_agent(spec, first, HooksDouble())
    assert [name for name, *_ in first.executed] == ["add"]
    checkpoint = first.stored
    assert checkpoint is not None and checkpoint.pending is not None
    assert set(checkpoint.pending.results) == {"call_1_0"}

    second = HostDouble(checkpoint=checkpoint, approvals={"send_email": True})
    result = await run_agent(spec, second, HooksDouble())
    assert (result.status, result.output, result.turns) == ("ok", "all done", 2)
    assert [(n, cid, o) for n, _, cid, o in second.executed] == [("send_email", "call_1_1", 1)]
    assert fake.calls == 2  # the model turn that asked for the tools was not paid again
    results = tool_results(fake.requests[1].messages)
    assert [r.content for r in results] == ["2", "sent to x@y"]
    assert second.of_type("agent:start")[0].resumed is True


async def test_a_checkpoint_holds_the_batch_before_tools_run() -> None:
    seen: list[Any] = []

    @tool
    def probe() -> str:
        """Look at the last checkpoint."""
        seen.append(host.stored)
        return "ok"

    fake = FakeModel(script=[Reply(tool_calls=[ToolCall("probe")]), Reply(text="done")])
    host = HostDouble()
    await run_agent(make_spec(fake, tools=[probe]), host, HooksDouble())
    assert seen[0].pending.calls[0].id == "call_1_0" and seen[0].turns == 1


async def test_cancellation_signal_settles_cancelled() -> None:
    signal = Signal()
    signal.abort("user pressed stop")
    fake = FakeModel(script=[Reply(text="never")])
    result = await run_agent(make_spec(fake), HostDouble(), HooksDouble(), signal=signal)
    assert (result.status, fake.calls) == ("cancelled", 0)


async def test_raw_parts_travel_only_to_their_own_family() -> None:
    a = FakeModel(
        "a",
        script=[
            Reply(tool_calls=[ToolCall("add", {"a": 1, "b": 1})], raw=[{"thinking": "hmm"}]),
            Reply(error="transport"),
        ],
    )
    b = FakeModel("b", script=[Reply(text="done")])
    spec = make_spec(a, b, tools=[add], retry=_one_attempt())
    result = await run_agent(spec, HostDouble(), HooksDouble())
    assert (result.status, result.served_by) == ("ok", "b:m")

    def raw_parts(request: ChatRequest) -> list[RawPart]:
        return [p for m in request.messages for p in m.parts if isinstance(p, RawPart)]

    assert [p.family for p in raw_parts(a.requests[1])] == ["a"]
    assert raw_parts(b.requests[0]) == []


def _one_attempt() -> Any:
    from tether.agents.host import RetryPolicy

    return RetryPolicy(attempts=1)


class _Crash(BaseException):
    """Stands in for a process dying mid-tool (not an `Exception`, so no tool result catches it)."""


async def test_a_crash_mid_tool_resumes_without_paying_the_model_turn_again() -> None:
    crashes = [True]

    @tool
    def flaky() -> str:
        """Dies the first time."""
        if crashes.pop() if crashes else False:
            raise _Crash
        return "fine"

    fake = FakeModel(script=[Reply(tool_calls=[ToolCall("flaky")]), Reply(text="done")])
    spec = make_spec(fake, tools=[flaky])
    first = HostDouble()
    with pytest.raises(_Crash):
        await run_agent(spec, first, HooksDouble())
    second = HostDouble(checkpoint=first.stored)
    result = await run_agent(spec, second, HooksDouble())
    assert (result.status, result.output, fake.calls) == ("ok", "done", 2)
    assert second.executed[0][2:] == ("call_1_0", 0)  # same call id and ordinal as the lost attempt


async def test_a_checkpoint_of_an_unknown_version_is_not_trusted() -> None:
    from tether.agents.state import LoopState

    stale = LoopState.start("old prompt").model_copy(update={"version": 999, "turns": 5})
    fake = FakeModel(script=[Reply(text="fresh")])
    result = await run_agent(make_spec(fake), HostDouble(checkpoint=stale), HooksDouble())
    assert (result.output, result.turns) == ("fresh", 1)
    assert fake.requests[0].messages[-1].text_content == "hi"
