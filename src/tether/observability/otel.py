"""OpenTelemetry export (extra `otel`): GenAI semantic-convention spans and metrics, driven by run events.

An event sink, not hooks in the engine: every span opens and closes on the run's typed events, so
the trace shows exactly what the event stream, the event log and the live view show. Spans:
`workflow NAME` (the run, and child workflows) → `phase NAME` → `invoke_agent LABEL` → `chat MODEL`
(one per provider call) and `execute_tool NAME`. Every segment of a run shares one trace id
(`run_trace_id`); chat spans also carry the cost keys OpenInference (Phoenix, Arize) and Langfuse
read. Attribute table and a crash-safe processor setup (`crash_safe_processor`): docs/observability.md.
"""

from __future__ import annotations

import contextvars
import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import metrics, trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

from tether.contracts.events import (
    AgentEnd,
    AgentStart,
    AgentStream,
    ApprovalPending,
    BaseEvent,
    BudgetRefused,
    ChildEnd,
    ChildStart,
    Event,
    ExternalWaiting,
    LogLine,
    ModelEnd,
    ModelStart,
    PhaseEnd,
    PhaseStart,
    RunEnd,
    RunStart,
    RunWarning,
    SchemaRetry,
    Spawn,
    SpawnRefused,
    ToolEnd,
    ToolStart,
)
from tether.contracts.trace import TRACEPARENT
from tether.contracts.usage import Usage

AttrValue = str | bool | int | float | Sequence[str]
OI_KIND = "openinference.span.kind"
LANGFUSE_TYPE = "langfuse.observation.type"
TOKEN_BUCKETS = [1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864]
DURATION_BUCKETS = [0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92]


def _version() -> str:
    try:
        return metadata.version("tether")
    except metadata.PackageNotFoundError:
        return "0"


def _ns(ts: float) -> int:
    return int(ts * 1e9)


def _model_name(ref: str | None) -> str | None:
    """`adapter:model` → the provider's model name (what `gen_ai.*.model` holds)."""
    return None if ref is None else ref.partition(":")[2] or ref


def _usage(usage: Usage) -> dict[str, AttrValue]:
    attrs: dict[str, AttrValue] = {
        "gen_ai.usage.input_tokens": usage.input_tokens,
        "gen_ai.usage.output_tokens": usage.output_tokens,
    }
    if usage.cache_read_tokens:
        attrs["gen_ai.usage.cache_read.input_tokens"] = usage.cache_read_tokens
    if usage.cache_write_tokens:
        attrs["gen_ai.usage.cache_creation.input_tokens"] = usage.cache_write_tokens
    if usage.reasoning_tokens:
        attrs["gen_ai.usage.reasoning.output_tokens"] = usage.reasoning_tokens
    return attrs


def _spend(usage: Usage, cost_usd: float, *, replayed: bool, call: bool = False) -> dict[str, AttrValue]:
    """What a span used and cost. A live provider call (`call`) also gets the keys backends sum.

    OpenInference (Phoenix prices `llm.token_count.*` of LLM spans with its model table; Arize AX
    keeps `llm.cost.*`) and Langfuse (`gen_ai.usage.cost`, `langfuse.observation.cost_details`). A
    replay was not called or paid again: its journaled figures go under `tether.journaled.*`, so a
    run's trace, which holds every segment, counts each call once.
    """
    if replayed:
        return {"tether.journaled.cost_usd": cost_usd, "tether.journaled.input_tokens": usage.input_tokens,
                "tether.journaled.output_tokens": usage.output_tokens}
    attrs: dict[str, AttrValue] = {"tether.cost_usd": cost_usd, **_usage(usage)}
    if call:
        attrs |= {
            "llm.token_count.prompt": usage.input_tokens, "llm.token_count.completion": usage.output_tokens,
            "llm.token_count.total": usage.input_tokens + usage.output_tokens, "llm.cost.total": cost_usd,
            "gen_ai.usage.cost": cost_usd, "langfuse.observation.cost_details": json.dumps({"total": cost_usd}),
        }
        for key, tokens in (("prompt_details.cache_read", usage.cache_read_tokens),
                            ("prompt_details.cache_write", usage.cache_write_tokens),
                            ("completion_details.reasoning", usage.reasoning_tokens)):
            if tokens:
                attrs[f"llm.token_count.{key}"] = tokens
    return attrs


def _messages(role: str, text: str | None) -> str:
    return json.dumps([{"role": role, "parts": [{"type": "text", "content": text or ""}]}])


def run_trace_id(run_id: str) -> int:
    """The trace id every segment of run `run_id` exports under (`f"{run_trace_id(r):032x}"` to look it up)."""
    return int.from_bytes(hashlib.sha256(f"tether-run:{run_id}".encode()).digest()[:16], "big") or 1


_RUN_TRACE: contextvars.ContextVar[int | None] = contextvars.ContextVar("tether_run_trace", default=None)


class _RunTraceIds:
    """The SDK tracer's id generator, except that a run's root span takes the run's trace id."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def generate_span_id(self) -> int:
        span_id: int = self.inner.generate_span_id()
        return span_id

    def generate_trace_id(self) -> int:
        forced = _RUN_TRACE.get()
        trace_id: int = forced if forced is not None else self.inner.generate_trace_id()
        return trace_id

    def is_trace_id_random(self) -> bool:
        return _RUN_TRACE.get() is None and bool(self.inner.is_trace_id_random())


def crash_safe_processor(exporter: Any, *, max_delay_s: float = 0.1) -> Any:
    """A span processor for processes that may die of SIGKILL: each span is exported as it ends.

    The SDK's default `BatchSpanProcessor(exporter)` holds ended spans up to 5 s (512 of them) and
    loses them all with the process. This one hands every ended span to its export thread at once
    (batches of one, off the event loop; `max_delay_s` bounds a span that arrives mid-export), so a
    killed segment loses only the spans still open. Pair it with a local OpenTelemetry Collector.
    """
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    return BatchSpanProcessor(exporter, max_export_batch_size=1, schedule_delay_millis=max_delay_s * 1000)


@dataclass
class _RunTrace:
    """The open spans of one run, by tether span id, and what the exporter keeps until they close."""

    spans: dict[str, Span] = field(default_factory=dict)
    opened: dict[str, float] = field(default_factory=dict)
    streamed: dict[str, list[str]] = field(default_factory=dict)
    tool_context: dict[str, tuple[contextvars.Token[str | None], object]] = field(default_factory=dict)


class OtelExporter:
    """An event sink that turns each run's events into OpenTelemetry spans and GenAI metrics.

    Prompt and completion text (agent prompts and outputs, streamed replies, tool arguments and
    results, spawn goals) is recorded only with `capture_content=True`. Replayed work makes spans
    marked `tether.replayed` with no duration and records no metrics (nothing was called or paid).
    """

    def __init__(
        self, tracer_provider: Any = None, meter_provider: Any = None, *, capture_content: bool = False
    ) -> None:
        tracer_provider = tracer_provider or trace.get_tracer_provider()
        meter_provider = meter_provider or metrics.get_meter_provider()
        self.capture_content = capture_content
        self._tracer = tracer_provider.get_tracer("tether", _version())
        if hasattr(self._tracer, "id_generator"):  # an SDK tracer (this instance only): runs get their trace id
            self._tracer.id_generator = _RunTraceIds(self._tracer.id_generator)
        meter = meter_provider.get_meter("tether", _version())
        self._tokens = meter.create_histogram(
            "gen_ai.client.token.usage", unit="{token}", description="Tokens used per provider call, by type.",
            explicit_bucket_boundaries_advisory=TOKEN_BUCKETS,
        )
        self._duration = meter.create_histogram(
            "gen_ai.client.operation.duration", unit="s", description="Duration of provider calls.",
            explicit_bucket_boundaries_advisory=DURATION_BUCKETS,
        )
        self._cost = meter.create_counter("tether.cost.usd", unit="USD", description="USD spent on provider calls.")
        self._runs: dict[str, _RunTrace] = {}

    # -- the sink ---------------------------------------------------------------------------
    def emit(self, event: Event) -> None:
        run = self._runs.setdefault(event.run_id, _RunTrace())
        if isinstance(event, RunStart | PhaseStart | ChildStart | AgentStart | ModelStart | ToolStart):
            self._start(run, event)
        elif isinstance(event, RunEnd | PhaseEnd | ChildEnd | AgentEnd | ModelEnd | ToolEnd):
            self._end(run, event)
        elif isinstance(event, AgentStream):
            if self.capture_content and event.span_id is not None:
                run.streamed.setdefault(event.span_id, []).append(event.text)
        elif isinstance(event, LogLine | RunWarning | Spawn | SpawnRefused | BudgetRefused | SchemaRetry
                        | ExternalWaiting | ApprovalPending):
            self._point(run, event)

    def close_run(self, run_id: str) -> None:
        """End whatever the run left open (a crash, a cancellation), innermost first."""
        run = self._runs.pop(run_id, None)
        if run is None:
            return
        for span_id in reversed(list(run.spans)):
            span = run.spans.pop(span_id)
            span.set_attribute("tether.unfinished", True)
            span.end()
        for token, attached in run.tool_context.values():
            self._release(token, attached)

    # -- spans ------------------------------------------------------------------------------
    def _start(self, run: _RunTrace, event: Event) -> None:
        name, kind, attrs = self._opening(event)
        parent = run.spans.get(event.parent_span_id or "") or run.spans.get("run")
        ctx = trace.set_span_in_context(parent) if parent is not None else None
        base: dict[str, AttrValue] = {"tether.run_id": event.run_id, "tether.replayed": event.replayed}
        # A segment's root span takes the run's trace id, so a resume (in any process) joins the trace;
        # a run started inside an application's span joins that span's trace instead.
        forced = _RUN_TRACE.set(run_trace_id(event.run_id) if isinstance(event, RunStart) else None)
        try:
            span = self._tracer.start_span(
                name, context=ctx, kind=kind, attributes=_clean({**base, **attrs}), start_time=_ns(event.ts)
            )
        finally:
            _RUN_TRACE.reset(forced)
        key = event.span_id or "run"
        run.spans[key] = span
        run.opened[key] = event.ts
        if isinstance(event, ToolStart):
            # The tool runs in this task now: its subprocess and its own instrumentation join the trace.
            span_context = span.get_span_context()
            traceparent = f"00-{span_context.trace_id:032x}-{span_context.span_id:016x}-{span_context.trace_flags:02x}"
            attached = otel_context.attach(trace.set_span_in_context(span))
            run.tool_context[key] = (TRACEPARENT.set(traceparent), attached)

    def _opening(self, event: Event) -> tuple[str, SpanKind, dict[str, AttrValue | None]]:
        if isinstance(event, RunStart):
            return f"workflow {event.workflow}", SpanKind.INTERNAL, {
                "gen_ai.operation.name": "invoke_workflow", "tether.workflow": event.workflow, OI_KIND: "CHAIN",
                "tether.resumed": event.resumed, "tether.ceiling_usd": event.ceiling_usd,
                "tether.ceiling_tokens": event.ceiling_tokens, "tether.restored_usd": event.spent_usd,
            }
        if isinstance(event, ChildStart):
            return f"workflow {event.workflow}", SpanKind.INTERNAL, {
                "gen_ai.operation.name": "invoke_workflow", "tether.workflow": event.workflow, OI_KIND: "CHAIN",
                "tether.scope": event.scope, "tether.ceiling_usd": event.ceiling_usd,
            }
        if isinstance(event, PhaseStart):
            return f"phase {event.phase}", SpanKind.INTERNAL, {"tether.phase": event.phase, OI_KIND: "CHAIN"}
        if isinstance(event, AgentStart):
            name = event.label or event.agent_type or f"agent {event.agent_id}"
            attrs: dict[str, AttrValue | None] = {
                "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": name,
                "gen_ai.agent.id": str(event.agent_id), "gen_ai.request.model": _model_name(event.model),
                "gen_ai.provider.name": event.model.partition(":")[0] if event.model else None,
                "tether.agent_id": event.agent_id, "tether.parent_agent_id": event.parent_agent_id,
                "tether.agent_type": event.agent_type, "tether.phase": event.phase,
                OI_KIND: "AGENT", LANGFUSE_TYPE: "agent",  # not a generation: its calls are, and are counted
            }
            if self.capture_content and event.prompt is not None:
                attrs["gen_ai.input.messages"] = _messages("user", event.prompt)
            return f"invoke_agent {name}", SpanKind.INTERNAL, attrs
        if isinstance(event, ModelStart):
            return f"chat {_model_name(event.model)}", SpanKind.CLIENT, {
                "gen_ai.operation.name": "chat", "gen_ai.provider.name": event.provider,
                "gen_ai.request.model": _model_name(event.model), "gen_ai.request.max_tokens": event.max_tokens,
                "tether.agent_id": event.agent_id, "tether.call": event.call, "tether.stage": event.stage,
                OI_KIND: "LLM", LANGFUSE_TYPE: "generation", "llm.model_name": _model_name(event.model),
                "llm.provider": event.provider, "llm.system": event.provider,
            }
        assert isinstance(event, ToolStart)
        attrs = {
            "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": event.tool, "gen_ai.tool.type": "function",
            "gen_ai.tool.call.id": event.call_id, "tether.agent_id": event.agent_id, OI_KIND: "TOOL",
            LANGFUSE_TYPE: "tool",
        }
        if self.capture_content:
            attrs["gen_ai.tool.call.arguments"] = json.dumps(event.args)
        return f"execute_tool {event.tool}", SpanKind.INTERNAL, attrs

    def _end(self, run: _RunTrace, event: Event) -> None:
        key = event.span_id or "run"
        if key not in run.spans:  # replayed or never-started work: an instant span
            self._start(run, _as_start(event))
        span = run.spans.pop(key)
        started = run.opened.pop(key, event.ts)
        attrs, error_type, message = self._closing(run, event, key)
        span.set_attributes(_clean(attrs))
        if error_type is not None:
            span.set_attribute("error.type", error_type)
            span.set_status(Status(StatusCode.ERROR, message))
        if isinstance(event, ToolEnd) and key in run.tool_context:
            self._release(*run.tool_context.pop(key))
        if isinstance(event, ModelEnd) and not event.replayed:
            self._record(event, max(0.0, event.ts - started), error_type)
        span.end(end_time=_ns(started if event.replayed else event.ts))  # a replay has no latency to show

    def _closing(self, run: _RunTrace, event: Event, key: str) -> tuple[dict[str, AttrValue | None], str | None, str]:
        """The closing attributes of a span, its `error.type` (None: not an error) and status message."""
        error_type: str | None
        if isinstance(event, RunEnd):
            failed = event.status in ("error", "cancelled")
            return {
                "tether.status": event.status, "tether.cost_usd": event.cost_usd,
                "tether.spent_usd": round(event.cost_usd - event.orphaned_usd, 10),
                "tether.orphaned_usd": event.orphaned_usd, "tether.orphaned_calls": event.orphaned_calls,
                "tether.reused_usd": event.reused_usd, "tether.reused_calls": event.reused_calls,
                "tether.replay.hits": event.hits, "tether.replay.misses": event.misses, **_usage(event.usage),
            }, (event.error_type or event.status) if failed else None, event.error or event.status
        if isinstance(event, ChildEnd):
            failed = event.status in ("error", "cancelled")
            return {"tether.status": event.status}, event.status if failed else None, event.status
        if isinstance(event, PhaseEnd):
            return {}, event.error_type, event.error_type or ""
        if isinstance(event, AgentEnd):
            attrs: dict[str, AttrValue | None] = {
                "gen_ai.response.model": _model_name(event.served_by), "tether.status": event.status,
                "tether.turns": event.turns, "tether.provider_calls": event.provider_calls,
                "tether.stop_reason": event.reason, **_spend(event.usage, event.cost_usd, replayed=event.replayed),
            }
            if event.finish_reason is not None:
                attrs["gen_ai.response.finish_reasons"] = [event.finish_reason]
            if self.capture_content and event.output is not None:
                attrs["gen_ai.output.messages"] = _messages("assistant", event.output)
            failed = event.error is not None or event.status in ("error", "cancelled")
            error_type = (event.error.kind if event.error else event.status) if failed else None
            return attrs, error_type, event.error.message if event.error else event.status
        if isinstance(event, ModelEnd):
            attrs = {
                "gen_ai.response.model": _model_name(event.model) if event.status == "ok" else None,
                "tether.status": event.status,
                **_spend(event.usage, event.cost_usd, replayed=event.replayed, call=True),
            }
            if event.finish_reason is not None:
                attrs["gen_ai.response.finish_reasons"] = [event.finish_reason]
            if event.replayed:
                attrs["tether.provider_calls"] = event.calls
            text = run.streamed.pop(key, None)
            if self.capture_content and text:
                attrs["gen_ai.output.messages"] = _messages("assistant", "".join(text))
            error_type = (event.error.kind if event.error else event.status) if event.status != "ok" else None
            return attrs, error_type, event.error.message if event.error else event.status
        assert isinstance(event, ToolEnd)
        attrs = {"tether.executed": event.executed, "tether.tool.outcome": event.outcome, "tether.guard": event.guard}
        if self.capture_content and event.result is not None:
            attrs["gen_ai.tool.call.result"] = event.result
        # A call refused or skipped by its tool budget is the budget working, not a failure: no ERROR status.
        failed = event.is_error and event.outcome not in ("refused", "skipped")
        error_type = ("timeout" if event.outcome == "timeout" else "tool_error") if failed else None
        message = (event.result or "") if self.capture_content else (error_type or "")  # results are content
        return attrs, error_type, message

    def _record(self, event: ModelEnd, seconds: float, error_type: str | None) -> None:
        """The GenAI client metrics of one live provider call, and what it cost."""
        attrs: dict[str, AttrValue] = {
            "gen_ai.operation.name": "chat", "gen_ai.provider.name": event.provider,
            "gen_ai.request.model": _model_name(event.model) or event.model,
        }
        if event.status == "ok":
            attrs["gen_ai.response.model"] = _model_name(event.model) or event.model
        self._tokens.record(event.usage.input_tokens, {**attrs, "gen_ai.token.type": "input"})
        self._tokens.record(event.usage.output_tokens, {**attrs, "gen_ai.token.type": "output"})
        self._duration.record(seconds, {**attrs, "error.type": error_type} if error_type else attrs)
        if event.cost_usd:
            self._cost.add(event.cost_usd, attrs)

    def _point(self, run: _RunTrace, event: Event) -> None:
        """A fact inside a span (a log line, a warning, a spawn, a refusal) as a span event."""
        span = run.spans.get(event.span_id or "") or run.spans.get("run")
        if span is None:
            return
        attrs: dict[str, AttrValue | None]
        if isinstance(event, LogLine):
            attrs = {"log.level": event.level, "log.message": event.msg}
        elif isinstance(event, RunWarning):
            attrs = {"tether.warning": event.message}
        elif isinstance(event, BudgetRefused):
            attrs = {"tether.what": event.what, "tether.account": event.account, "tether.message": event.message,
                     "tether.reserve_usd": event.reserve_usd}
        elif isinstance(event, SchemaRetry):
            attrs = {"tether.attempt": event.attempt, "tether.issues": len(event.issues)}
        elif isinstance(event, ExternalWaiting | ApprovalPending):
            attrs = {"tether.key": event.key, "gen_ai.tool.name": getattr(event, "tool", None)}
            if isinstance(event, ApprovalPending):  # the parked agent's span shows what it spent so far
                span.set_attributes(_clean({"tether.cost_usd": event.cost_usd, "tether.parked": True,
                                            "tether.provider_calls": event.provider_calls, **_usage(event.usage)}))
        else:
            assert isinstance(event, Spawn | SpawnRefused)
            attrs = {"tether.agent_id": event.agent_id, "tether.child_agent_id": event.child_agent_id}
            if isinstance(event, SpawnRefused):
                attrs["tether.cap"] = event.detail
            if self.capture_content:
                attrs["tether.goal"] = event.goal if isinstance(event, SpawnRefused) else event.detail
        span.add_event(event.type, attributes=_clean({**attrs, "tether.replayed": event.replayed}),
                       timestamp=_ns(event.ts))

    @staticmethod
    def _release(token: contextvars.Token[str | None], attached: object) -> None:
        try:
            TRACEPARENT.reset(token)
            otel_context.detach(attached)  # type: ignore[arg-type]
        except ValueError:  # ended from another context (a cancelled tool): that context is gone anyway
            pass


def _as_start(event: BaseEvent) -> Event:
    """The opening event an instant span stands on, for an end whose start was never seen (replays)."""
    common = {k: getattr(event, k) for k in ("run_id", "seq", "ts", "span_id", "parent_span_id", "replayed")}
    if isinstance(event, AgentEnd):
        return AgentStart(agent_id=event.agent_id, label=event.label, depth=event.depth, **common)
    if isinstance(event, ModelEnd):
        return ModelStart(agent_id=event.agent_id, label=event.label, depth=event.depth, call=event.call,
                          model=event.model, provider=event.provider, max_tokens=event.max_tokens, **common)
    if isinstance(event, ToolEnd):
        return ToolStart(agent_id=event.agent_id, label=event.label, depth=event.depth, tool=event.tool,
                         call_id=event.call_id, ordinal=event.ordinal, **common)
    if isinstance(event, ChildEnd):
        return ChildStart(workflow=event.workflow, **common)
    if isinstance(event, PhaseEnd):
        return PhaseStart(phase=event.phase, **common)
    assert isinstance(event, RunEnd)
    return RunStart(workflow="?", **common)


def _clean(attrs: Mapping[str, AttrValue | None]) -> dict[str, AttrValue]:
    """OpenTelemetry attributes hold no None."""
    return {k: v for k, v in attrs.items() if v is not None}
