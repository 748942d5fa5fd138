"""The `Context` compactor and the tool-result cap against the loop-seam doubles (the engine's side:
tests/engine/test_context.py and test_context_overflow.py)."""

from __future__ import annotations

import pytest
from loopkit import HooksDouble, JournalHost, make_spec

import tether
from tether.agents.compaction import COMPACTION_DECISION, Compactor
from tether.agents.state import LoopState, PendingBatch
from tether.agents.tool_budget import ToolBudgetGate
from tether.agents.toolcalls import TOOL_RESULT_CUT, ToolRunner
from tether.contracts.messages import Message, ToolCallPart, ToolResultPart
from tether.models.fake import FakeModel, Reply

BULK = "word " * 400  # ~500 tokens


def conversation(exchanges: int) -> list[Message]:
    messages = [Message.text("user", "do the work")]
    for i in range(1, exchanges + 1):
        call = ToolCallPart(id=f"call_{i}_0", name="probe", args={"n": i})
        messages.append(Message(role="assistant", parts=(call,)))
        messages.append(Message(role="tool", parts=(ToolResultPart(call_id=call.id, name="probe", content=BULK),)))
    return messages


def compactor(model: FakeModel, host: JournalHost, state: LoopState, **policy: object) -> Compactor:
    context = tether.Context(max_input_tokens=1_500, keep_last=2, **policy)  # type: ignore[arg-type]
    spec = make_spec(model, context=context)
    return Compactor(spec, context, host, HooksDouble(), state, None)


async def test_a_summary_is_decided_once_and_a_resume_rebuilds_the_same_messages_without_a_call() -> None:
    live_model = FakeModel("fake", [Reply(text="probes 1-4 found words", output_tokens=6)])
    host, state = JournalHost(), LoopState(messages=conversation(6))
    assert await compactor(live_model, host, state, strategy="summarize", summary_max_tokens=64).fit() is None
    assert live_model.calls == 1 and host.purposes == [(1, "compaction")]
    assert [m.role for m in state.messages] == ["user", "user", "assistant", "tool", "assistant", "tool"]
    assert "probes 1-4 found words" in state.messages[1].text_content
    assert state.messages[2].tool_calls[0].id == "call_5_0"  # the last two exchanges, whole
    (decided,) = host.decided(COMPACTION_DECISION)
    assert (decided["n"], decided["cut"], decided["calls"]) == (1, 9, 1)

    replay_model = FakeModel("fake", [])  # any call would find no reply
    replayed = LoopState(messages=conversation(6))
    assert await compactor(replay_model, host.resumed(), replayed, strategy="summarize", summary_max_tokens=64).fit() is None
    assert replay_model.calls == 0 and replayed.messages == state.messages and replayed.compactions == 1
    assert len(host.decided(COMPACTION_DECISION)) == 1


async def test_nothing_is_compacted_under_the_limit_nor_when_only_the_last_exchange_is_left() -> None:
    model = FakeModel("fake", [])
    host = JournalHost()
    short = LoopState(messages=conversation(1))
    assert await compactor(model, host, short).fit() is None
    huge = LoopState(messages=conversation(1))
    huge.messages[2] = Message(role="tool", parts=(ToolResultPart(call_id="call_1_0", name="probe", content=BULK * 4),))
    assert await compactor(model, host, huge).fit() is None  # over the limit, and nothing older to drop
    assert (len(short.messages), len(huge.messages), host.decided(COMPACTION_DECISION)) == (3, 3, [])


async def test_fewer_exchanges_are_kept_when_the_kept_ones_alone_do_not_fit() -> None:
    host = JournalHost()
    state = LoopState(messages=conversation(3))
    state.messages[6] = Message(role="tool", parts=(ToolResultPart(call_id="call_3_0", name="probe", content=BULK * 2),))
    assert await compactor(FakeModel("fake", []), host, state).fit() is None
    (decided,) = host.decided(COMPACTION_DECISION)
    assert (decided["cut"], decided["strategy"], decided["summary"], decided["calls"]) == (5, "drop-oldest", None, 0)
    assert [m.role for m in state.messages] == ["user", "user", "assistant", "tool"]  # keep_last=2, one fits
    assert "4 earlier messages were dropped" in state.messages[1].text_content


@pytest.mark.parametrize("journaled", [False, True])
async def test_a_cut_tool_result_is_journaled_whole_once(journaled: bool) -> None:
    whole = "x" * 5_000
    call = ToolCallPart(id="call_1_0", name="dump", args={})
    host = JournalHost(journal=[(TOOL_RESULT_CUT, {"call_id": "call_1_0", "content": whole})] if journaled else None)

    @tether.tool
    def dump() -> str:
        """Dump."""
        return whole

    state = LoopState(messages=[Message.text("user", "dump")])
    state.pending = PendingBatch(turn=1, calls=[call], first_ordinal=0)
    spec = make_spec(FakeModel("fake", []), tools=[dump], context=tether.Context(max_tool_result_tokens=100))
    await ToolRunner(spec, host, state, ToolBudgetGate(None, host, HooksDouble(), state)).run_pending()
    shown = state.messages[-1].parts[0]
    assert isinstance(shown, ToolResultPart) and len(shown.content) < 600 and "4600 of 5000 characters" in shown.content
    assert [p["content"] for p in host.decided(TOOL_RESULT_CUT)] == [whole]  # a re-run call journals no second copy
    assert host.appended == ([] if journaled else [TOOL_RESULT_CUT])
