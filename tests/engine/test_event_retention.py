"""A run's stream keeps every event for late subscribers in a form the cycle collector does not walk (issue 48)."""

from __future__ import annotations

import asyncio
import gc

from tether.contracts.events import AgentEnd, AgentStart, BudgetDraw, ModelEnd
from tether.contracts.usage import Usage
from tether.engine.events import EventStream


def _emit(stream: EventStream, n: int) -> None:
    for i in range(1, n + 1):
        usage = Usage(input_tokens=5, output_tokens=1)
        stream.emit(AgentStart(agent_id=i, depth=1, prompt=f"task {i}"))
        stream.emit(ModelEnd(agent_id=i, call=1, model="lat:m", provider="lat", status="ok", usage=usage))
        stream.emit(BudgetDraw(agent_id=i, step=1, tokens=6))
        stream.emit(AgentEnd(agent_id=i, status="ok", output="ok", usage=usage, turns=1))


def _tracked() -> int:
    gc.collect()
    gc.collect()
    return len(gc.get_objects())


def test_kept_events_add_no_tracked_objects_per_agent() -> None:
    small, large = EventStream("r1"), EventStream("r2")
    base = _tracked()
    _emit(small, 500)
    at_500 = _tracked() - base
    _emit(large, 1000)
    at_1000 = _tracked() - base - at_500
    assert (at_1000 - at_500) / 500 <= 0.1  # four events per agent, none of them walked by a full collection


def test_late_subscriber_sees_equal_events() -> None:
    stream = EventStream("run-1")
    live: list[object] = []
    stream.on("*", live.append)
    _emit(stream, 3)
    stream.close()
    assert stream.events == live
    end = stream.events[-1]
    assert isinstance(end, AgentEnd) and end.usage == Usage(input_tokens=5, output_tokens=1)
    assert end.usage.model_fields_set == {"input_tokens", "output_tokens"} and end.seq == 12

    async def late() -> list[object]:
        return [event async for event in stream.subscribe()]

    assert asyncio.run(late()) == live
