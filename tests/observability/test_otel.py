"""OpenTelemetry export: GenAI spans with their parents and attributes, metrics equal to the journal."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import trace_tools
from obskit import PROMPT_SECRET, answered, engine_for, study, user_text
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

import tether
from tether.contracts.messages import ChatRequest
from tether.testing import Reply, ToolCall


@dataclass
class Telemetry:
    spans: InMemorySpanExporter
    metrics: InMemoryMetricReader
    options: dict[str, Any]

    def finished(self) -> list[ReadableSpan]:
        return list(self.spans.get_finished_spans())

    def named(self, prefix: str) -> list[ReadableSpan]:
        return [s for s in self.finished() if s.name.startswith(prefix)]

    def points(self, name: str) -> list[Any]:
        data = self.metrics.get_metrics_data()
        assert data is not None
        return [p for rm in data.resource_metrics for sm in rm.scope_metrics for m in sm.metrics
                if m.name == name for p in m.data.data_points]


@pytest.fixture
def telemetry() -> Telemetry:
    spans = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(spans))
    reader = InMemoryMetricReader()
    return Telemetry(spans, reader, {"tracer_provider": tracer_provider,
                                     "meter_provider": MeterProvider(metric_readers=[reader])})


def parent_of(span: ReadableSpan, spans: list[ReadableSpan]) -> ReadableSpan | None:
    if span.parent is None:
        return None
    return next((s for s in spans if s.context.span_id == span.parent.span_id), None)


async def test_a_run_exports_the_span_tree_run_phase_agent_chat_and_tool(tmp_path: Path, telemetry: Telemetry) -> None:
    engine, _ = engine_for(tmp_path, **telemetry.options)
    out = await engine.run(study, run_id="otel", budget_usd=1.0)
    await engine.close()
    spans = telemetry.finished()
    names = sorted(s.name for s in spans)
    assert names == sorted([
        "workflow study", "phase gather", "invoke_agent researcher", "invoke_agent writer",
        "chat m", "chat m", "chat m", "execute_tool lookup",
    ])
    by_name = {s.name: s for s in spans}
    run, phase = by_name["workflow study"], by_name["phase gather"]
    assert run.parent is None and parent_of(phase, spans) is run
    researcher, writer = by_name["invoke_agent researcher"], by_name["invoke_agent writer"]
    assert parent_of(researcher, spans) is phase and parent_of(writer, spans) is phase
    chats = telemetry.named("chat ")
    assert sorted(parent_of(c, spans).name for c in chats) == [  # type: ignore[union-attr]
        "invoke_agent researcher", "invoke_agent researcher", "invoke_agent writer"]
    assert parent_of(by_name["execute_tool lookup"], spans) is researcher
    assert len({s.context.trace_id for s in spans}) == 1 and out.status == "ok"


async def test_spans_carry_the_genai_attributes_and_the_journaled_figures(tmp_path: Path, telemetry: Telemetry) -> None:
    engine, _ = engine_for(tmp_path, **telemetry.options)
    out = await engine.run(study, run_id="otel", budget_usd=1.0)
    journal = await engine.inspect("otel")
    await engine.close()
    terminals = {e.label: e for e in journal if e.kind == "agent" and e.ref is not None}
    agent = {s.attributes["gen_ai.agent.name"]: s.attributes for s in telemetry.named("invoke_agent")}
    researcher = agent["researcher"]
    assert researcher["gen_ai.operation.name"] == "invoke_agent"
    assert researcher["gen_ai.provider.name"] == "fake" and researcher["gen_ai.request.model"] == "m"
    assert researcher["gen_ai.response.model"] == "m" and researcher["gen_ai.response.finish_reasons"] == ("stop",)
    assert researcher["gen_ai.usage.input_tokens"] == terminals["researcher"].usage.input_tokens == 200
    assert researcher["gen_ai.usage.output_tokens"] == terminals["researcher"].usage.output_tokens
    assert researcher["tether.cost_usd"] == terminals["researcher"].cost_usd > 0
    assert researcher["tether.run_id"] == "otel" and researcher["tether.replayed"] is False
    first_chat = min(telemetry.named("chat "), key=lambda s: s.start_time or 0)
    chat = first_chat.attributes or {}
    assert chat["gen_ai.operation.name"] == "chat" and chat["gen_ai.request.max_tokens"] > 0
    assert chat["gen_ai.response.finish_reasons"] == ("tool_calls",)
    assert (chat["gen_ai.usage.input_tokens"], chat["gen_ai.usage.output_tokens"]) == (120, 15)
    assert chat["tether.cost_usd"] == pytest.approx((120 * 2.0 + 15 * 10.0) / 1e6)
    tool = telemetry.named("execute_tool")[0].attributes or {}
    assert tool["gen_ai.operation.name"] == "execute_tool" and tool["gen_ai.tool.name"] == "lookup"
    assert tool["gen_ai.tool.call.id"] == "call_1_0"
    run = telemetry.named("workflow")[0].attributes or {}
    assert run["tether.cost_usd"] == out.cost.total_usd and run["tether.status"] == "ok"
    assert run["gen_ai.operation.name"] == "invoke_workflow" and run["tether.ceiling_usd"] == 1.0


async def test_the_token_histogram_sums_equal_the_journal_usage(tmp_path: Path, telemetry: Telemetry) -> None:
    engine, _ = engine_for(tmp_path, **telemetry.options)
    out = await engine.run(study, run_id="otel", budget_usd=1.0)
    await engine.close()
    tokens = telemetry.points("gen_ai.client.token.usage")
    by_type = {p.attributes["gen_ai.token.type"]: p for p in tokens}
    assert by_type["input"].sum == out.usage.input_tokens == 280
    assert by_type["output"].sum == out.usage.output_tokens
    assert by_type["input"].count == out.cost.provider_calls == 3
    assert by_type["input"].attributes["gen_ai.provider.name"] == "fake"
    [duration] = telemetry.points("gen_ai.client.operation.duration")
    assert duration.count == 3 and duration.sum >= 0
    [cost] = telemetry.points("tether.cost.usd")
    assert cost.value == pytest.approx(out.cost.total_usd)


async def test_a_resumed_run_marks_its_spans_replayed_without_provider_latency(
    tmp_path: Path, telemetry: Telemetry
) -> None:
    engine, model = engine_for(tmp_path, **telemetry.options)
    await engine.run(study, run_id="otel", budget_usd=1.0)
    live_tokens = sum(p.sum for p in telemetry.points("gen_ai.client.token.usage"))
    telemetry.spans.clear()
    calls = model.calls
    resumed = await engine.resume("otel", study)
    await engine.close()
    assert resumed.replay.hits == 2 and model.calls == calls
    spans = telemetry.finished()
    agents = telemetry.named("invoke_agent")
    chats = telemetry.named("chat ")
    assert len(agents) == 2 and len(chats) == 2  # one replayed chat span per model of each agent
    for span in [*agents, *chats]:
        assert (span.attributes or {})["tether.replayed"] is True
        assert span.end_time == span.start_time, "served from the journal: no provider latency"
    researcher_chat = next(c for c in chats if parent_of(c, spans).attributes["gen_ai.agent.name"] == "researcher")  # type: ignore[union-attr]
    assert researcher_chat.attributes["tether.provider_calls"] == 2  # type: ignore[index]
    assert researcher_chat.attributes["tether.journaled.input_tokens"] == 200  # type: ignore[index]
    for span in [*agents, *chats]:  # nothing was called or paid again: no key a backend sums
        assert not {k for k in span.attributes or {} if k.startswith(("gen_ai.usage", "llm.token_count", "llm.cost",
                                                                        "langfuse.observation.cost", "tether.cost"))}
    run = telemetry.named("workflow")[0]
    assert run.attributes["tether.resumed"] is True and run.attributes["tether.replay.hits"] == 2  # type: ignore[index]
    assert sum(p.sum for p in telemetry.points("gen_ai.client.token.usage")) == live_tokens, "replays record no usage"


def all_strings(spans: list[ReadableSpan]) -> str:
    texts = []
    for span in spans:
        texts += [span.name, json.dumps(dict(span.attributes or {}), default=str)]
        texts += [json.dumps(dict(e.attributes or {}), default=str) for e in span.events]
    return "\n".join(texts)


async def test_no_prompt_or_completion_text_without_capture_content(tmp_path: Path, telemetry: Telemetry) -> None:
    engine, _ = engine_for(tmp_path, **telemetry.options)
    await engine.run(study, run_id="otel")
    await engine.close()
    recorded = all_strings(telemetry.finished())
    for content in (PROMPT_SECRET, "answer to", "facts about tides", "tides"):
        assert content not in recorded


async def test_capture_content_records_prompts_outputs_and_tool_io(tmp_path: Path, telemetry: Telemetry) -> None:
    engine, _ = engine_for(tmp_path, capture_content=True, **telemetry.options)
    await engine.run(study, run_id="otel")
    await engine.close()
    researcher = next(s for s in telemetry.named("invoke_agent") if s.name.endswith("researcher"))
    attrs = researcher.attributes or {}
    assert PROMPT_SECRET in json.loads(attrs["gen_ai.input.messages"])[0]["parts"][0]["content"]  # type: ignore[arg-type]
    assert "answer to research" in str(attrs["gen_ai.output.messages"])
    tool = telemetry.named("execute_tool")[0].attributes or {}
    assert json.loads(tool["gen_ai.tool.call.arguments"]) == {"topic": "tides"}  # type: ignore[arg-type]
    assert tool["gen_ai.tool.call.result"] == "facts about tides"
    streamed = [s for s in telemetry.named("chat ") if "gen_ai.output.messages" in (s.attributes or {})]
    assert streamed and "answer to" in str(streamed[0].attributes["gen_ai.output.messages"])  # type: ignore[index]


def failing_script(request: ChatRequest) -> Reply:
    prompt = user_text(request)
    if prompt.startswith("explode") and not answered(request):
        return Reply(tool_calls=[ToolCall("explode", {})], input_tokens=10, output_tokens=5)
    if prompt.startswith("refuse"):
        return Reply(error="terminal", message="no such model")
    return Reply(text="ok", input_tokens=10, output_tokens=5)


@tether.tool
def explode() -> str:
    """Always fails."""
    raise RuntimeError("kaboom")


async def test_errors_set_the_span_status_and_error_type(tmp_path: Path, telemetry: Telemetry) -> None:
    engine, _ = engine_for(tmp_path, failing_script, **telemetry.options)

    @tether.workflow(name="faulty")
    async def faulty(ctx: tether.Ctx) -> Any:
        await ctx.agent("explode it", tools=[explode], label="exploder")
        return await ctx.agent("refuse it", label="refuser")

    out = await engine.run(faulty, run_id="err")
    await engine.close()
    assert out.status == "error"
    by_name = {s.name: s for s in telemetry.finished()}
    tool = by_name["execute_tool explode"]
    assert tool.status.status_code is StatusCode.ERROR and tool.attributes["error.type"] == "tool_error"  # type: ignore[index]
    refuser = by_name["invoke_agent refuser"]
    assert refuser.status.status_code is StatusCode.ERROR and refuser.attributes["error.type"] == "terminal"  # type: ignore[index]
    failed_chat = [s for s in telemetry.named("chat ") if s.status.status_code is StatusCode.ERROR]
    assert len(failed_chat) == 1 and failed_chat[0].attributes["error.type"] == "terminal"  # type: ignore[index]
    run = by_name["workflow faulty"]
    assert run.status.status_code is StatusCode.ERROR and run.attributes["error.type"] == "AgentCallError"  # type: ignore[index]
    assert by_name["invoke_agent exploder"].status.status_code is StatusCode.UNSET


async def test_a_subprocess_tool_gets_the_execute_tool_span_as_traceparent(tmp_path: Path, telemetry: Telemetry) -> None:
    traced = tether.tool(executor="subprocess", timeout_s=30)(trace_tools.traceparent)

    def script(request: ChatRequest) -> Reply:
        if not answered(request):
            return Reply(tool_calls=[ToolCall("traceparent", {"label": "x"})], input_tokens=10, output_tokens=5)
        result = next(m for m in request.messages if m.role == "tool").parts[0]
        return Reply(text=getattr(result, "content", ""))

    engine, _ = engine_for(tmp_path, script, **telemetry.options)

    @tether.workflow(name="traced")
    async def flow(ctx: tether.Ctx) -> Any:
        return await ctx.agent("what is your trace?", tools=[traced], label="tracer")

    out = await engine.run(flow, run_id="tp")
    await engine.close()
    span = telemetry.named("execute_tool traceparent")[0]
    ctx = span.get_span_context()
    assert out.value == f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{ctx.trace_flags:02x}"
    assert ctx.trace_flags.sampled


async def test_otel_true_exports_to_the_global_providers(tmp_path: Path, telemetry: Telemetry,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    from opentelemetry import metrics, trace

    monkeypatch.setattr(trace, "get_tracer_provider", lambda: telemetry.options["tracer_provider"])
    monkeypatch.setattr(metrics, "get_meter_provider", lambda: telemetry.options["meter_provider"])
    engine, _ = engine_for(tmp_path, otel=True)
    await engine.run(study, run_id="g")
    await engine.close()
    assert len(telemetry.named("invoke_agent")) == 2 and telemetry.points("gen_ai.client.token.usage")


async def test_a_spawned_agent_nests_under_the_spawn_tool_call(tmp_path: Path, telemetry: Telemetry) -> None:
    def script(request: ChatRequest) -> Reply:
        if "spawn_agent" in {t.name for t in request.tools} and not answered(request):
            return Reply(tool_calls=[ToolCall("spawn_agent", {"goal": "dig"})], input_tokens=10, output_tokens=5)
        return Reply(text="dug", input_tokens=10, output_tokens=5)

    engine, _ = engine_for(tmp_path, script, **telemetry.options)

    @tether.workflow(name="boss")
    async def boss(ctx: tether.Ctx) -> Any:
        return await ctx.orchestrate("plan", label="boss")

    await engine.run(boss, run_id="sp", containment=tether.Containment(max_agents=3, max_concurrent=2, max_depth=2))
    await engine.close()
    spans = telemetry.finished()
    child = next(s for s in spans if s.name == "invoke_agent spawn: dig")
    tool = parent_of(child, spans)
    assert tool is not None and tool.name == "execute_tool spawn_agent"
    assert parent_of(tool, spans).name == "invoke_agent boss"  # type: ignore[union-attr]
    assert child.attributes["tether.parent_agent_id"] == 1  # type: ignore[index]
    assert [e.name for e in tool.events] == ["spawn"]
