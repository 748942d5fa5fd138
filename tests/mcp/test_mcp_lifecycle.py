"""The engine owns MCP servers: started once per segment when first needed, closed at settle and cancel."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from mcpkit import Calls, HttpServer, alive, free_port, make_engine, scripted, tool_results, wait_dead

import tether
from tether.contracts.messages import ChatRequest
from tether.testing import Reply, ToolCall


def echo_then_answer(text: str = "hi") -> tether.models.FakeModel:
    def script(request: ChatRequest) -> Reply:
        if request.messages[-1].role == "tool":
            return Reply(text=tool_results(request)[-1].content)
        return Reply(tool_calls=[ToolCall("echo", {"text": text})])

    return tether.models.fake("fake", script=script)


def test_import_tether_does_not_import_the_sdk() -> None:
    code = "import sys, tether; tether.mcp.stdio('x'); assert 'mcp' not in sys.modules, 'mcp imported'"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


async def test_a_server_that_fails_to_start_is_a_config_error_with_its_stderr_tail(tmp_path: Path) -> None:
    broken = tether.mcp.stdio(sys.executable, "-c", "import sys; sys.exit('cannot read /etc/broken.toml')")
    engine = make_engine(echo_then_answer(), f"sqlite:///{tmp_path}/t.db")

    @tether.workflow(name="broken")
    async def wf(ctx: tether.Ctx) -> str:
        return str(await ctx.agent("hi", tools=[broken]))

    out = await engine.run(wf, run_id="broken")
    assert out.status == "error" and isinstance(out.error, tether.ConfigError)
    assert sys.executable in out.error.message and "cannot read /etc/broken.toml" in out.error.message
    assert out.error.data["stderr_tail"] == "cannot read /etc/broken.toml"
    await engine.close()


async def test_a_missing_command_and_an_unreachable_url_are_config_errors() -> None:
    with pytest.raises(tether.ConfigError, match="'no-such-mcp-server' was not found on PATH"):
        async with tether.mcp.stdio("no-such-mcp-server").open():
            pass
    url = f"http://127.0.0.1:{free_port()}/mcp"
    with pytest.raises(tether.ConfigError, match=f"MCP server `{url}` failed to start") as caught:
        async with tether.mcp.http(url, headers={"Authorization": "Bearer s3cret"}).open():
            pass
    assert "s3cret" not in str(caught.value) and "s3cret" not in repr(caught.value.data)


async def test_a_name_clash_and_a_bare_function_in_tools_are_config_errors(
    tmp_path: Path, app_stdio: Callable[..., tether.mcp.McpToolset]
) -> None:
    @tether.tool
    def echo(text: str) -> str:
        """My own echo."""
        return text

    engine = make_engine(echo_then_answer(), f"sqlite:///{tmp_path}/t.db")

    @tether.workflow(name="clash")
    async def clash(ctx: tether.Ctx) -> str:
        return str(await ctx.agent("hi", tools=[echo, app_stdio()]))

    out = await engine.run(clash, run_id="clash")
    assert isinstance(out.error, tether.ConfigError) and "two tools are named 'echo'" in out.error.message

    @tether.workflow(name="bare")
    async def bare(ctx: tether.Ctx) -> str:
        return str(await ctx.agent("hi", tools=[app_stdio(prefix="srv"), len]))

    out = await engine.run(bare, run_id="bare")
    assert isinstance(out.error, tether.ConfigError) and "not builtin_function_or_method" in out.error.message
    await engine.close()


async def test_one_server_per_segment_shared_by_agents_profiles_and_orchestrated_children(
    tmp_path: Path, app_stdio: Callable[..., tether.mcp.McpToolset], calls: Calls
) -> None:
    server = app_stdio()

    def script(request: ChatRequest) -> Reply:
        if any(t.name == "spawn_agent" for t in request.tools):
            if request.messages[-1].role == "tool":
                return Reply(text="orchestrated: " + tool_results(request)[-1].content)
            return Reply(tool_calls=[ToolCall("spawn_agent", {"goal": "echo child", "tools": ["echo"]})])
        if request.messages[-1].role == "tool":
            return Reply(text=json.loads(tool_results(request)[-1].content)["text"])
        return Reply(tool_calls=[ToolCall("echo", {"text": request.messages[-1].text_content})])

    engine = make_engine(tether.models.fake("fake", script=script), f"sqlite:///{tmp_path}/t.db")
    engine.profile("echoer", tools=[server])

    @tether.workflow(name="many")
    async def many(ctx: tether.Ctx) -> list[str]:
        a, b = await ctx.parallel([lambda: ctx.agent("a", tools=[server]), lambda: ctx.agent("b", tools=[server])])
        c = await ctx.agent("c", agent_type="echoer")
        d = await ctx.orchestrate("use a child", tools=[server])
        return [a, b, c, d]

    out = await engine.run(many, run_id="many")
    assert out.status == "ok", out.error
    a, b, c, d = out.value
    assert (a, b, c) == ("a", "b", "c") and d.startswith("orchestrated: ") and "echo child" in d
    assert len(calls.rows("echo")) == 4
    (pid,) = calls.pids()  # one server for the whole segment ...
    assert wait_dead(pid)  # ... closed when it settled
    await engine.close()


async def test_a_cancelled_run_closes_its_servers(
    tmp_path: Path, app_stdio: Callable[..., tether.mcp.McpToolset], calls: Calls
) -> None:
    fake = tether.models.fake("fake", script=scripted(Reply(tool_calls=[ToolCall("slow", {"seconds": 600})])))
    engine = make_engine(fake, f"sqlite:///{tmp_path}/t.db")
    server = app_stdio(timeout_s=None)

    @tether.workflow(name="stuck")
    async def stuck(ctx: tether.Ctx) -> str:
        return str(await ctx.agent("wait", tools=[server]))

    handle = engine.start(stuck, run_id="stuck")
    for _ in range(1200):  # until the server has the call
        if calls.rows("slow"):
            break
        await asyncio.sleep(0.05)
    (pid,) = calls.pids()
    assert alive(pid)
    handle.cancel("enough")
    out = await handle
    assert out.status == "cancelled"
    assert not alive(pid)  # closed before the outcome was handed back
    await engine.close()


async def test_open_lists_the_tools_outside_a_run(http_server: HttpServer) -> None:
    async with tether.mcp.http(http_server.url, prefix="t", allow=["echo", "delete_*"]).open() as tools:
        by_name = {t.name: t for t in tools}
        assert set(by_name) == {"t_echo", "t_delete_item"}
        assert by_name["t_echo"].parallel_safe and by_name["t_echo"].idempotent and not by_name["t_echo"].needs_approval
        assert by_name["t_delete_item"].needs_approval and not by_name["t_delete_item"].parallel_safe
        assert json.loads(await by_name["t_echo"].call({"text": "direct"}))["text"] == "direct"


async def test_concurrent_runs_sharing_a_toolset_each_get_and_close_their_own_server(
    tmp_path: Path, app_stdio: Callable[..., tether.mcp.McpToolset], calls: Calls
) -> None:
    server = app_stdio()
    engine = make_engine(echo_then_answer(), f"sqlite:///{tmp_path}/t.db")

    @tether.workflow(name="shared")
    async def shared(ctx: tether.Ctx) -> str:
        return str(await ctx.agent("hi", tools=[server]))

    one, two = await asyncio.gather(engine.run(shared, run_id="one"), engine.run(shared, run_id="two"))
    assert one.status == two.status == "ok"
    pids = calls.pids()
    assert len(pids) == 2 and len({r["pid"] for r in calls.rows("echo")}) == 2
    assert all(wait_dead(pid) for pid in pids)
    await engine.close()


async def test_tool_budgets_and_units_apply_to_mcp_tools(
    tmp_path: Path, app_stdio: Callable[..., tether.mcp.McpToolset], calls: Calls
) -> None:
    fake = tether.models.fake("fake", script=scripted(*[Reply(tool_calls=[ToolCall("echo", {"text": str(i)})]) for i in range(3)]))
    engine = make_engine(fake, f"sqlite:///{tmp_path}/t.db")
    server = app_stdio(units=3)

    @tether.workflow(name="budgeted")
    async def budgeted(ctx: tether.Ctx) -> dict[str, object]:
        result = await ctx.agent("echo a lot", tools=[server], full=True,
                                 tool_budget=tether.ToolBudget(tool_units=tether.ToolUnits(max=5)))
        return {"status": result.status, "limiter": result.tool_budget.limiter, "used": result.tool_budget.used}

    out = await engine.run(budgeted, run_id="budgeted")
    assert out.value == {"status": "limit", "limiter": "tool_units", "used": 1}
    assert len(calls.rows("echo")) == 1  # the second call (3 more units) did not fit in 5
    assert [r.tool for r in await engine.effect_ledger("budgeted")] == ["echo"]
    await engine.close()
