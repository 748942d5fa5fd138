"""A ceiling stop is a fact: a resume replays it (nothing re-paid, nothing appended) until the money changes.

The soak's low-estimate race found both sides of the old rule ("a budget-stopped agent runs again"): a
resume after a kill that landed between an agent's stop and the run's settle started the agent over and
paid its completed turns again, and a resume of a settled `exhausted` run wrote a second settle.
"""

from __future__ import annotations

from typing import Any

import tether
from tether.contracts.entries import JournalEntry
from tether.contracts.messages import ChatRequest
from tether.testing import Reply, ToolCall

PRICE = tether.Price(input=10.0, output=20.0)
CEILING = 0.005


def script(request: ChatRequest) -> Reply:
    """Every turn costs 0.002 USD (100 in, 50 out); the tool loop never ends on its own."""
    turn = sum(1 for m in request.messages if m.role == "assistant")
    return Reply(tool_calls=[ToolCall("note", {"n": turn})], input_tokens=100, output_tokens=50)


@tether.tool
def note(n: int) -> str:
    """Take a note."""
    return f"noted {n}"


@tether.workflow(name="stopped")
async def stopped(ctx: tether.Ctx) -> Any:
    return await ctx.agent("work until the money runs out", tools=[note], est_cost=0.0)


def _unchained(entries: list[JournalEntry]) -> list[JournalEntry]:
    """Copies an append takes as new (the chain members tie an entry to its place in the first run)."""
    return [JournalEntry.model_validate({k: v for k, v in e.to_json_dict().items() if k not in ("prev", "checksum")})
            for e in entries]


def _settles(entries: list[JournalEntry]) -> list[JournalEntry]:
    return [e for e in entries if e.kind == "decision" and isinstance(e.value, dict)
            and e.value.get("decision") == "settle"]


async def test_a_ceiling_stop_replays_on_resume_before_and_after_the_settle(engine_for: Any) -> None:
    model = tether.models.fake("fake", script=script, prices={"m": PRICE}, output_floor=40)
    engine = engine_for(model)
    out = await engine.run(stopped, run_id="r", budget_usd=CEILING)
    assert out.status == "exhausted" and isinstance(out.error, tether.BudgetExhaustedError)
    assert "output floor" in str(out.error)
    entries = await engine.inspect("r")
    stop = next(e for e in entries if e.kind == "agent" and e.ref is not None)
    assert stop.status == "error" and stop.error is not None and stop.error["reason"] == "output-floor"
    assert stop.provider_calls == 2 and model.calls == 2

    # the run settled: a resume replays the agent's stop, sends nothing and appends nothing
    again = await engine.resume("r", stopped)
    assert again.status == "exhausted" and model.calls == 2
    assert again.replay.hits == 1 and again.replay.reruns == 0
    assert await engine.inspect("r") == entries

    # killed between the stop and the settle: the resume still pays nothing again, and settles once
    store = await engine.store()
    await store.append_many("cut", _unchained([e for e in entries if e not in _settles(entries)]))
    resumed = await engine.resume("cut", stopped)
    assert resumed.status == "exhausted" and model.calls == 2 and resumed.replay.reruns == 0
    after = await engine.inspect("cut")
    assert len(after) == len(entries) and [s.value["status"] for s in _settles(after)] == ["exhausted"]
    assert resumed.cost.total_usd == out.cost.total_usd


async def test_a_raised_ceiling_continues_the_stopped_agent_from_its_checkpoint(engine_for: Any) -> None:
    calls: list[int] = []

    def finishing(request: ChatRequest) -> Reply:
        turn = sum(1 for m in request.messages if m.role == "assistant")
        calls.append(turn)
        if turn >= 3:
            return Reply(text="done", input_tokens=100, output_tokens=50)
        return script(request)

    model = tether.models.fake("fake", script=finishing, prices={"m": PRICE}, output_floor=40)
    engine = engine_for(model)
    out = await engine.run(stopped, run_id="r", budget_usd=CEILING)
    assert out.status == "exhausted" and calls == [0, 1]
    assert out.cost.provider_calls == 2 and abs(out.cost.total_usd - 0.004) < 1e-9
    raised = await engine.resume("r", stopped, raise_budget_usd=1.0, raise_reason="test")
    assert raised.status == "ok" and raised.value == "done" and raised.replay.reruns == 1
    # the stop was decided again under the new ceiling; the agent went on from its last checkpoint: the provider
    # saw no turn twice, and the cost report counts each paid turn once (2 before the stop, 2 after)
    assert calls == [0, 1, 2, 3]
    assert raised.cost.provider_calls == 4 and abs(raised.cost.total_usd - 0.008) < 1e-9
    assert raised.cost.usage.input_tokens == 400 and raised.cost.usage.output_tokens == 200
    assert raised.cost.lost == [] and raised.cost.orphaned_usd == 0
    entries = await engine.inspect("r")
    runs = [e for e in entries if e.kind == "agent" and e.ref is None]
    assert len(runs) == 2 and runs[1].value["continues"] == runs[0].seq

    # a later resume replays the continuation (the stopped invocation is its history): nothing is sent again
    again = await engine.resume("r", stopped)
    assert again.status == "ok" and again.value == "done" and calls == [0, 1, 2, 3]
    assert again.replay.hits == 1 and again.replay.reruns == 0
    assert await engine.inspect("r") == entries
    assert again.cost.total_usd == raised.cost.total_usd and again.cost.provider_calls == 4


async def test_a_raise_too_small_stops_the_continuation_and_the_next_raise_continues_it(engine_for: Any) -> None:
    calls: list[int] = []

    def finishing(request: ChatRequest) -> Reply:
        turn = sum(1 for m in request.messages if m.role == "assistant")
        calls.append(turn)
        if turn >= 5:
            return Reply(text="done", input_tokens=100, output_tokens=50)
        return script(request)

    model = tether.models.fake("fake", script=finishing, prices={"m": PRICE}, output_floor=40)
    engine = engine_for(model)
    assert (await engine.run(stopped, run_id="r", budget_usd=CEILING)).status == "exhausted"
    short = await engine.resume("r", stopped, raise_budget_usd=0.009, raise_reason="a little")
    assert short.status == "exhausted" and calls[:3] == [0, 1, 2] and calls == list(range(len(calls)))
    done = await engine.resume("r", stopped, raise_budget_usd=1.0, raise_reason="enough")
    assert done.status == "ok" and calls == [0, 1, 2, 3, 4, 5]
    assert done.cost.provider_calls == 6 and abs(done.cost.total_usd - 0.012) < 1e-9
    again = await engine.resume("r", stopped)
    assert again.status == "ok" and calls == [0, 1, 2, 3, 4, 5] and again.replay.reruns == 0
