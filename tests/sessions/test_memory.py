"""Workspace memory: shared by a workspace's sessions, invisible to others, and replayed as it was read."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from session_app import build

import tether


def app(url: str, log: str) -> tuple[tether.Engine, tether.Workflow, tether.Workflow]:
    engine, _ = build(url, log)

    @tether.workflow(name="note")
    async def note(ctx: tether.Ctx, prompt: str) -> Any:
        key, _, value = prompt.partition("=")
        return await ctx.memory.remember(key, value, pinned=key == "plan")

    @tether.workflow(name="ask")
    async def ask(ctx: tether.Ctx, prompt: str) -> Any:
        notes = await ctx.memory.recall(prompt, k=5)
        return [[n.key, n.value, n.run_id, n.session, n.turn] for n in notes]

    engine.register(note)
    engine.register(ask)
    return engine, note, ask


async def test_a_note_is_recalled_in_another_session_of_its_workspace_only(store_url: str, tmp_path: Path) -> None:
    engine, note, ask = app(store_url, str(tmp_path / "log.jsonl"))
    await engine.session("first", workspace="acme").send("plan=gold support plan", workflow=note)
    await engine.session("first", workspace="acme").send("region=eu support region", workflow=note)
    same = await engine.session("second", workspace="acme").send("support plan", workflow=ask)
    assert same.status == "ok"
    assert same.answer[0] == ["plan", "gold support plan", "first.1", "first", 1]  # names its run and turn
    assert {n[0] for n in same.answer} == {"plan", "region"}
    other = await engine.session("third", workspace="globex").send("support plan", workflow=ask)
    assert other.status == "ok" and other.answer == []
    await engine.close()


async def test_a_replayed_turn_sees_the_notes_it_saw_live_after_one_is_forgotten(
    store_url: str, tmp_path: Path
) -> None:
    engine, note, ask = app(store_url, str(tmp_path / "log.jsonl"))
    writer = engine.session("w", workspace="acme")
    await writer.send("plan=gold", workflow=note)
    await writer.send("region=eu", workflow=note)
    reader = engine.session("r", workspace="acme")
    live = await reader.send("plan region", workflow=ask)
    assert sorted(n[0] for n in live.answer) == ["plan", "region"]

    @tether.workflow(name="drop")
    async def drop(ctx: tether.Ctx, prompt: str) -> bool:
        return await ctx.memory.forget(prompt)

    assert (await writer.send("region", workflow=drop)).answer is True
    replayed = await engine.resume("r.1", ask, dry_run=True)  # replay-strict: the body runs against the journal
    assert replayed.status == "ok" and replayed.value == live.answer
    fresh = await reader.send("plan region", workflow=ask)
    assert [n[0] for n in fresh.answer] == ["plan"]  # a live recall now finds one note fewer
    await engine.close()


async def test_memory_tools_let_an_opted_in_agent_remember_and_recall(tmp_path: Path) -> None:
    from tether.contracts.messages import ChatRequest
    from tether.testing import Reply, ToolCall

    def script(request: ChatRequest) -> Reply:
        tools = [m for m in request.messages if m.role == "tool"]
        if not tools:
            return Reply(tool_calls=[ToolCall("remember", {"key": "tz", "value": "CET"})])
        if len(tools) == 1:
            return Reply(tool_calls=[ToolCall("recall", {"query": "tz"})])
        return Reply(text="noted")

    engine = tether.Engine(models=[tether.models.fake("fake", script=script)], routing={"loop": "fake:m"},
                           store=f"sqlite:///{tmp_path}/t.db")

    @tether.workflow(name="tooled")
    async def tooled(ctx: tether.Ctx, prompt: str) -> Any:
        return await ctx.agent(prompt, tools=[*ctx.memory.tools()])

    out = await engine.session("s", workspace="acme").send("remember my timezone", workflow=tooled)
    assert out.status == "ok" and out.answer == "noted"
    store = await engine.store()
    notes = await store.note_list("acme")  # type: ignore[attr-defined]
    assert [(n.key, n.value, n.run_id, n.session, n.turn) for n in notes] == [("tz", "CET", "s.1", "s", 1)]
    await engine.close()
