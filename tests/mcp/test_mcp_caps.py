"""MCP caps and the start deadline, against real processes: a server listing 1,000 tools, a 20 MB
result, a server that never answers `initialize`, one that exits at once, and a missing command."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import pytest
from mcpkit import make_engine, scripted, tool_results, wait_dead

import tether
from tether.mcp import McpStartError
from tether.testing import Reply, ToolCall

RAW = Path(__file__).with_name("raw_server.py")


def raw(tmp_path: Path, mode: str, n: int = 0, **options: Any) -> tether.mcp.McpToolset:
    return tether.mcp.stdio(sys.executable, str(RAW), str(tmp_path / "pids"), mode, str(n), **options)


def pids(tmp_path: Path) -> list[int]:
    path = tmp_path / "pids"
    return [int(p) for p in path.read_text().split()] if path.exists() else []


def one_agent(server: tether.mcp.McpToolset) -> tether.Workflow:
    @tether.workflow(name="caps")
    async def wf(ctx: tether.Ctx) -> str:
        return str(await ctx.agent("Use the server.", tools=[server]))

    return wf


async def start_error(server: tether.mcp.McpToolset) -> tuple[McpStartError, float]:
    """The error starting `server` outside a run, and the seconds it took (the test's own clock)."""
    began = time.monotonic()
    with pytest.raises(McpStartError) as caught:
        async with server.open():
            pass
    return caught.value, time.monotonic() - began


async def test_a_server_listing_more_tools_than_max_tools_fails_its_agent_with_a_typed_error(tmp_path: Path) -> None:
    fake = tether.models.fake("fake", script=scripted(Reply(text="never asked")))
    engine = make_engine(fake, f"sqlite:///{tmp_path}/t.db")
    out = await engine.run(one_agent(raw(tmp_path, "tools", 1000)), run_id="many-tools")
    assert out.status == "error" and isinstance(out.error, McpStartError)
    assert out.error.cause == "max-tools" and out.error.code == "mcp-start"
    assert "max_tools=256" in out.error.message and str(RAW) in out.error.message
    # Pages of 100: the engine stopped reading at the third page, past the cap, not at the thousandth tool.
    assert out.error.data["tools"] == 300 and "lists at least 300 tools" in out.error.message
    assert fake.requests == []  # the model was never called with a partial toolset
    (pid,) = pids(tmp_path)
    assert wait_dead(pid)
    await engine.close()


async def test_max_tools_is_an_option_and_none_lifts_it(tmp_path: Path) -> None:
    async with raw(tmp_path, "tools", 1000, max_tools=1000).open() as tools:
        assert len(tools) == 1000
    error, _ = await start_error(raw(tmp_path, "tools", 1000, max_tools=999))
    assert error.cause == "max-tools" and error.data["max_tools"] == 999
    async with raw(tmp_path, "tools", 1000, max_tools=None, allow=["tool_99?"]).open() as tools:
        assert len(tools) == 10


async def test_a_result_over_max_result_bytes_is_a_tool_error_the_model_sees_and_the_run_goes_on(
    tmp_path: Path,
) -> None:
    fake = tether.models.fake("fake", script=scripted(
        Reply(tool_calls=[ToolCall("big", {})]),
        Reply(tool_calls=[ToolCall("small", {})]),
        lambda request: Reply(text=" | ".join(f"{p.is_error} {p.content[:200]}" for p in tool_results(request))),
    ))
    engine = make_engine(fake, f"sqlite:///{tmp_path}/t.db")
    out = await engine.run(one_agent(raw(tmp_path, "big", 20 * 1024**2)), run_id="big")
    assert out.status == "ok", out.error
    big, small = tool_results(fake.requests[-1])
    assert big.is_error and big.content.startswith("[max_result_bytes] MCP tool 'big'")
    assert "max_result_bytes=16777216" in big.content and "the result was dropped" in big.content
    assert len(big.content) < 1000  # none of the 20 MB reached the model
    assert not small.is_error and small.content == "small answer"  # the same server, still up
    assert [(r.tool, r.outcome) for r in await engine.effect_ledger("big")] == [("big", "error"), ("small", "ok")]
    await engine.close()


async def test_max_result_bytes_counts_structured_content_and_a_direct_call_raises_it_typed(tmp_path: Path) -> None:
    async with raw(tmp_path, "big", 5000, max_result_bytes=1000).open() as tools:
        by_name = {t.name: t for t in tools}
        with pytest.raises(tether.mcp.McpToolError) as caught:
            await by_name["structured"].call({})
        assert caught.value.data["limit"] == "max_result_bytes" and "max_result_bytes=1000" in caught.value.message
        with pytest.raises(tether.mcp.McpToolError, match=r"\[max_result_bytes\] MCP tool 'big'"):
            await by_name["big"].call({})
        assert await by_name["small"].call({}) == "small answer"


async def test_a_server_that_does_not_answer_initialize_fails_on_time_and_is_killed(tmp_path: Path) -> None:
    error, took = await start_error(raw(tmp_path, "sleep-initialize", 60, start_timeout_s=1))
    assert took < 3.0, f"a 1 s start deadline fired after {took:.1f} s"  # a sanity ceiling, not a timing test
    assert error.cause == "timeout" and error.data["step"] == "handshake" and error.data["start_timeout_s"] == 1
    assert "did not answer `initialize` within 1s (start_timeout_s), so it was killed" in error.message
    (pid,) = pids(tmp_path)
    assert wait_dead(pid, 5.0)


async def test_one_deadline_covers_listing_too(tmp_path: Path) -> None:
    error, took = await start_error(raw(tmp_path, "sleep-list", 60, start_timeout_s=1))
    assert took < 3.0, f"a 1 s start deadline fired after {took:.1f} s"
    assert error.cause == "timeout" and error.data["step"] == "list"
    assert "did not finish listing its tools within 1s" in error.message


async def test_a_command_that_exits_at_once_is_named_with_its_exit_code_and_stderr(tmp_path: Path) -> None:
    code = "import sys; sys.stderr.write('cannot read /etc/raw.toml\\n'); sys.exit(3)"
    engine = make_engine(tether.models.fake("fake", script=scripted(Reply(text="no"))), f"sqlite:///{tmp_path}/t.db")
    out = await engine.run(one_agent(tether.mcp.stdio(sys.executable, "-c", code, start_timeout_s=30)), run_id="exits")
    assert out.status == "error" and isinstance(out.error, McpStartError)
    assert out.error.cause == "exited" and out.error.data["exit_code"] == 3
    assert "exited with code 3 before answering `initialize`" in out.error.message
    assert out.error.data["stderr_tail"] == "cannot read /etc/raw.toml" and "/etc/raw.toml" in out.error.message
    await engine.close()


async def test_a_server_lost_mid_call_is_named_with_its_exit_code(tmp_path: Path) -> None:
    async with raw(tmp_path, "big", 10).open() as tools:
        die = next(t for t in tools if t.name == "die")
        with pytest.raises(tether.mcp.McpToolError) as caught:
            await die.call({})
    assert "[mcp server lost]" in caught.value.message and "the command exited with code 5" in caught.value.message
    assert "dying on purpose" in caught.value.message


async def test_a_missing_command_is_a_typed_not_found_error() -> None:
    error, _ = await start_error(tether.mcp.stdio("no-such-mcp-server-anywhere"))
    assert error.cause == "not-found" and isinstance(error, tether.ConfigError)
    assert "'no-such-mcp-server-anywhere' was not found on PATH" in error.message


@pytest.mark.parametrize("options", [
    {"max_tools": 0}, {"max_tools": "10"}, {"max_tools": True}, {"max_result_bytes": -1}, {"max_result_bytes": 1.5},
    {"start_timeout_s": 0}, {"start_timeout_s": None}, {"start_timeout_s": float("nan")}, {"timeout_s": -1},
])
def test_a_bad_cap_or_timeout_is_a_config_error_naming_the_option(options: dict[str, Any]) -> None:
    (option, value), = options.items()
    with pytest.raises(tether.ConfigError, match=f"{option}= takes") as caught:
        tether.mcp.stdio(sys.executable, **options)
    assert caught.value.data["option"] == option and repr(value) in caught.value.message
