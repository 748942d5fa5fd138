"""OpenTelemetry for real backends: cost keys Phoenix and Langfuse read, one trace per run, crash-safe export."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from obskit import engine_for, lookup, study, user_text
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

import tether
from tether.contracts.messages import ChatRequest
from tether.observability.otel import run_trace_id
from tether.testing import Reply, ToolCall

HERE = Path(__file__).resolve().parent


def _provider() -> tuple[TracerProvider, InMemorySpanExporter]:
    spans = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    return provider, spans


def _attrs(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


async def test_chat_spans_carry_the_cost_keys_openinference_and_langfuse_read(tmp_path: Path) -> None:
    provider, spans = _provider()
    engine, _ = engine_for(tmp_path, tracer_provider=provider)
    out = await engine.run(study, run_id="keys", budget_usd=1.0)
    await engine.close()
    chats = [_attrs(s) for s in spans.get_finished_spans() if s.name.startswith("chat ")]
    assert len(chats) == 3
    for chat in chats:
        # OpenInference (Phoenix prices the token counts of LLM spans by model; Arize AX keeps llm.cost.*)
        assert chat["openinference.span.kind"] == "LLM" and chat["llm.model_name"] == "m"
        assert chat["llm.provider"] == "fake" and chat["llm.system"] == "fake"
        assert chat["llm.token_count.prompt"] == chat["gen_ai.usage.input_tokens"]
        assert chat["llm.token_count.completion"] == chat["gen_ai.usage.output_tokens"]
        assert chat["llm.token_count.total"] == chat["llm.token_count.prompt"] + chat["llm.token_count.completion"]
        assert chat["llm.cost.total"] == chat["tether.cost_usd"] > 0
        # Langfuse: a generation whose cost is gen_ai.usage.cost, or the cost_details JSON
        assert chat["langfuse.observation.type"] == "generation"
        assert chat["gen_ai.usage.cost"] == chat["tether.cost_usd"]
        assert json.loads(chat["langfuse.observation.cost_details"]) == {"total": chat["tether.cost_usd"]}
    assert sum(c["llm.cost.total"] for c in chats) == pytest.approx(out.cost.total_usd)
    kinds = {s.name: _attrs(s).get("openinference.span.kind") for s in spans.get_finished_spans()}
    assert kinds["workflow study"] == kinds["phase gather"] == "CHAIN"
    assert kinds["invoke_agent researcher"] == "AGENT" and kinds["execute_tool lookup"] == "TOOL"
    agent = next(_attrs(s) for s in spans.get_finished_spans() if s.name == "invoke_agent researcher")
    # the agent's usage is its calls' usage: no cost key a backend would add to the calls' (counted once)
    assert agent["langfuse.observation.type"] == "agent"
    assert not {k for k in agent if k.startswith(("llm.cost", "gen_ai.usage.cost", "langfuse.observation.cost"))}


def _greedy(request: ChatRequest) -> Reply:
    if user_text(request).startswith("look") and not any(m.role == "tool" for m in request.messages):
        calls = [ToolCall("lookup", {"topic": t}) for t in ("tides", "moons", "winds")]
        return Reply(tool_calls=calls, input_tokens=10, output_tokens=5)
    return Reply(text="done", input_tokens=10, output_tokens=5)


async def test_a_tool_call_skipped_by_its_tool_budget_is_not_an_error_span(tmp_path: Path) -> None:
    provider, spans = _provider()
    engine, _ = engine_for(tmp_path, _greedy, tracer_provider=provider)

    @tether.workflow(name="budgeted")
    async def budgeted(ctx: tether.Ctx) -> Any:
        result = await ctx.agent("look it up", tools=[lookup], label="looker",
                                 tool_budget=tether.ToolBudget(max_tool_calls=1), full=True)
        return result.status

    out = await engine.run(budgeted, run_id="tb")
    await engine.close()
    tools = [s for s in spans.get_finished_spans() if s.name == "execute_tool lookup"]
    skipped = [s for s in tools if _attrs(s).get("tether.tool.outcome") == "skipped"]
    assert len(tools) == 3 and len(skipped) == 2, [(s.name, _attrs(s)) for s in tools]
    for span in tools:
        assert span.status.status_code is StatusCode.UNSET and "error.type" not in _attrs(span)
    assert {_attrs(s)["tether.guard"] for s in skipped} == {"max_tool_calls"}
    agent = next(s for s in spans.get_finished_spans() if s.name == "invoke_agent looker")
    assert out.value == _attrs(agent)["tether.status"] == "limit" and agent.status.status_code is StatusCode.UNSET


async def test_every_segment_of_a_run_exports_under_one_trace_id(tmp_path: Path) -> None:
    @tether.workflow(name="parked")
    async def parked(ctx: tether.Ctx) -> Any:
        first = await ctx.agent("research tides", tools=[lookup], label="researcher")
        return [first, await ctx.await_external("go")]

    provider, spans = _provider()
    engine, _ = engine_for(tmp_path, tracer_provider=provider)
    assert (await engine.run(parked, run_id="seg")).status == "suspended"
    await engine.resolve_external("seg", "go", 1)
    await engine.close()
    other_provider, other_spans = _provider()  # the resume: another engine, another exporter
    engine, _ = engine_for(tmp_path, tracer_provider=other_provider)
    assert (await engine.resume("seg", parked)).status == "ok"
    await engine.run(parked, run_id="another")
    await engine.close()
    first, second = list(spans.get_finished_spans()), [s for s in other_spans.get_finished_spans()
                                                        if _attrs(s)["tether.run_id"] == "seg"]
    assert len({s.context.trace_id for s in [*first, *second]}) == 1
    assert first[0].context.trace_id == run_trace_id("seg")
    roots = [s for s in [*first, *second] if s.parent is None]
    assert [s.name for s in roots] == ["workflow parked", "workflow parked"]  # each segment a root span
    others = {s.context.trace_id for s in other_spans.get_finished_spans() if _attrs(s)["tether.run_id"] == "another"}
    assert others == {run_trace_id("another")} != {run_trace_id("seg")}


async def test_a_run_started_inside_an_application_span_joins_that_trace(tmp_path: Path) -> None:
    provider, spans = _provider()
    engine, _ = engine_for(tmp_path, tracer_provider=provider)
    with provider.get_tracer("app").start_as_current_span("handle request") as request:
        await engine.run(study, run_id="nested")
    await engine.close()
    run = next(s for s in spans.get_finished_spans() if s.name == "workflow study")
    assert run.context.trace_id == request.get_span_context().trace_id != run_trace_id("nested")
    assert run.parent is not None and run.parent.span_id == request.get_span_context().span_id
    assert trace.get_current_span().get_span_context().is_valid is False


# -- a SIGKILLed segment, exporting over OTLP/HTTP from a real child process ----------------------

def _segment(tmp_path: Path, url: str, processor: str, *extra: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])}
    return subprocess.Popen(
        [sys.executable, str(HERE / "otel_crash_child.py"), str(tmp_path), "crash-1", processor, url,
         str(tmp_path / "marker"), *extra],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )


def _kill_at_marker(child: subprocess.Popen[str], marker: Path) -> dict[str, float]:
    deadline = time.monotonic() + 60
    while not marker.exists():
        assert child.poll() is None, child.communicate()
        assert time.monotonic() < deadline, "the segment never reached its hold"
        time.sleep(0.01)
    child.send_signal(signal.SIGKILL)
    child.wait(30)
    return dict(json.loads(marker.read_text()))


def test_a_sigkilled_segment_exports_what_ended_with_the_crash_safe_processor_and_nothing_batched(
    tmp_path: Path,
) -> None:
    pytest.importorskip("opentelemetry.exporter.otlp.proto.http", reason="the OTLP/HTTP exporter is not installed")
    from otlp_receiver import otlp_receiver

    ended = ["chat m", "chat m", "execute_tool lookup", "invoke_agent researcher"]
    with otlp_receiver() as batched:
        times = _kill_at_marker(_segment(tmp_path / "b", batched.url, "batch"), tmp_path / "b" / "marker")
        time.sleep(0.5)
        if times["at"] - times["processor_made_at"] < 4.0:  # within the batch processor's 5 s delay
            assert batched.spans == [], "the default batch processor held them; SIGKILL lost them"
    with otlp_receiver() as safe:
        _kill_at_marker(_segment(tmp_path, safe.url, "crash-safe"), tmp_path / "marker")
        time.sleep(0.5)
        killed = list(safe.spans)
        assert sorted(s.name for s in killed) == sorted(ended)  # the open run and phase spans died with it
        resumed = _segment(tmp_path, safe.url, "crash-safe", "resume")
        out, err = resumed.communicate(timeout=120)
        assert resumed.returncode == 0 and out.strip() == "ok", err
        later = safe.spans[len(killed):]
    assert {s.trace_id for s in [*killed, *later]} == {f"{run_trace_id('crash-1'):032x}"}  # one trace per run
    assert [s.name for s in later if not s.parent_span_id] == ["workflow crashy"]
    assert "invoke_agent writer" in {s.name for s in later}


# -- a real Arize Phoenix server -------------------------------------------------------------------

def _phoenix_binary() -> str:
    found = os.environ.get("TETHER_TEST_PHOENIX") or shutil.which("phoenix")
    if not found:
        pytest.skip("Arize Phoenix is not installed (pip install arize-phoenix, or TETHER_TEST_PHOENIX=/path/to/phoenix)")
    return found


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@pytest.fixture
def phoenix(tmp_path: Path) -> Iterator[str]:
    """A Phoenix server on loopback with its own working directory; yields its base URL."""
    pytest.importorskip("opentelemetry.exporter.otlp.proto.http", reason="the OTLP/HTTP exporter is not installed")
    port = _free_port()
    env = {**os.environ, "PHOENIX_WORKING_DIR": str(tmp_path / "phoenix"), "PHOENIX_PORT": str(port),
           "PHOENIX_GRPC_PORT": str(_free_port()), "PHOENIX_HOST": "127.0.0.1"}
    server = subprocess.Popen([_phoenix_binary(), "serve"], env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            assert server.poll() is None, "phoenix serve exited"
            try:
                if urllib.request.urlopen(f"{base}/healthz", timeout=2).status == 200:
                    break
            except OSError:
                pass
            assert time.monotonic() < deadline, "Phoenix did not come up within 120 s"
            time.sleep(0.5)
        yield base
    finally:
        server.terminate()
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


def _graphql(base: str, query: str) -> dict[str, Any]:
    request = urllib.request.Request(f"{base}/graphql", data=json.dumps({"query": query}).encode(),
                                     headers={"Content-Type": "application/json"})
    answer: dict[str, Any] = json.load(urllib.request.urlopen(request, timeout=30))
    assert not answer.get("errors"), answer
    return dict(answer["data"])


def _project(base: str, name: str) -> dict[str, Any]:
    found = _graphql(base, "{ projects { edges { node { name traceCount costSummary { total { cost tokens } } } } } }")
    return next((e["node"] for e in found["projects"]["edges"] if e["node"]["name"] == name), {})


def test_phoenix_shows_the_runs_cost_and_one_trace_for_all_its_segments(tmp_path: Path, phoenix: str) -> None:
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource

    from tether.observability.otel import crash_safe_processor

    # Phoenix prices LLM spans with its model table: tether's prices for the model, as Settings > Models would
    _graphql(phoenix, 'mutation { createModel(input: {name: "tether-m", provider: "fake", namePattern: "^m$", costs: ['
                      '{tokenType: "input", costPerMillionTokens: 2.0, kind: PROMPT}, '
                      '{tokenType: "output", costPerMillionTokens: 10.0, kind: COMPLETION}]}) { model { id } } }')
    time.sleep(7)  # its model store refreshes every 5 s, and spans are priced as they are ingested

    @tether.workflow(name="parked")
    async def parked(ctx: tether.Ctx) -> Any:
        first = await ctx.agent("research tides", tools=[lookup], label="researcher")
        return [first, await ctx.await_external("go"), await ctx.agent("summarize", label="writer")]

    provider = TracerProvider(resource=Resource.create({"openinference.project.name": "tether-test"}))
    provider.add_span_processor(crash_safe_processor(OTLPSpanExporter(endpoint=f"{phoenix}/v1/traces")))
    engine, _ = engine_for(tmp_path, tracer_provider=provider)

    async def two_segments() -> tether.RunOutcome:
        try:
            assert (await engine.run(parked, run_id="phx", budget_usd=1.0)).status == "suspended"
            await engine.resolve_external("phx", "go", 1)
            return await engine.resume("phx", parked)  # a second segment: the researcher replays
        finally:
            await engine.close()

    out = asyncio.run(two_segments())
    provider.shutdown()
    assert out.status == "ok" and out.replay.hits >= 1
    tokens = out.usage.input_tokens + out.usage.output_tokens
    deadline = time.monotonic() + 60
    while (project := _project(phoenix, "tether-test")).get("costSummary", {}).get("total", {}).get("tokens") != tokens:
        assert time.monotonic() < deadline, project
        time.sleep(0.5)
    assert project["traceCount"] == 1  # both segments: one trace
    assert project["costSummary"]["total"]["cost"] == pytest.approx(out.cost.total_usd)  # each call counted once
