"""One model turn: build the request, clamp its output, pass the budget gates, stream with retries.

Only `BudgetHooks` is consulted for money; nothing here prices anything.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any, Literal

from tether.agents.history import project_history
from tether.agents.host import AgentSpec, LoopHost, ResolvedModel
from tether.agents.state import LoopState
from tether.agents.structured import StructuredTier, plan
from tether.contracts.errors import BudgetExhaustedError
from tether.contracts.events import AgentStream, ModelEnd, ModelStart
from tether.contracts.messages import ChatRequest, Message, OutputFormat, RawPart, TextPart, ToolCallPart, ToolSpec
from tether.contracts.protocols import BudgetHooks
from tether.contracts.results import AgentError, Stage
from tether.contracts.signal import Signal
from tether.contracts.stops import StopReason
from tether.contracts.stream import (
    ChatEvent,
    Finish,
    FinishReason,
    RawPartEvent,
    StreamError,
    TextDelta,
    ToolCallEnd,
    UsageDelta,
)
from tether.contracts.usage import ZERO_USAGE, Usage
from tether.journal.canonical import canonical_json, canonical_str_size, content_key

RETRYABLE_KINDS = frozenset({"transport", "rate-limit"})
FAILOVER_DECISION = "model-failover"


@dataclass
class TurnResult:
    """How a turn settled: `ok` with the assistant message, or `error`/`cancelled`.

    An `ok` turn is not yet an answer: `finish_reason` says whether the reply is complete
    (`max_tokens`: cut; `pause`: to be continued) and the loop decides what it means.
    """

    status: Literal["ok", "error", "cancelled"]
    message: Message | None = None
    tier: StructuredTier = "tool"
    error: AgentError | None = None
    finish_reason: FinishReason | None = None
    """How the provider ended the reply (None when no reply finished)."""
    output_limit: int | None = None
    """The `max_output_tokens` the answering request asked for."""
    budget_clamped: bool = False
    """The budget (money, tree tokens or exposure) lowered that limit below the spec's and the model's."""


@dataclass(slots=True)
class _Streamed:
    """What one provider call produced before its terminal event (or the cut)."""

    text: list[str] | None = None
    calls: list[ToolCallEnd] | None = None
    """(None until the first: most calls bring none, and an empty list is one more object per call in flight)"""
    raw: list[RawPart] | None = None
    fed: Usage = ZERO_USAGE
    usage: Usage = ZERO_USAGE
    """The call's settled usage (the terminal's total, else the metered sum)."""
    terminal: Finish | StreamError | None = None
    cut: bool = False


CEILING_GRACE_S = 0.5
"""How long a call whose own final usage reached the ceiling may take to deliver its terminal event."""


class _CeilingCut:
    """Cuts a call's stream when a ceiling fires, except a reply that is done and paid for.

    A ceiling fired by another call's spend cuts this stream at once: it is still producing. One fired
    by this call's own usage lets the stream deliver its terminal event (the reply is paid, so it is
    kept); more usage after that, or no terminal within `CEILING_GRACE_S`, cuts it.
    """

    __slots__ = ("_timer", "own_usage", "self_fired", "signal")

    def __init__(self) -> None:
        self.signal = Signal()
        self.own_usage = False
        self.self_fired = False
        self._timer: asyncio.TimerHandle | None = None

    def on_ceiling(self, reason: str) -> None:
        if not self.own_usage:
            self.signal.abort(reason)
            return
        self.self_fired = True
        if self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(CEILING_GRACE_S, self.signal.abort, reason)

    __call__ = on_ceiling  # (the budget signal's listener is the cut itself: no bound method per call in flight)

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()


def build_request(
    spec: AgentSpec, model: ResolvedModel, messages: list[Message], max_output_tokens: int | None = None
) -> tuple[ChatRequest, StructuredTier]:
    """The provider-neutral request for `model`, with the structured-output tier its caps allow."""
    history, tools, tool_choice, output_format, tier = _request_parts(spec, model, messages)
    return _request(model.name, history, tools, tool_choice, output_format, spec.effort, max_output_tokens), tier


def _request(
    model: str, messages: tuple[Message, ...], tools: tuple[ToolSpec, ...], tool_choice: str,
    output_format: OutputFormat | None, effort: str | None, max_output_tokens: int | None,
) -> ChatRequest:
    """The request, given only the fields that differ from their defaults (the same request, validated
    faster and with a smaller `model_fields_set`: an adapter holds it for the whole call)."""
    fields: dict[str, Any] = {"model": model, "messages": messages}
    if tools:
        fields["tools"] = tools
    if tool_choice != "auto":
        fields["tool_choice"] = tool_choice
    if output_format is not None:
        fields["output_format"] = output_format
    if effort is not None:
        fields["effort"] = effort
    if max_output_tokens is not None:
        fields["max_output_tokens"] = max_output_tokens
    return ChatRequest(**fields)


_Parts = tuple[tuple[Message, ...], tuple[ToolSpec, ...], str, OutputFormat | None, StructuredTier]


def _request_parts(spec: AgentSpec, model: ResolvedModel, messages: list[Message]) -> _Parts:
    """What a request is made of (history, tools, tool choice, output format) and the structured tier."""
    tier: StructuredTier = model.adapter.caps(model.name).structured_output
    tools = tuple(t.spec for t in spec.tools)
    tool_choice = spec.tool_choice or "auto"
    output_format = None
    system = [spec.system] if spec.system else []
    if spec.output is not None:
        extra = plan(spec.output, tier, has_tools=bool(tools))
        tools += extra.tools
        tool_choice = extra.tool_choice or tool_choice
        output_format = extra.output_format
        system += [extra.system_note] if extra.system_note else []
    history = project_history(messages, model.adapter.family)
    if system:
        history = (Message.text("system", "\n\n".join(system)), *history)
    return history, tools, tool_choice, output_format, tier


def estimate_input_tokens(request: ChatRequest, sizes: dict[int, tuple[Any, int]] | None = None) -> int:
    """A deterministic chars/4 guess of the prompt size, for the clamp and exposure gates.

    The size is the length of the canonical JSON of `[*messages, *tools]`, summed item by item (an
    array's bytes are its items' joined by commas), so with a `sizes` cache a turn only measures what
    it added instead of the whole transcript again.
    """
    return _estimate(request.messages, request.tools, request.output_format, sizes)


def estimate_prompt_tokens(spec: AgentSpec, model: ResolvedModel, messages: list[Message]) -> int:
    """`estimate_input_tokens` of the request `build_request` would make, without building it (the sizes it
    measures are kept in `spec.measured`)."""
    history, tools, _, output_format, _ = _request_parts(spec, model, messages)
    return _estimate(history, tools, output_format, spec.measured)


def _estimate(
    messages: tuple[Message, ...], tools: tuple[ToolSpec, ...], output_format: OutputFormat | None,
    sizes: dict[int, tuple[Any, int]] | None,
) -> int:
    items: list[Message | ToolSpec] = [*messages, *tools]
    size = 2 + max(0, len(items) - 1)
    for item in items:
        hit = sizes.get(id(item)) if sizes is not None else None
        if hit is not None and hit[0] is item:
            size += hit[1]
            continue
        n = _canonical_size(item)
        if sizes is not None:
            sizes[id(item)] = (item, n)  # the item is held too, so its id cannot be reused meanwhile
        size += n
    if output_format is not None:
        size += len(canonical_json(output_format.schema_))
    return max(1, size // 4)


_TEXT_MESSAGE = len(b'{"parts":[{"text":,"type":"text"}],"role":""}')
"""The canonical bytes of a one-text-part message besides its text and its role."""


def _canonical_size(item: Message | ToolSpec) -> int:
    """`len(canonical_json(item))`; a message of one text part (most prompts) is counted without dumping it (its
    bytes are `{"parts":[{"text":<text>,"type":"text"}],"role":"<role>"}`: a property test holds the two equal)."""
    if type(item) is Message and len(item.parts) == 1 and type(item.parts[0]) is TextPart:
        n = canonical_str_size(item.parts[0].text)
        if n is not None:
            return _TEXT_MESSAGE + len(item.role) + n
    return len(canonical_json(item))


def budget_error(exc: BudgetExhaustedError, stage: Stage) -> AgentError:
    """A budget refusal as an `AgentError`, keeping the refusal's typed `reason`."""
    return AgentError(kind="budget", message=exc.message, reason=StopReason.parse(exc.data.get("reason")), stage=stage,
                      evidence=exc.data.get("evidence"))


def fired_cause(budget: Signal) -> StopReason:
    """Which ceiling a fired budget signal stands for (an account's signal says; USD unless it is the tokens')."""
    return budget.cause or StopReason.USD_CEILING


class Dispatcher:
    """Runs model turns for one invocation; accounts usage and provider calls into the state."""

    __slots__ = ("_sizes", "hooks", "host", "purpose", "signal", "spec", "state")

    def __init__(
        self,
        spec: AgentSpec,
        host: LoopHost,
        hooks: BudgetHooks,
        state: LoopState,
        signal: Signal | None,
        purpose: str | None = None,
    ) -> None:
        self.spec, self.host, self.hooks, self.state, self.signal = spec, host, hooks, state, signal
        self._sizes = spec.measured  # canonical sizes of the messages already measured
        self.purpose = purpose
        """What the calls are for besides a turn (`"compaction"`), journaled on their dispatch facts."""

    async def turn(self, stage: Stage) -> TurnResult:
        """One turn: retry retryable errors, then fail over to the next model; first settle wins."""
        last: AgentError | None = None
        policy = self.spec.retry
        index = self.state.model_index
        while index < len(self.spec.models):
            self.state.model_index = index
            model = self.spec.models[index]
            for attempt in range(max(1, policy.attempts)):
                result = await self._attempt(model, stage)
                if result.status != "error" or result.error is None:
                    return result
                if result.error.kind not in RETRYABLE_KINDS:
                    return result
                last = result.error
                if attempt + 1 < policy.attempts:
                    await self.host.sleep(self._backoff(model, attempt, last))
                    if self.signal is not None and self.signal.aborted:
                        return TurnResult("cancelled")
            if last is None or index + 1 >= len(self.spec.models):
                break
            index = await self._fail_over(index, last)
        return TurnResult("error", error=last)

    async def _fail_over(self, index: int, error: AgentError) -> int:
        """Journal the switch to the next model (which failed, why, which serves) and return its index.

        On resume the journaled decision is read back, never written twice: entries of earlier
        failovers that the restored checkpoint already holds are passed over, like numbered grants.
        """
        models = self.spec.models
        payload: dict[str, Any] = {
            "from_index": index,
            "failed": models[index].ref,
            "kind": error.kind,
            "why": error.message,
            "served_by": models[index + 1].ref,
            "turn": self.state.turns + 1,
        }
        decided = payload
        for _ in range(index + 1):
            decided = await self.host.decide(FAILOVER_DECISION, payload)
            if int(decided.get("from_index", index)) >= index:
                break
        later = [m.ref for m in models[index + 1 :]]
        served = decided.get("served_by")
        target = index + 1 + later.index(served) if served in later else index + 1
        self.state.model_index = target
        await self.host.save_checkpoint(self.state)  # a resume starts this turn on the model that serves
        return target

    def _backoff(self, model: ResolvedModel, attempt: int, error: AgentError) -> float:
        """Doubling backoff, jittered by a hash (no rng), never below the retry-after."""
        policy = self.spec.retry
        delay = min(policy.max_s, policy.base_s * 2.0**attempt)
        seed = content_key([self.host.run_id, self.state.turns, model.ref, attempt])
        delay *= 0.5 + 0.5 * int(seed[:8], 16) / 0xFFFFFFFF
        if error.retry_after_ms is not None:
            delay = max(delay, error.retry_after_ms / 1000)
        return delay

    def _clamp(self, model: ResolvedModel, est_input: int, stage: Stage) -> int | TurnResult:
        """The output tokens this attempt may ask for, or the output-floor refusal."""
        caps = model.adapter.caps(model.name)
        limit = self._natural_limit(model)
        affordable = self.hooks.max_affordable_output_tokens(model.ref, est_input)
        if affordable is not None:
            if affordable < caps.output_floor:
                limited_by = self.hooks.limited_by()
                left = "the tree token ceiling leaves it" if limited_by == "tokens" else "the remaining budget buys"
                message = (
                    f"output floor unaffordable: {model.ref} needs at least {caps.output_floor} "
                    f"output tokens, {left} {affordable}"
                )
                error = AgentError(
                    kind="budget", message=message, reason=StopReason.OUTPUT_FLOOR, stage=stage,
                    limited_by=limited_by
                )
                return TurnResult("error", error=error)
            limit = min(limit, affordable)
        exposure = self.hooks.max_exposure_output_tokens(model.ref, est_input)
        # Below the floor the exposure answer is ignored: admission refuses with its own reason.
        if exposure is not None and exposure >= caps.output_floor:
            limit = min(limit, exposure)
        return limit

    def _natural_limit(self, model: ResolvedModel) -> int:
        """The output limit without the budget: the spec's (None: none) and the model's cap."""
        cap = model.adapter.caps(model.name).max_output_tokens
        return cap if self.spec.max_output_tokens is None else min(self.spec.max_output_tokens, cap)

    async def _attempt(self, model: ResolvedModel, stage: Stage) -> TurnResult:
        history, tools, tool_choice, output_format, tier = _request_parts(self.spec, model, self.state.messages)
        est_input = _estimate(history, tools, output_format, self._sizes)
        clamp = self._clamp(model, est_input, stage)
        if isinstance(clamp, TurnResult):
            return clamp
        request = _request(model.name, history, tools, tool_choice, output_format, self.spec.effort, clamp)
        del history, tools, output_format  # the request holds them while the call is in flight
        self.hooks.assert_priced_dispatch(model.ref)  # PricingError propagates: a config problem
        while True:
            try:
                release = self.hooks.admit_turn_exposure(model.ref, est_input, clamp)
                break
            except BudgetExhaustedError as exc:
                reason = StopReason.parse(exc.data.get("reason"))
                # The hard ceiling always waits for in-flight worst cases; the exposure cap only when opted in.
                waits = reason is StopReason.IN_FLIGHT or (
                    self.spec.exposure_wait and reason is StopReason.EXPOSURE_CAP)
                if not waits:
                    return TurnResult("error", error=budget_error(exc, stage))
                waited = await self.hooks.await_exposure_release(self.signal)
                if waited == "aborted":
                    return TurnResult("cancelled")
                if waited in ("drained", "timeout"):
                    why = "nothing in flight to wait for" if waited == "drained" else "no call in flight settled"
                    message = f"exposure drained: {why} ({exc.message})"
                    error = AgentError(kind="budget", message=message, reason=StopReason.EXPOSURE_DRAINED, stage=stage)
                    return TurnResult("error", error=error)
                clamp = self._clamp(model, est_input, stage)  # the room changed: plan the turn again
                if isinstance(clamp, TurnResult):
                    return clamp
                request = request.model_copy(update={"max_output_tokens": clamp})
        self.state.provider_calls += 1
        cut = _CeilingCut()
        # subscription tokens (ints), not unsubscriber objects: nothing more per call in flight
        cancel, budget = self.signal, self.hooks.signal
        on_cancel = cancel.listen(cut.signal) if cancel is not None else -1
        on_budget = budget.listen(cut) if budget is not None else -1
        call = self.state.provider_calls
        try:
            try:
                if self.purpose is None:  # durable before the request leaves
                    await self.host.record_dispatch(model.ref, est_input, clamp)
                else:
                    await self.host.record_dispatch(model.ref, est_input, clamp, purpose=self.purpose)
            except BudgetExhaustedError as exc:  # a budget across runs cannot cover it: nothing was sent
                self.state.provider_calls -= 1
                return TurnResult("error", error=budget_error(exc, stage))
            self.host.emit(ModelStart(call=call, model=model.ref, provider=model.adapter.id, max_tokens=clamp,
                                      stage=stage))
            # the stream, consumed here (not in a coroutine of its own: one less per call in flight)
            streamed = _Streamed()
            cut_signal = cut.signal
            meter = self.hooks.open_call_meter(model.ref)
            stream: AsyncIterator[ChatEvent] = model.adapter.stream(request, cut_signal)
            try:
                async for event in stream:
                    if isinstance(event, Finish | StreamError):
                        streamed.terminal = _refuse_negative(model, event.usage) or event
                        break
                    if isinstance(event, UsageDelta) and (
                            refused := _refuse_negative(model, event.usage)) is not None:
                        streamed.terminal = refused  # never a credit: the usage that arrived before it stays billed
                        break
                    spending = isinstance(event, UsageDelta) and not event.usage.is_zero()
                    after_own_fire = cut.self_fired
                    cut.own_usage = spending
                    try:
                        self._on_event(model, event, streamed, meter)
                    finally:
                        cut.own_usage = False
                    if spending and after_own_fire:
                        cut_signal.abort("ceiling reached and the stream kept spending")  # still producing: cut it
                    if cut_signal.aborted:
                        streamed.cut = True
                        break
            except OSError as exc:  # a transport failure the adapter did not map
                unsent = isinstance(exc, ConnectionRefusedError | socket.gaierror)
                streamed.terminal = StreamError(kind="transport", message=str(exc), retryable=True,
                                                reached=not unsent)
            finally:
                aclose = getattr(stream, "aclose", None)
                if aclose is not None:
                    await aclose()
            if streamed.terminal is None and not streamed.cut:
                if cut_signal.aborted:
                    streamed.cut = True
                else:
                    msg = "stream ended without a terminal event"
                    streamed.terminal = StreamError(kind="transport", message=msg, retryable=True)
            total = streamed.usage = _call_usage(streamed, est_input, clamp)
            self._feed(model, meter, total.minus(streamed.fed))
            self._account(model, total)
        finally:
            cut.close()
            if cancel is not None:
                cancel.unlisten(on_cancel)
            if budget is not None:
                budget.unlisten(on_budget)
            if release is not None:
                release()
        result = self._settle(model, streamed, stage)
        self.host.emit(ModelEnd(
            call=call, model=model.ref, provider=model.adapter.id, status=result.status, usage=streamed.usage,
            finish_reason=result.finish_reason, max_tokens=clamp, error=result.error,
        ))
        if isinstance(streamed.terminal, StreamError) and not streamed.cut:
            # The attempt failed: what it held is released before a retry is sized, and a request that never
            # left is no provider call (it cost nothing).
            reached = streamed.terminal.reached
            if not reached:
                self.state.provider_calls -= 1
            await self.host.end_attempt(self.state.turns + 1, reached=reached)
        result.tier = tier
        result.output_limit, result.budget_clamped = clamp, clamp < self._natural_limit(model)
        return result

    def _on_event(
        self,
        model: ResolvedModel,
        event: ChatEvent,
        out: _Streamed,
        meter: Callable[[Usage], None] | None,
    ) -> None:
        if isinstance(event, TextDelta):
            if out.text is None:
                out.text = [event.text]
            else:
                out.text.append(event.text)
            so_far = self.state.usage + out.fed
            self.host.emit(AgentStream(call=self.state.provider_calls, model=model.ref, text=event.text, usage=so_far))
        elif isinstance(event, ToolCallEnd):
            if out.calls is None:
                out.calls = [event]
            else:
                out.calls.append(event)
        elif isinstance(event, RawPartEvent):
            if out.raw is None:
                out.raw = [event.part]
            else:
                out.raw.append(event.part)
        elif isinstance(event, UsageDelta):
            self._feed(model, meter, event.usage)
            out.fed = out.fed + event.usage

    def _feed(
        self, model: ResolvedModel, meter: Callable[[Usage], None] | None, delta: Usage
    ) -> None:
        """Live accounting: the per-call meter when the hooks opened one, else `on_usage`."""
        if delta.is_empty():
            return
        if meter is not None:
            meter(delta)
        else:
            self.hooks.on_usage(delta, model.ref)

    def _account(self, model: ResolvedModel, usage: Usage) -> None:
        state = self.state
        state.usage = state.usage + usage
        state.usage_by_model[model.ref] = state.usage_by_model.get(model.ref, ZERO_USAGE) + usage
        state.served_by = model.ref

    def _settle(self, model: ResolvedModel, out: _Streamed, stage: Stage) -> TurnResult:
        terminal = out.terminal
        if out.cut or (isinstance(terminal, Finish) and terminal.reason == "cancelled"):
            return self._cancelled(stage)
        if isinstance(terminal, StreamError):
            error = AgentError(
                kind=terminal.kind,
                message=terminal.message,
                retryable=terminal.kind in RETRYABLE_KINDS,
                retry_after_ms=terminal.retry_after_ms,
            )
            return TurnResult("error", error=error)
        assert terminal is not None  # the stream loop leaves a terminal unless the stream was cut
        reason: FinishReason = "other" if terminal.reason == "cancelled" else terminal.reason
        if reason in ("refusal", "content_filter"):
            error = AgentError(kind="terminal", message=_declined(model, reason, "".join(out.text or ())))
            return TurnResult("error", error=error, finish_reason=reason)
        return TurnResult("ok", message=self._message(out, reason), finish_reason=reason)

    def _cancelled(self, stage: Stage) -> TurnResult:
        """A cut stream: the caller's cancellation, else a budget cut."""
        budget = self.hooks.signal
        budget_fired = budget is not None and budget.aborted
        if self.signal is not None and self.signal.aborted and not budget_fired:
            return TurnResult("cancelled")
        fired = budget is not None and budget.aborted
        why = budget.reason if budget is not None and fired else "provider cancelled"
        cause = fired_cause(budget) if budget is not None and fired else StopReason.PROVIDER_CANCELLED
        message = f"stream cut by the budget: {why}"
        return TurnResult(
            "cancelled", error=AgentError(kind="budget", message=message, reason=cause, stage=stage)
        )

    def _message(self, out: _Streamed, reason: FinishReason) -> Message:
        """The assistant message; tool-call ids are minted here: `call_<turn>_<index>`.

        A reply cut by the output limit keeps no tool calls: a cut turn never runs a tool.
        """
        turn = self.state.turns + 1
        parts: list[Any] = list(out.raw or ())
        text = "".join(out.text or ())
        if text:
            parts.append(TextPart(text=text))
        ordered = [] if reason == "max_tokens" else sorted(out.calls or (), key=lambda c: c.index)
        parts += [
            ToolCallPart(id=f"call_{turn}_{i}", name=c.name, args=dict(c.args))
            for i, c in enumerate(ordered)
        ]
        return Message(role="assistant", parts=tuple(parts))


_COUNTS = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens", "reasoning_tokens")


def _call_usage(out: _Streamed, est_input: int, limit: int) -> Usage:
    """The call's usage: the terminal's total, else the metered sum; approximate if cut.

    A call that streamed output and then failed or was cut before the provider reported any usage is charged
    an estimate (the request's input estimate plus the streamed characters / 4, at most the output limit),
    marked approximate: the provider bills what it generated, so charging 0 would let spend pass the ceiling.
    """
    reported: Usage | None = out.terminal.usage if out.terminal is not None else None
    usage = reported if reported is not None else out.fed
    cancelled = isinstance(out.terminal, Finish) and out.terminal.reason == "cancelled"
    failed = out.cut or isinstance(out.terminal, StreamError)
    if failed and reported is None and usage.is_empty():
        chars = sum(map(len, out.text or ())) + sum(len(call.name) + len(str(call.args)) for call in out.calls or ())
        if chars:
            usage = Usage(input_tokens=est_input, output_tokens=min(limit, -(-chars // 4)), approximate=True)
    if out.cut or cancelled:
        usage = usage.model_copy(update={"approximate": True})
    return usage


def _refuse_negative(model: ResolvedModel, usage: Usage | None) -> StreamError | None:
    """A negative count in reported usage ends the call as a `terminal` error (whatever the adapter)."""
    if usage is None:
        return None
    bad = [f"{name}={n}" for name in _COUNTS if (n := getattr(usage, name)) < 0]
    if not bad:
        return None
    return StreamError(kind="terminal", message=(
        f"{model.ref} reported negative usage ({', '.join(bad)}); the reply is refused and nothing is "
        f"credited. Fix the adapter, or the cassette or recorded body it replays."
    ))


def _declined(model: ResolvedModel, reason: FinishReason, text: str) -> str:
    """The error message of a refused or filtered reply, with what the model said."""
    said = text.strip()[:500]
    if reason == "refusal":
        head = f"{model.ref} refused to answer"
        hint = "rephrase the prompt or route to another model"
    else:
        head = f"{model.ref}'s provider stopped the reply with its content filter"
        hint = "change the prompt or route to another model"
    return f'{head}: "{said}"; {hint}.' if said else f"{head} (no text); {hint}."
