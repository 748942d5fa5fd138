"""mcp-server-time (PyPI) over stdio: its tools reach the model unchanged, calls are ledgered, resumes call nothing."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import pytest
from mcp import Client, StdioServerParameters
from mcpkit import last_result, make_engine, scripted

import tether
from tether.contracts.messages import ToolSpec
from tether.testing import Reply, ToolCall

TIME_ARGS = ("-m", "mcp_server_time", "--local-timezone", "UTC")


def time_server(*args: str, **options: object) -> tether.mcp.McpToolset:
    return tether.mcp.stdio(sys.executable, *(args or TIME_ARGS), **options)  # type: ignore[arg-type]


async def raw_listing() -> list[ToolSpec]:
    """The server's own listing, read with the SDK directly (no tether in between)."""
    async with Client(StdioServerParameters(command=sys.executable, args=list(TIME_ARGS)), cache=None) as client:
        listed = await client.list_tools()
    return [ToolSpec(name=t.name, description=t.description or "", parameters=t.input_schema) for t in listed.tools]


def clock_agent(server: tether.mcp.McpToolset) -> tether.Workflow:
    @tether.workflow(name="clock")
    async def clock(ctx: tether.Ctx) -> str:
        return str(await ctx.agent("What time is it in Tokyo?", tools=[server]))

    return clock


def ask_time() -> tether.models.FakeModel:
    return tether.models.fake("fake", script=scripted(Reply(tool_calls=[ToolCall("get_current_time", {"timezone": "Asia/Tokyo"})]), last_result))


async def test_the_time_tool_reaches_the_model_unchanged_is_ledgered_and_a_resume_calls_nothing(tmp_path: Path) -> None:
    fake = ask_time()
    engine = make_engine(fake, f"sqlite:///{tmp_path}/t.db")
    clock = clock_agent(time_server())
    out = await engine.run(clock, run_id="clock-1")
    assert out.status == "ok", out.error
    assert '"timezone": "Asia/Tokyo"' in out.value and "+09:00" in out.value  # what the server answered

    # The model saw the server's names, descriptions and input schemas exactly as listed.
    assert list(fake.requests[0].tools) == await raw_listing()
    assert fake.requests[0].tools[0].parameters["properties"]["timezone"]["title"] == "Timezone"

    store = await engine.store()
    rows = await store.load_effects("clock-1")
    assert [r["phase"] for r in rows] == ["intent", "outcome"]
    assert rows[0]["attempt_id"] == rows[1]["attempt_id"] and rows[0]["started_at"] <= rows[1]["started_at"] + 1
    ledger = await engine.effect_ledger("clock-1")
    assert [(r.tool, r.executor, r.outcome) for r in ledger] == [("get_current_time", "mcp", "ok")]
    assert ledger[0].idempotency_key and ledger[0].duration_ms is not None

    requests = len(fake.requests)
    again = await engine.resume("clock-1", clock)
    assert again.status == "ok" and again.value == out.value
    assert (again.replay.hits, again.replay.misses) == (1, 0)
    assert len(await store.load_effects("clock-1")) == 2  # no MCP call: no new ledger rows
    assert len(fake.requests) == requests  # and no model call
    await engine.close()


async def test_the_same_server_started_another_way_keeps_the_agent_identity(tmp_path: Path) -> None:
    engine = make_engine(ask_time(), f"sqlite:///{tmp_path}/t.db")
    assert (await engine.run(clock_agent(time_server()), run_id="host-a")).status == "ok"
    # Another host: the console script instead of `python -m`, another working directory.
    script = Path(sys.executable).with_name("mcp-server-time")
    elsewhere = tether.mcp.stdio(str(script), "--local-timezone", "UTC", cwd=tmp_path)
    moved = await engine.resume("host-a", clock_agent(elsewhere))
    assert moved.status == "ok" and (moved.replay.hits, moved.replay.misses) == (1, 0)
    assert len(await engine.effect_ledger("host-a")) == 1
    await engine.close()


async def test_a_server_whose_tools_changed_changes_the_identity_and_the_resume_says_so(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    engine = make_engine(ask_time(), f"sqlite:///{tmp_path}/t.db")
    assert (await engine.run(clock_agent(time_server()), run_id="upgrade")).status == "ok"
    # --local-timezone is written into both tools' argument descriptions: the listing changes.
    changed = time_server("-m", "mcp_server_time", "--local-timezone", "Europe/Paris")
    with caplog.at_level(logging.WARNING, logger="tether"):
        again = await engine.resume("upgrade", clock_agent(changed))
    assert again.status == "ok" and again.replay.misses == 1 and again.replay.hits == 0
    warnings = [r.getMessage() for r in caplog.records if "toolset changed" in r.getMessage()]
    assert len(warnings) == 1 and "convert_time, get_current_time" in warnings[0]
    assert len(await engine.effect_ledger("upgrade")) == 2  # the agent ran live again
    await engine.close()


async def test_prefix_renames_and_deny_hides_tools(tmp_path: Path) -> None:
    fake = tether.models.fake("fake", script=scripted(
        Reply(tool_calls=[ToolCall("clock_get_current_time", {"timezone": "UTC"})]), last_result))
    engine = make_engine(fake, f"sqlite:///{tmp_path}/t.db")
    server = time_server(prefix="clock", deny=["convert_*"])
    out = await engine.run(clock_agent(server), run_id="prefixed")
    assert out.status == "ok" and '"timezone": "UTC"' in out.value
    assert [t.name for t in fake.requests[0].tools] == ["clock_get_current_time"]
    assert [r.tool for r in await engine.effect_ledger("prefixed")] == ["clock_get_current_time"]


async def test_a_fresh_run_with_two_toolsets_for_one_prompt_does_not_warn(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    engine = make_engine(ask_time(), f"sqlite:///{tmp_path}/t.db")
    utc, paris = time_server(), time_server("-m", "mcp_server_time", "--local-timezone", "Europe/Paris")

    @tether.workflow(name="twice")
    async def twice(ctx: tether.Ctx) -> list[str]:
        return [str(await ctx.agent("What time is it in Tokyo?", tools=[s])) for s in (utc, paris)]

    with caplog.at_level(logging.WARNING, logger="tether"):
        out = await engine.run(twice, run_id="twice")
    assert out.status == "ok" and not [r for r in caplog.records if "toolset changed" in r.getMessage()]
    await engine.close()
