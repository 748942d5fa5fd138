"""Typed events: one model per type, the figures they carry, and the journal they agree with."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from obskit import PRICE, answered, engine_for, lookup, study, user_text
from pydantic import BaseModel, ValidationError

import tether
from tether.contracts.events import EVENT_ADAPTER, EVENT_TYPES, BaseEvent
from tether.contracts.messages import ChatRequest
from tether.engine.events import EventStream
from tether.events import (
    AgentEnd,
    AgentStream,
    BudgetDraw,
    BudgetUpdate,
    ModelEnd,
    RunStart,
    Spawn,
    SpawnRefused,
    ToolEnd,
)
from tether.testing import Reply, ToolCall


class Verdict(BaseModel):
    score: int


@tether.tool(needs_approval=True)
def deploy(target: str) -> str:
    """Deploy somewhere (a human approves)."""
    return f"deployed {target}"


def kitchen_script(request: ChatRequest) -> Reply:
    """One script for every path the kitchen-sink workflows take."""
    prompt, tools = user_text(request), {t.name for t in request.tools}
    if "spawn_agent" in tools and not answered(request):
        calls = [ToolCall("spawn_agent", {"goal": f"child {i}"}) for i in range(3)]
        return Reply(tool_calls=calls, input_tokens=50, output_tokens=10)
    if prompt.startswith("score") and sum(m.role == "tool" for m in request.messages) == 0:
        return Reply(tool_calls=[ToolCall("emit_result", {"score": "high"})], input_tokens=30, output_tokens=5)
    if prompt.startswith("score"):
        return Reply(tool_calls=[ToolCall("emit_result", {"score": 7})], input_tokens=30, output_tokens=5)
    if prompt.startswith("fail"):
        return Reply(error="terminal", message="the provider gave up")
    if prompt.startswith("deploy") and not answered(request):
        return Reply(tool_calls=[ToolCall("deploy", {"target": "prod"})], input_tokens=20, output_tokens=5)
    if prompt.startswith("research") and not answered(request):
        return Reply(tool_calls=[ToolCall("lookup", {"topic": "tides"})], input_tokens=40, output_tokens=8)
    return Reply(text=f"done: {prompt[:30]}", input_tokens=40, output_tokens=8, chunks=2)


@tether.workflow(name="kid")
async def kid(ctx: tether.Ctx) -> Any:
    return await ctx.agent("kid task", label="kid")


@tether.workflow(name="sink")
async def sink(ctx: tether.Ctx) -> Any:
    async with ctx.phase("all"):
        ctx.log("info", "starting", n=1)
        pair = await ctx.parallel([lambda: ctx.agent("one", label="one"), lambda: ctx.agent("two", label="two")])
        found = await ctx.agent("research tides", tools=[lookup], label="researcher")
        verdict = await ctx.agent("score it", output=Verdict, label="judge")
        child = await ctx.workflow(kid)
        free = await ctx.agent("free model", model="free:x", label="free")
        failed = await ctx.agent("fail now", on_error="none", label="failing")
        boss = await ctx.orchestrate("plan the work", label="boss")
    return [pair, found, verdict.score, child, free, failed, boss]


@tether.workflow(name="waits")
async def waits(ctx: tether.Ctx) -> Any:
    return await ctx.parallel([lambda: ctx.await_external("review"),
                               lambda: ctx.agent("deploy it", tools=[deploy], label="deployer")])


@tether.workflow(name="broke")
async def broke(ctx: tether.Ctx) -> Any:
    return await ctx.agent("too dear", est_cost=5.0, label="dear")


def kitchen(tmp_path: Path) -> tether.Engine:
    priced = tether.models.fake("fake", script=kitchen_script, prices={"m": PRICE})
    free = tether.models.fake("free", script=kitchen_script)
    return tether.Engine(models=[priced, free], routing={"loop": "fake:m"}, store=f"sqlite:///{tmp_path}/t.db")


async def collect(handle: tether.RunHandle) -> list[tether.Event]:
    return [event async for event in handle.events]


async def test_every_event_type_is_emitted_as_its_own_validated_model(tmp_path: Path) -> None:
    engine = kitchen(tmp_path)
    containment = tether.Containment(max_agents=10, max_concurrent=1, max_depth=2)
    runs = [
        engine.start(sink, run_id="sink", budget_usd=5.0, containment=containment, allow_unpriced=True),
        engine.start(waits, run_id="waits"),
        engine.start(broke, run_id="broke", budget_usd=0.01),
    ]
    seen: list[tether.Event] = []
    for handle in runs:
        seen += await collect(handle)
        await handle
    await engine.close()
    assert [(await h).status for h in runs] == ["ok", "suspended", "exhausted"]
    assert {e.type for e in seen} == set(EVENT_TYPES), "every event type is exercised"
    for event in seen:
        assert type(event) is EVENT_TYPES[event.type]
        assert EVENT_ADAPTER.validate_json(event.model_dump_json()) == event  # the union round-trips
        assert event.run_id in ("sink", "waits", "broke") and event.seq > 0 and event.ts > 0
    seqs = [e.seq for e in seen if e.run_id == "sink"]
    assert seqs == list(range(1, len(seqs) + 1))


def test_every_field_of_every_event_model_is_documented() -> None:
    assert BaseEvent.field_infos()["type"].description  # each event narrows `type` to its literal
    for cls in EVENT_TYPES.values():
        schema = cls.adapter().json_schema()
        undocumented = [name for name, spec in schema["properties"].items()
                        if not spec.get("description") and name != "type"]
        assert not undocumented, f"{cls.__name__} fields without a description: {undocumented}"
        assert cls.__doc__


def test_every_event_field_is_keyword_only_in_its_validator_too() -> None:
    # The signature says keyword-only; pydantic takes a documented field (a `Field` default) for positional unless
    # the `Field` says so itself, and then validates every construction through its slower positional path.
    for cls in EVENT_TYPES.values():
        with pytest.raises(ValidationError) as caught:
            cls("r", 3)
        assert {e["type"] for e in caught.value.errors()} >= {"unexpected_positional_argument"}, cls.__name__


async def test_agent_end_of_a_priced_agent_carries_the_journaled_cost(tmp_path: Path) -> None:
    engine, _ = engine_for(tmp_path)
    handle = engine.start(study, run_id="r", budget_usd=1.0)
    ends: list[AgentEnd] = []
    handle.on(AgentEnd, ends.append)
    out = await handle
    journal = await engine.inspect("r")
    await engine.close()
    terminals = {e.agent_id: e for e in journal if e.kind == "agent" and e.ref is not None}
    assert len(ends) == 2
    for end in ends:
        assert end.cost_usd > 0
        assert end.cost_usd == terminals[end.agent_id].cost_usd
        assert end.usage == terminals[end.agent_id].usage
        assert end.status == "ok" and end.finish_reason == "stop" and end.served_by == "fake:m"
    assert ends[0].turns == 2 and ends[0].output == "answer to research tides the-p"
    assert sum(e.cost_usd for e in ends) == pytest.approx(out.cost.total_usd)


async def test_the_tool_budget_on_agent_end_is_a_tool_budget_summary(tmp_path: Path) -> None:
    engine, _ = engine_for(tmp_path)

    @tether.workflow(name="budgeted")
    async def budgeted(ctx: tether.Ctx) -> Any:
        return await ctx.agent("research tides", tools=[lookup], tool_budget=tether.ToolBudget(max_tool_calls=3))

    handle = engine.start(budgeted, run_id="b")
    ends: list[AgentEnd] = []
    handle.on("agent:end", ends.append)
    await handle
    await engine.close()
    assert isinstance(ends[0].tool_budget, tether.ToolBudgetSummary)
    assert (ends[0].tool_budget.used, ends[0].tool_budget.cap) == (1, 3)


async def test_agent_stream_carries_the_usage_and_cost_so_far(tmp_path: Path) -> None:
    engine, _ = engine_for(tmp_path, lambda r: Reply(text="x" * 400, input_tokens=100, output_tokens=200, chunks=8))

    @tether.workflow(name="one")
    async def one(ctx: tether.Ctx) -> Any:
        return await ctx.agent("talk", label="talker")

    handle = engine.start(one, run_id="s", budget_usd=1.0)
    events = await collect(handle)
    await engine.close()
    streams = [e for e in events if isinstance(e, AgentStream)]
    end = next(e for e in events if isinstance(e, AgentEnd))
    assert len(streams) == 8
    outputs = [s.usage.output_tokens for s in streams]
    assert outputs == sorted(outputs) and streams[0].usage.input_tokens == 100
    assert 0 < streams[0].cost_usd < streams[-1].cost_usd <= end.cost_usd
    assert {s.call for s in streams} == {1} and {s.agent_id for s in streams} == {end.agent_id}


async def test_budget_updates_carry_spent_held_ceiling_and_remaining_for_usd_and_tokens(tmp_path: Path) -> None:
    engine, _ = engine_for(tmp_path)
    handle = engine.start(study, run_id="u", budget_usd=1.0,
                          containment=tether.Containment(max_agents=5, max_concurrent=2, max_depth=1, max_tokens=5_000))
    events = await collect(handle)
    out = await handle
    await engine.close()
    updates = [e for e in events if isinstance(e, BudgetUpdate)]
    assert updates and all(u.model == "fake:m" and u.usd > 0 and u.agent_id in (1, 2) for u in updates)
    last = updates[-1]
    assert last.ceiling_usd == 1.0 and last.ceiling_tokens == 5_000
    assert last.spent_usd == pytest.approx(out.cost.total_usd)
    assert last.remaining_usd is not None and last.remaining_usd <= 1.0 - last.spent_usd - last.held_usd + 1e-9
    assert last.spent_tokens == out.usage.input_tokens + out.usage.output_tokens
    assert last.remaining_tokens is not None and last.remaining_tokens <= 5_000 - last.spent_tokens
    assert sum(u.usd for u in updates) == pytest.approx(out.cost.total_usd)


async def test_spawn_and_refusal_events_carry_the_agent_event_row(tmp_path: Path) -> None:
    engine = kitchen(tmp_path)

    @tether.workflow(name="boss")
    async def boss(ctx: tether.Ctx) -> Any:
        return await ctx.orchestrate("plan the work", label="boss")

    handle = engine.start(boss, run_id="t", containment=tether.Containment(max_agents=3, max_concurrent=3,
                                                                               max_depth=2))
    events = await collect(handle)
    await handle
    rows = await engine.agent_events("t")
    await engine.close()
    facts = [e for e in events if isinstance(e, Spawn | SpawnRefused)]
    assert [e.type for e in facts].count("spawn") == 2 and [e.type for e in facts].count("spawn:refused") == 1
    assert [f.row() for f in facts if isinstance(f, Spawn)] == [r for r in rows if r.kind == "spawn"]
    refused = next(f for f in facts if isinstance(f, SpawnRefused))
    assert refused.row() == next(r for r in rows if r.kind == "spawn_refused")
    assert refused.detail == "agents" and refused.goal.startswith("child ")


async def test_draw_events_equal_the_journaled_budget_draw_rows(tmp_path: Path) -> None:
    engine, _ = engine_for(tmp_path)
    handle = engine.start(study, run_id="d", budget_usd=1.0)
    events = await collect(handle)
    await handle
    rows = await engine.agent_events("d")
    await engine.close()
    draws = [e.row() for e in events if isinstance(e, BudgetDraw)]
    assert len(draws) == 3 and draws == [r for r in rows if r.kind == "budget_draw"]


async def test_a_replayed_run_marks_its_events_and_shows_every_spawned_child(tmp_path: Path) -> None:
    engine = kitchen(tmp_path)

    @tether.workflow(name="boss")
    async def boss(ctx: tether.Ctx) -> Any:
        return await ctx.orchestrate("plan the work", label="boss")

    live = await collect(engine.start(boss, run_id="rp", budget_usd=1.0))
    resumed = await engine.start_resume("rp", boss)
    replayed = await collect(resumed)
    out = await resumed
    await engine.close()
    assert out.replay.hits == 1 and out.replay.misses == 0
    start = next(e for e in replayed if isinstance(e, RunStart))
    assert start.resumed and start.spent_usd == pytest.approx(out.cost.total_usd) and start.ceiling_usd == 1.0
    agent_events = [e for e in replayed if e.type.startswith(("agent:", "model:", "spawn"))]
    assert agent_events and all(e.replayed for e in agent_events)
    live_ends = {e.agent_id: e for e in live if isinstance(e, AgentEnd)}
    replay_ends = {e.agent_id: e for e in replayed if isinstance(e, AgentEnd)}
    assert set(replay_ends) == set(live_ends) == {1, 2, 3, 4}, "the orchestrator and all three children"
    for agent_id, end in replay_ends.items():
        assert end.cost_usd == pytest.approx(live_ends[agent_id].cost_usd)
        assert end.usage == live_ends[agent_id].usage and end.depth == live_ends[agent_id].depth
    models = [e for e in replayed if isinstance(e, ModelEnd)]
    assert {m.agent_id for m in models} == {1, 2, 3, 4} and sum(m.calls for m in models if m.agent_id == 1) == 2
    assert [e.type for e in replayed if e.type.startswith("spawn")] == ["spawn"] * 3


async def test_an_event_is_validated_where_it_is_built_and_emitted_once() -> None:
    with pytest.raises(ValidationError):
        AgentEnd(status="okay", cost_usd="free")  # type: ignore[arg-type]  # (the engine's own lean path took this)
    with pytest.raises(ValidationError):
        AgentEnd(status="ok", bogus=1)  # type: ignore[call-arg]
    built = AgentEnd(status="ok", cost_usd=0.5, tool_budget={"used": 1, "cap": 2})  # type: ignore[arg-type]
    assert isinstance(built.tool_budget, tether.ToolBudgetSummary)
    stream = EventStream("r")
    emitted = stream.emit(built)
    assert emitted is built and (built.run_id, built.seq) == ("r", 1) and built.ts > 0 and built.span_id == "run"
    with pytest.raises(ValueError, match="emitted already"):
        stream.emit(built)
    assert stream.events == [built]


async def test_handle_on_takes_a_type_pattern_or_an_event_class(tmp_path: Path) -> None:
    engine, _ = engine_for(tmp_path)
    handle = engine.start(study, run_id="o")
    by_pattern: list[BaseEvent] = []
    by_class: list[ToolEnd] = []
    everything: list[BaseEvent] = []
    handle.on("tool:*", by_pattern.append)
    handle.on(ToolEnd, by_class.append)
    handle.on(BaseEvent, everything.append)
    await handle
    await engine.close()
    assert [e.type for e in by_pattern] == ["tool:start", "tool:end"]
    assert len(by_class) == 1 and by_class[0].tool == "lookup" and by_class[0].result == "facts about tides"
    assert everything[0].type == "run:start" and everything[-1].type == "run:end"


async def test_a_failing_callback_never_breaks_the_run_and_is_logged(tmp_path: Path, caplog: Any) -> None:
    engine, _ = engine_for(tmp_path)
    handle = engine.start(study, run_id="f")

    def broken(event: BaseEvent) -> None:
        raise RuntimeError("boom")

    handle.on("run:end", broken)
    out = await handle
    await engine.close()
    assert out.status == "ok"
    assert any("event callback failed on run:end" in r.getMessage() for r in caplog.records if r.name == "tether")


async def test_warnings_go_to_the_tether_logger(tmp_path: Path, caplog: Any) -> None:
    import logging
    import warnings

    with caplog.at_level(logging.WARNING, logger="tether"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        engine = kitchen(tmp_path)
        memory = tether.Engine(store="memory://")
        await memory.store()

        @tether.workflow(name="free")
        async def free(ctx: tether.Ctx) -> Any:
            return await ctx.agent("free model", model="free:x")

        handle = engine.start(free, run_id="w", budget_usd=1.0, allow_unpriced=True)
        warned: list[tether.events.RunWarning] = []
        handle.on(tether.events.RunWarning, warned.append)
        out = await handle
        await engine.close()
        await memory.close()
    logged = [r.getMessage() for r in caplog.records if r.name == "tether"]
    assert any("MemoryStore" in m for m in logged)
    assert f"run w: {out.warnings[0]}" in logged and warned[0].message == out.warnings[0]


def test_agent_end_after_a_crash_includes_the_orphaned_spend_like_the_journal(tmp_path: Path) -> None:
    import asyncio
    import signal
    import subprocess
    import sys
    import time

    import orphan_child

    url, log = f"sqlite:///{tmp_path}/t.db", tmp_path / "flight.log"
    child = subprocess.Popen([sys.executable, str(Path(orphan_child.__file__)), url, str(log)])
    deadline = time.monotonic() + 30
    while not log.exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert log.exists(), "the call is in flight"
    child.send_signal(signal.SIGKILL)
    child.wait(timeout=10)

    async def resume() -> tuple[AgentEnd, list[Any]]:
        engine = orphan_child.engine(url, None)
        handle = await engine.start_resume("o")
        ends: list[AgentEnd] = []
        handle.on(AgentEnd, ends.append)
        await handle
        journal = await engine.inspect("o")
        await engine.close()
        return ends[0], journal

    end, journal = asyncio.run(resume())
    terminal = next(e for e in journal if e.kind == "agent" and e.ref is not None)
    orphaned = float(getattr(terminal, "orphaned_usd", 0) or 0)
    assert orphaned > 0, "the cut call is charged at its worst case"
    assert end.cost_usd == pytest.approx((terminal.cost_usd or 0) + orphaned)
    assert end.cost_usd > terminal.cost_usd
