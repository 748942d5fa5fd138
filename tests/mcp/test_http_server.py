"""Our own SDK server over streamable HTTP (and stdio): errors, timeouts, a killed server, approvals."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mcpkit import Calls, HttpServer, alive, last_result, make_engine, scripted, tool_results

import tether
from tether.contracts.messages import ChatRequest
from tether.testing import Reply, ToolCall


def one_agent(server: tether.mcp.McpToolset, name: str = "agent") -> tether.Workflow:
    @tether.workflow(name=name)
    async def wf(ctx: tether.Ctx) -> str:
        return str(await ctx.agent("Use the server.", tools=[server]))

    return wf


def all_results(request: ChatRequest) -> Reply:
    return Reply(text=json.dumps([[p.is_error, p.content] for p in tool_results(request)]))


def call(tool: str, /, **args: Any) -> Reply:
    return Reply(tool_calls=[ToolCall(tool, args)])


async def test_an_is_error_result_is_an_error_tool_result_the_model_sees(tmp_path: Path, http_server: HttpServer) -> None:
    fake = tether.models.fake("fake", script=scripted(call("fail", reason="no disk"), last_result))
    engine = make_engine(fake, f"sqlite:///{tmp_path}/t.db")
    out = await engine.run(one_agent(tether.mcp.http(http_server.url)), run_id="err")
    assert out.status == "ok"
    (part,) = tool_results(fake.requests[-1])
    assert part.is_error and "refused: no disk" in part.content
    assert [r.outcome for r in await engine.effect_ledger("err")] == ["error"]
    await engine.close()


async def test_a_slow_tool_hits_timeout_s_and_the_server_keeps_serving(
    tmp_path: Path, http_server: HttpServer, calls: Calls
) -> None:
    fake = tether.models.fake("fake", script=scripted(call("slow", seconds=60), call("echo", text="still here"), all_results))
    engine = make_engine(fake, f"sqlite:///{tmp_path}/t.db")
    out = await engine.run(one_agent(tether.mcp.http(http_server.url, timeout_s=1.0)), run_id="slow")
    assert out.status == "ok"
    (slow_error, slow_text), (echo_error, echo_text) = json.loads(out.value)
    assert slow_error and "did not answer within 1.0s" in slow_text
    assert not echo_error and json.loads(echo_text)["text"] == "still here"
    slow, echo = await engine.effect_ledger("slow")
    assert (slow.outcome, echo.outcome) == ("timeout", "ok")
    assert slow.duration_ms is not None and slow.duration_ms < 30_000  # cut at the timeout, not after 60 s
    assert len(http_server.procs) == 1 and [r["tool"] for r in calls.rows()] == ["slow", "echo"]
    await engine.close()


def after_restart(server: HttpServer, then: Reply) -> Callable[[ChatRequest], Reply]:
    def turn(request: ChatRequest) -> Reply:
        server.wait_restarted()  # the supervisor brings the HTTP server back, like a process manager would
        return then

    return turn


async def test_a_server_killed_mid_call_is_a_typed_error_and_the_next_call_reconnects(
    tmp_path: Path, http_server: HttpServer, calls: Calls
) -> None:
    fake = tether.models.fake("fake", script=scripted(
        call("die"), after_restart(http_server, call("echo", text="back")), all_results))
    engine = make_engine(fake, f"sqlite:///{tmp_path}/t.db")
    out = await engine.run(one_agent(tether.mcp.http(http_server.url)), run_id="killed-http")
    assert out.status == "ok", out.error
    (died, died_text), (echo_error, echo_text) = json.loads(out.value)
    assert died and "[mcp server lost]" in died_text and http_server.url in died_text
    assert not echo_error, echo_text
    (die_row,) = calls.rows("die")
    assert json.loads(echo_text)["pid"] != die_row["pid"]  # a new server process answered
    assert [r.outcome for r in await engine.effect_ledger("killed-http")] == ["error", "ok"]
    await engine.close()


async def test_a_stdio_server_killed_mid_call_is_restarted_by_the_next_call(
    tmp_path: Path, app_stdio: Callable[..., tether.mcp.McpToolset], calls: Calls
) -> None:
    fake = tether.models.fake("fake", script=scripted(call("die"), call("echo", text="back"), all_results))
    engine = make_engine(fake, f"sqlite:///{tmp_path}/t.db")
    out = await engine.run(one_agent(app_stdio()), run_id="killed-stdio")
    assert out.status == "ok", out.error
    (died, died_text), (echo_error, echo_text) = json.loads(out.value)
    assert died and "[mcp server lost]" in died_text and not echo_error
    first, second = calls.pids()
    assert json.loads(echo_text)["pid"] == second != first
    assert not alive(first) and not alive(second)  # the restarted one was closed at settle too
    await engine.close()


async def test_the_next_call_restarts_a_dead_server_once_and_a_failed_restart_stays_failed(
    tmp_path: Path, app_stdio: Callable[..., tether.mcp.McpToolset], calls: Calls
) -> None:
    once = {"TETHER_TEST_START_ONCE": str(tmp_path / "started")}
    fake = tether.models.fake("fake", script=scripted(
        call("die"), call("echo", text="a"), call("echo", text="b"), all_results))
    engine = make_engine(fake, f"sqlite:///{tmp_path}/t.db")
    out = await engine.run(one_agent(app_stdio(env=once)), run_id="broken")
    assert out.status == "ok", out.error
    (died, _), (restart_failed, restart_text), (still_down, down_text) = json.loads(out.value)
    assert died and restart_failed and still_down
    assert "the restart failed" in restart_text and "may start only once" in restart_text  # its stderr tail
    assert "the restart failed" in down_text
    assert len(calls.pids()) == 2  # the first start and one restart, no more
    assert [r.outcome for r in await engine.effect_ledger("broken")] == ["error", "error", "error"]
    await engine.close()


async def test_the_idempotency_key_travels_in_meta_and_images_become_placeholders(
    tmp_path: Path, http_server: HttpServer
) -> None:
    fake = tether.models.fake("fake", script=scripted(
        Reply(tool_calls=[ToolCall("echo", {"text": "hi"}), ToolCall("picture", {})]), all_results))
    engine = make_engine(fake, f"sqlite:///{tmp_path}/t.db")
    out = await engine.run(one_agent(tether.mcp.http(http_server.url)), run_id="meta")
    (_, echo_text), (_, picture_text) = json.loads(out.value)
    echo_row, _ = await engine.effect_ledger("meta")
    assert json.loads(echo_text)["key"] == echo_row.idempotency_key != ""
    assert picture_text == "a tiny png\n[image: image/png, 32 bytes, not shown to the model]"
    await engine.close()


async def test_a_destructive_tool_waits_for_approval(tmp_path: Path, http_server: HttpServer, calls: Calls) -> None:
    fake = tether.models.fake("fake", script=scripted(call("delete_item", name="prod-db"), last_result))
    engine = make_engine(fake, f"sqlite:///{tmp_path}/t.db")
    wf = one_agent(tether.mcp.http(http_server.url))
    first = await engine.run(wf, run_id="approve")
    assert first.status == "suspended" and len(first.pending) == 1
    assert calls.rows("delete_item") == [] and await engine.effect_ledger("approve") == []
    assert await engine.resolve_external("approve", first.pending[0], "allow")
    done = await engine.resume("approve", wf)
    assert done.status == "ok" and done.value == "deleted prod-db"
    assert len(calls.rows("delete_item")) == 1

    denied = await engine.run(wf, run_id="deny")
    assert await engine.resolve_external("deny", denied.pending[0], "deny")
    refused = await engine.resume("deny", wf)
    assert refused.status == "ok" and refused.value.startswith("ERROR 'delete_item' was not approved")
    assert len(calls.rows("delete_item")) == 1
    await engine.close()


async def test_needs_approval_overrides_the_annotations(tmp_path: Path, http_server: HttpServer, calls: Calls) -> None:
    fake = tether.models.fake("fake", script=scripted(call("delete_item", name="tmp"), last_result))
    engine = make_engine(fake, f"sqlite:///{tmp_path}/t.db")
    trusted = await engine.run(one_agent(tether.mcp.http(http_server.url, needs_approval=False)), run_id="trusted")
    assert trusted.status == "ok" and trusted.value == "deleted tmp"
    fake2 = tether.models.fake("fake", script=scripted(call("echo", text="x"), last_result))
    engine2 = make_engine(fake2, f"sqlite:///{tmp_path}/t2.db")
    careful = await engine2.run(one_agent(tether.mcp.http(http_server.url, needs_approval=["echo"])), run_id="careful")
    assert careful.status == "suspended" and calls.rows("echo") == []
    await engine.close()
    await engine2.close()
