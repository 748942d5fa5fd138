"""What the model reads from MCP results, and MCP calls under the permission chain and parallel groups."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from mcpkit import Calls, HttpServer, last_result, scripted, tool_results

import tether
from tether.testing import Reply, ToolCall


def one_agent(server: tether.mcp.McpToolset) -> tether.Workflow:
    @tether.workflow(name="mcp-results")
    async def wf(ctx: tether.Ctx) -> str:
        return str(await ctx.agent("Use the server.", tools=[server]))

    return wf


def engine_for(model: tether.models.FakeModel, tmp_path: Path, **options: Any) -> tether.Engine:
    return tether.Engine(models=[model], routing={"loop": "fake:m"}, store=f"sqlite:///{tmp_path}/t.db", **options)


def calls_then(*calls: ToolCall) -> tether.models.FakeModel:
    return tether.models.fake("fake", script=scripted(Reply(tool_calls=list(calls)), last_result))


async def test_structured_content_without_text_is_the_tool_value_the_model_sees(
    tmp_path: Path, http_server: HttpServer, calls: Calls
) -> None:
    fake = calls_then(ToolCall("weather", {"city": "Oslo"}))
    engine = engine_for(fake, tmp_path)
    out = await engine.run(one_agent(tether.mcp.http(http_server.url)), run_id="structured")
    assert out.status == "ok", out.error
    (part,) = tool_results(fake.requests[-1])
    assert not part.is_error
    assert json.loads(part.content) == {"city": "Oslo", "celsius": 21.5, "sky": "clear"}
    (row,) = await engine.effect_ledger("structured")
    assert row.outcome == "ok" and len(calls.rows("weather")) == 1
    await engine.close()


async def test_resources_text_is_inlined_blobs_and_links_are_placeholders(tmp_path: Path, http_server: HttpServer) -> None:
    fake = calls_then(ToolCall("report", {}))
    engine = engine_for(fake, tmp_path)
    out = await engine.run(one_agent(tether.mcp.http(http_server.url)), run_id="resources")
    assert out.status == "ok", out.error
    (part,) = tool_results(fake.requests[-1])
    assert not part.is_error
    assert part.content.split("\n") == [
        "the nightly report",
        "[resource: file:///reports/notes.txt, text/plain]",  # an embedded text resource: named, then inlined
        "disk at 91%",
        "[resource: file:///reports/chart.png, image/png, 32 bytes, not shown to the model]",  # a blob
        "[resource link: file:///reports/full.pdf (full report, application/pdf)]",  # a link: named, not fetched
    ]
    await engine.close()


def refused_and_uncalled(fake: tether.models.FakeModel, calls: Calls) -> str:
    (part,) = tool_results(fake.requests[-1])
    assert part.is_error
    assert calls.rows("delete_item") == []  # the server never received the call
    return part.content


async def test_a_deny_rule_refuses_an_mcp_tool_and_the_server_gets_no_call(
    tmp_path: Path, http_server: HttpServer, calls: Calls
) -> None:
    fake = calls_then(ToolCall("delete_item", {"name": "prod-db"}))
    engine = engine_for(fake, tmp_path, permissions=tether.Permissions(deny=["delete_*"]))
    out = await engine.run(one_agent(tether.mcp.http(http_server.url, needs_approval=False)), run_id="denied")
    assert out.status == "ok", out.error
    refusal = refused_and_uncalled(fake, calls)
    assert refusal == "permission denied for 'delete_item' (deny rule 'delete_*')"
    assert out.value == f"ERROR {refusal}"
    assert await engine.effect_ledger("denied") == []
    await engine.close()


async def test_a_permission_hook_refuses_an_mcp_tool_and_the_server_gets_no_call(
    tmp_path: Path, http_server: HttpServer, calls: Calls
) -> None:
    asked: list[tuple[str, dict[str, Any]]] = []

    def hook(name: str, args: dict[str, Any]) -> str | None:
        asked.append((name, args))
        return "deny" if args.get("name") == "prod-db" else None

    fake = tether.models.fake("fake", script=scripted(
        Reply(tool_calls=[ToolCall("delete_item", {"name": "prod-db"}), ToolCall("delete_item", {"name": "tmp"})]),
        lambda request: Reply(text=json.dumps([[p.is_error, p.content] for p in tool_results(request)])),
    ))
    engine = engine_for(fake, tmp_path, permissions=tether.Permissions(hooks=(hook,)))
    out = await engine.run(one_agent(tether.mcp.http(http_server.url, needs_approval=False)), run_id="hooked")
    assert out.status == "ok", out.error
    (denied, denied_text), (allowed, allowed_text) = json.loads(out.value)
    assert denied and denied_text == "permission denied for 'delete_item' (permission hook #0 answered 'deny')"
    assert not allowed and allowed_text == "deleted tmp"
    assert asked == [("delete_item", {"name": "prod-db"}), ("delete_item", {"name": "tmp"})]
    (row,) = calls.rows("delete_item")  # only the allowed call reached the server
    (ledger,) = await engine.effect_ledger("hooked")
    assert ledger.idempotency_key == row["key"] and ledger.outcome == "ok"
    await engine.close()


def intervals(calls: Calls, tool: str) -> list[tuple[float, float]]:
    rows = sorted(calls.rows(tool), key=lambda r: r["started"])
    assert sorted(r["label"] for r in rows) == ["a", "b"]
    return [(r["started"], r["ended"]) for r in rows]


async def two_calls_in_one_turn(
    tmp_path: Path, http_server: HttpServer, calls: Calls, tool: str, seconds: float, run_id: str
) -> tuple[str, list[tuple[float, float]]]:
    """One agent turn that calls `tool` twice ("a", "b"): the run's value and the server's call intervals."""
    fake = tether.models.fake("fake", script=scripted(
        Reply(tool_calls=[ToolCall(tool, {"label": "a", "seconds": seconds}),
                          ToolCall(tool, {"label": "b", "seconds": seconds})]),
        lambda request: Reply(text=" / ".join(p.content for p in tool_results(request))),
    ))
    engine = engine_for(fake, tmp_path)
    try:
        out = await engine.run(one_agent(tether.mcp.http(http_server.url)), run_id=run_id)
        assert out.status == "ok", out.error
        return out.value, intervals(calls, tool)
    finally:
        await engine.close()


async def test_read_only_mcp_tools_in_one_turn_run_concurrently(
    tmp_path: Path, http_server: HttpServer, calls: Calls
) -> None:
    value, spans = await two_calls_in_one_turn(tmp_path, http_server, calls, "timed_read", 0.5, "parallel")
    assert value == "a done / b done"
    (a_start, a_end), (b_start, b_end) = spans
    # The server (one process, one clock) had both calls in flight at once: the later one started
    # before the earlier one answered. An ordering of the server's own timestamps, not a wall-clock bound.
    assert a_start <= b_start < a_end and b_start < b_end


async def test_mcp_tools_without_read_only_hint_in_one_turn_run_one_after_another(
    tmp_path: Path, http_server: HttpServer, calls: Calls
) -> None:
    value, spans = await two_calls_in_one_turn(tmp_path, http_server, calls, "timed_write", 0.3, "serial")
    assert value == "a written / b written"
    (_, a_end), (b_start, _) = spans
    assert a_end <= b_start  # the second started only after the first had answered
