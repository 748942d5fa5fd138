"""The agent loop: model turn → tool calls → checkpoint, until an answer or a stop.

Stops: a final text (no output schema) or a validated output; `max_turns` (checked before each
dispatch); tool budget expiry (after the finalization reserve's summary turn when configured); no
progress for `no_progress_turns` turns; a reply cut by the output limit (`limit`); a second empty
reply in a row; a budget refusal or cut; cancellation; a refusal or a non-retryable provider error.
Money is seen only through `BudgetHooks`.
"""

from __future__ import annotations

from collections.abc import Coroutine
from dataclasses import replace
from typing import Any

from tether.agents.compaction import Compactor
from tether.agents.dispatch import Dispatcher, TurnResult, budget_error, fired_cause
from tether.agents.host import AgentSpec, LoopHost
from tether.agents.state import CHECKPOINT_VERSION, LoopState, PendingBatch
from tether.agents.structured import (
    EMIT_RESULT,
    StructuredTier,
    from_call,
    from_text,
    reprompt_text,
)
from tether.agents.tool_budget import ToolBudgetGate
from tether.agents.toolcalls import ToolRunner
from tether.contracts.errors import BudgetExhaustedError, ConfigError
from tether.contracts.events import AgentEnd, AgentFailed, AgentStart, SchemaIssue, SchemaRetry
from tether.contracts.messages import Message, TextPart, ToolCallPart, ToolResultPart
from tether.contracts.protocols import BudgetHooks
from tether.contracts.results import AgentError, AgentResult, AgentStatus, Stage
from tether.contracts.signal import Signal
from tether.contracts.stops import StopReason
from tether.journal.canonical import canonical_json, content_key, to_jsonable
from tether.tools.definition import Issue

MAX_PAUSE_CONTINUATIONS = 4
"""Paused replies (Anthropic `pause_turn`) continued in a row before the invocation settles `limit`."""
MAX_EMPTY_REASKS = 1
"""Empty replies re-asked before the invocation settles `error` ("no content")."""
REASON_CHARS = 300
"""How much of the last validator's messages a `schema-mismatch` error's message carries (`issues` holds them all)."""


def _no_emit_issue() -> Issue:
    return {"loc": [], "msg": f"the reply did not call `{EMIT_RESULT}`", "type": "missing_result"}


def _cut_issue(limit: int | None) -> Issue:
    at = f" at {limit} tokens" if limit is not None else ""
    msg = f"the reply was cut by the output limit{at} before the output was complete; answer more briefly"
    return {"loc": [], "msg": msg, "type": "truncated"}


def run_agent(
    spec: AgentSpec, host: LoopHost, hooks: BudgetHooks, *, signal: Signal | None = None
) -> Coroutine[Any, Any, AgentResult]:
    """Run (or continue from the host's checkpoint) one agent invocation to its `AgentResult`.

    One coroutine per invocation in flight (`_AgentLoop.run`), not a wrapper awaiting it (docs/performance.md)."""
    return _AgentLoop(spec, host, hooks, signal).run()


def cut_error(hooks: BudgetHooks, message: str, stage: Stage) -> AgentError:
    """The `budget` error of a reply the budget's clamp cut short, naming the ceiling that set the limit (typed,
    so a resume that replays the cut stops on the same ceiling: the tree's tokens are not at theirs)."""
    limited_by = hooks.limited_by()
    reason = StopReason.TOKEN_CEILING if limited_by == "tokens" else StopReason.USD_CEILING
    return AgentError(kind="budget", message=message, reason=reason, limited_by=limited_by, stage=stage)


def end_event(result: AgentResult, *, reason: str | None = None, provider_calls: int = 0) -> AgentEnd:
    """The `agent:end` of a settled invocation (the host adds its ids and journaled cost)."""
    return AgentEnd(**end_fields(result, reason=reason, provider_calls=provider_calls))


def end_fields(result: AgentResult, *, reason: str | None = None, provider_calls: int = 0) -> dict[str, Any]:
    """The fields of `end_event(result, ...)`."""
    return {
        "status": result.status, "output": output_summary(result.output), "usage": result.usage,
        "cost_usd": result.cost_usd, "turns": result.turns, "served_by": result.served_by,
        "finish_reason": result.finish_reason, "tool_budget": result.tool_budget, "error": result.error,
        "reason": reason, "provider_calls": provider_calls, "agent_id": result.agent_id,
        "parent_agent_id": result.parent_agent_id,
    }


def output_summary(output: Any, limit: int = 500) -> str | None:
    """An output as a short text for telemetry: text as it is, anything else as compact JSON; cut to `limit`."""
    if output is None:
        return None
    if isinstance(output, str):
        text = output
    else:
        try:
            text = canonical_json(to_jsonable(output)).decode()
        except Exception:
            text = repr(output)
    return text if len(text) <= limit else text[: limit - 1] + "…"


class _AgentLoop:
    __slots__ = ("_gate", "_tools", "compactor", "dispatcher", "hooks", "host", "signal", "spec", "state",
                 "stop_reason")

    def __init__(self, spec: AgentSpec, host: LoopHost, hooks: BudgetHooks, signal: Signal | None) -> None:
        self.spec, self.host, self.hooks, self.signal = spec, host, hooks, signal
        self.stop_reason: str | None = None

    async def _open(self) -> LoopState:
        """The invocation's state (restored from the host's checkpoint, or new) and the parts that work on it."""
        spec, host, hooks, signal = self.spec, self.host, self.hooks, self.signal
        if not spec.models:
            raise ConfigError("an agent needs at least one model; routing resolved none")
        restored = await host.load_checkpoint()
        if restored is not None and restored.version != CHECKPOINT_VERSION:
            restored = None  # a checkpoint this version cannot read is never trusted: start over
        state = restored if restored is not None else LoopState.start(spec.prompt, spec.opening, spec.history)
        state.model_index = min(state.model_index, len(spec.models) - 1)
        self.state = state
        self.dispatcher = Dispatcher(spec, host, hooks, state, signal)
        # The tool budget's gate and the tool runner are made when first needed (a budget is checked here): an
        # invocation without tools makes neither, two objects fewer per agent in flight.
        self._gate = ToolBudgetGate(spec.tool_budget, host, hooks, state) if spec.tool_budget is not None else None
        self._tools: ToolRunner | None = None
        self.compactor = Compactor(spec, spec.context, host, hooks, state, signal) if spec.context else None
        host.emit(AgentStart(
            label=spec.label, agent_type=spec.agent_type, model=spec.models[0].ref,
            resumed=restored is not None, turns=state.turns, prompt=spec.prompt[:2_000],
        ))
        return state

    @property
    def gate(self) -> ToolBudgetGate:
        if self._gate is None:
            self._gate = ToolBudgetGate(self.spec.tool_budget, self.host, self.hooks, self.state)
        return self._gate

    @property
    def tools(self) -> ToolRunner:
        if self._tools is None:
            self._tools = ToolRunner(self.spec, self.host, self.state, self.gate)
        return self._tools

    def _closed(self, result: AgentResult) -> AgentResult:
        if result.error is not None:
            self.host.emit(AgentFailed(status=result.status, error=result.error))
        self.host.emit(end_event(result, reason=self.stop_reason, provider_calls=self.state.provider_calls))
        return result

    async def run(self) -> AgentResult:
        """The invocation: its turns until it ends (every `return` through `_closed`, which emits the end)."""
        state = await self._open()
        if state.braked is not None:  # a brake stopped it before a crash: it stops there again, paying nothing
            return self._closed(self._braked(state.braked))
        while True:
            if self.signal is not None and self.signal.aborted:
                return self._closed(self._finish("cancelled", reason="cancelled"))
            if state.pending is not None:  # a resumed batch: finish the same turn first
                await self.tools.run_pending()
                await self.host.save_checkpoint(state)
                continue
            if state.tool_budget.expired is not None:
                return self._closed(await self._on_expiry())
            stage: Stage = "extract" if state.reprompting else "loop"
            refused = self._budget_guard(stage)
            if refused is not None:
                return self._closed(refused)
            if state.turns >= self.spec.max_turns:
                return self._closed(self._finish("limit", reason="max-turns"))
            if self.compactor is not None and (failed := await self.compactor.fit()) is not None:
                return self._closed(self._failed(failed))
            calls_before = state.provider_calls  # `_dispatch` inlined: one coroutine less per agent in flight
            turn = await self.dispatcher.turn(stage)
            if state.provider_calls > calls_before:
                state.turns += 1
                state.finish_reason = turn.finish_reason
            if turn.status != "ok" or turn.message is None:
                if self.compactor is not None and turn.error is not None and turn.error.kind == "context-overflow":
                    turn = await self._after_overflow(self.compactor, turn, stage)
                if turn.status != "ok" or turn.message is None:
                    return self._closed(self._failed(turn))
            state.reprompting = False
            done = await self._on_reply(turn, stage)
            if done is not None:
                return self._closed(done)

    def _failed(self, turn: TurnResult) -> AgentResult:
        """A turn that brought no reply ends the invocation (a context overflow says so in its reason)."""
        error = turn.error
        if error is not None and error.kind == "context-overflow":
            return self._finish("error", error=error, reason="context-overflow")
        return self._finish(turn.status, error=error, reason=turn.status)

    async def _after_overflow(self, compactor: Compactor, turn: TurnResult, stage: Stage) -> TurnResult:
        """The provider refused the request as too long: compact once (toward half of it) and ask again; a second
        refusal is returned as it is (the invocation ends `context-overflow`)."""
        done = self.state.compactions
        failed = await compactor.compact("overflow", compactor.estimate(self.state.messages) // 2)
        if failed is not None:
            return failed
        if self.state.compactions == done:  # nothing left to compact: asking again would be refused again
            return turn
        return await self._dispatch(self.dispatcher, stage)

    async def _dispatch(self, dispatcher: Dispatcher, stage: Stage) -> TurnResult:
        """One model turn; every turn that reached the provider counts, and its finish reason is kept."""
        state = self.state
        calls_before = state.provider_calls
        turn = await dispatcher.turn(stage)
        if state.provider_calls > calls_before:
            state.turns += 1
            state.finish_reason = turn.finish_reason
        return turn

    async def _on_reply(self, turn: TurnResult, stage: Stage) -> AgentResult | None:
        """Decide what the reply means: an answer, a cut, a continuation, a re-prompt or a tool batch."""
        message, tier = turn.message, turn.tier
        assert message is not None
        if turn.finish_reason == "max_tokens":
            return await self._on_cut(turn, stage)
        calls = message.tool_calls
        if turn.finish_reason == "pause" and not calls:
            return await self._on_pause(message)
        self.state.pauses = 0
        if not calls and not message.text_content.strip():
            return await self._on_empty()
        self.state.empty_replies = 0
        self.state.messages.append(message)
        output = self.spec.output
        if output is not None and tier == "tool":
            emits = [c for c in calls if c.name == EMIT_RESULT]
            if emits:
                got = from_call(output, emits[0])
                if got.ok:
                    return self._finish("ok", output=got.value)
                return await self._schema_retry(got.issues, tier, calls, emits)
            if not calls:
                return await self._schema_retry([_no_emit_issue()], tier, calls, [])
        elif not calls:
            if output is None:
                return self._finish("ok", output=message.text_content)
            got = from_text(output, message.text_content)
            if got.ok:
                return self._finish("ok", output=got.value)
            return await self._schema_retry(got.issues, tier, calls, [])
        return await self._tool_batch(calls)

    async def _on_cut(self, turn: TurnResult, stage: Stage) -> AgentResult | None:
        """A reply cut by the output limit never settles `ok` and never runs a tool.

        Structured output is re-prompted; a text answer settles `limit` with the partial text, as a
        `budget` error (with its stage) when the budget's clamp set the limit.
        """
        state, message = self.state, turn.message
        assert message is not None
        state.pauses = state.empty_replies = 0
        if message.parts:
            state.messages.append(message)
        if self.spec.output is not None:
            return await self._schema_retry([_cut_issue(turn.output_limit)], turn.tier, [], [])
        error = None
        if turn.budget_clamped:
            error = cut_error(
                self.hooks,
                f"the reply was cut at {turn.output_limit} output tokens, the most the remaining "
                "budget allows (the paid partial output is on the error's data)",
                stage,
            )
        return self._finish("limit", output=message.text_content or None, error=error, reason="max-tokens")

    async def _on_pause(self, message: Message) -> AgentResult | None:
        """A paused reply is sent back as it is so the provider continues the turn (bounded)."""
        state = self.state
        if state.pauses >= MAX_PAUSE_CONTINUATIONS:
            return self._finish("limit", output=message.text_content or None, reason="pause")
        state.pauses += 1
        if message.parts:
            state.messages.append(message)
        await self.host.save_checkpoint(state)
        return None

    async def _on_empty(self) -> AgentResult | None:
        """An empty reply (no text, no tool call) is re-asked once; a second one settles `error`."""
        state = self.state
        state.last_batch_key = None
        if state.empty_replies >= MAX_EMPTY_REASKS:
            asked = state.empty_replies + 1
            error = AgentError(
                kind="terminal",
                message=(
                    f"{state.served_by or 'the model'} returned no content (no text and no tool call) "
                    f"{asked} times in a row; check the model and its provider, or route to another model"
                ),
            )
            return self._finish("error", error=error, reason="no-content")
        state.empty_replies += 1
        await self.host.save_checkpoint(state)
        return None

    async def _schema_retry(
        self,
        issues: list[Issue],
        tier: StructuredTier,
        calls: list[ToolCallPart],
        emits: list[ToolCallPart],
    ) -> AgentResult | None:
        """Re-prompt with the issues, or settle `schema-mismatch` once the re-prompts are spent."""
        state = self.state
        if state.schema_retries_used >= self.spec.schema_retries:
            reason = _validation_reason(issues)
            error = AgentError(
                kind="schema-mismatch",
                message=f"output failed validation after {state.schema_retries_used} re-prompts"
                + (f": {reason}" if reason else ""),
                issues=issues,
            )
            return self._finish("error", error=error, reason="schema-mismatch")
        state.schema_retries_used += 1
        state.reprompting = True
        self.host.emit(SchemaRetry(attempt=state.schema_retries_used, issues=[_issue(i) for i in issues]))
        text = reprompt_text(issues, tier)
        if emits:
            # The re-prompt rides the emit_result tool results; the batch's other calls still run.
            prefilled = {
                c.id: ToolResultPart(call_id=c.id, name=c.name, content=text, is_error=True)
                for c in emits
            }
            return await self._tool_batch(calls, prefilled)
        state.messages.append(Message.text("user", text))
        await self.host.save_checkpoint(state)
        return None

    async def _tool_batch(
        self, calls: list[ToolCallPart], prefilled: dict[str, ToolResultPart] | None = None
    ) -> AgentResult | None:
        """Checkpoint the batch (so a crash never re-pays the model call), then run it."""
        state = self.state
        key = content_key([[c.name, c.args] for c in calls])
        prior = state.no_progress
        state.no_progress = prior + 1 if key == state.last_batch_key else 0
        state.last_batch_key = key
        if self._stalled():
            return await self._brake(calls[0], state.no_progress, self.spec.no_progress_turns, "no-progress")
        limit = self.spec.max_identical_tool_calls
        if limit is not None:
            repeated = self._count_calls([c for c in calls if c.id not in (prefilled or {})], limit)
            if repeated is not None:
                return await self._brake(repeated, state.call_counts[_call_key(repeated)], limit,
                                         "identical-tool-calls")
        state.pending = PendingBatch(
            turn=state.turns,
            calls=calls,
            first_ordinal=state.tool_ordinal,
            results=dict(prefilled or {}),
        )
        state.tool_ordinal += len(calls)
        await self.host.save_checkpoint(state)
        executed, refused = state.tool_calls, self.gate.window_refusals
        await self.tools.run_pending()
        stuck = state.tool_calls == executed and self.gate.window_refusals > refused and not self.gate.expired
        if stuck and state.no_progress == 0:
            # Nothing ran, the window refused: a model ignoring the window must not burn max_turns.
            state.no_progress = prior + 1
        await self.host.save_checkpoint(state)  # an expiry is acted on by the next loop iteration
        if self._stalled():
            return await self._brake(calls[0], state.no_progress, self.spec.no_progress_turns, "no-progress")
        return None

    def _count_calls(self, calls: list[ToolCallPart], limit: int) -> ToolCallPart | None:
        """Count the batch's calls (by tool and canonical args); the first one asked for more than `limit` times."""
        counts = self.state.call_counts
        for call in calls:
            k = _call_key(call)
            counts[k] = n = counts.get(k, 0) + 1
            if n > limit:
                return call
        return None

    async def _brake(self, call: ToolCallPart, count: int, limit: int, how: str) -> AgentResult:
        """The identical-call brake: journaled in the checkpoint first, so a resume stops here again unpaid."""
        consecutive = how == "no-progress"
        self.state.braked = {
            "reason": StopReason.IDENTICAL_TOOL_CALLS.value, "how": how,
            "message": (f"runaway brake: the agent asked for the same tool call {call.name}({_args_text(call)}) "
                        + (f"{count + 1} turns in a row" if consecutive else f"{count} times (the limit is {limit})")
                        + "; it stopped before running it again. Change the prompt or what the tool answers"
                        + ("." if consecutive else ", or raise max_identical_tool_calls= for a loop that is meant.")),
            "evidence": {"tool": call.name, "args": call.args, "count": count + 1 if consecutive else count,
                         "limit": limit, "consecutive": consecutive},
        }
        await self.host.save_checkpoint(self.state)
        return self._braked(self.state.braked)

    def _braked(self, braked: dict[str, Any]) -> AgentResult:
        error = AgentError(kind="budget", message=str(braked.get("message") or "runaway brake"),
                           reason=StopReason.parse(braked.get("reason")), evidence=braked.get("evidence"))
        return self._finish("limit", error=error, reason=str(braked.get("how") or "brake"))

    async def _on_expiry(self) -> AgentResult:
        """Tool budget expiry: settle `limit`, after the reserve's one tool-less summary turn if set."""
        budget = self.gate.budget
        reserve = budget.finalization_reserve if budget is not None else None
        if reserve is None:
            return self._finish("limit", reason="tool-budget")
        state = self.state
        stage: Stage = "reserve-summary"
        if not state.tool_budget.reserve_prompted:
            state.messages.append(Message.text("user", self.gate.reserve_prompt()))
            state.tool_budget.reserve_prompted = True
            await self.host.save_checkpoint(state)
        refused = self._budget_guard(stage)
        if refused is not None:
            return refused
        spec = _tool_less(self.spec, reserve.max_output_tokens)
        turn = await self._dispatch(Dispatcher(spec, self.host, self.hooks, state, self.signal), stage)
        if turn.status != "ok" or turn.message is None:
            return self._finish(turn.status, error=turn.error, reason=turn.status)
        error = None
        if turn.finish_reason == "max_tokens" and turn.budget_clamped:
            message = f"the summary was cut at {turn.output_limit} output tokens, the most the remaining budget allows"
            error = cut_error(self.hooks, message, stage)
        text = turn.message.text_content  # fail closed: tool calls the model made anyway are dropped
        if text:
            state.messages.append(Message(role="assistant", parts=(TextPart(text=text),)))
        state.tool_budget.reserve_used = True
        output: Any = text or None
        if self.spec.output is not None and text:
            got = from_text(self.spec.output, text)
            output = got.value if got.ok else text
        return self._finish("limit", output=output, error=error, reason="tool-budget")

    def _stalled(self) -> bool:
        limit = self.spec.no_progress_turns
        return limit > 0 and self.state.no_progress >= limit

    def _budget_guard(self, stage: Stage) -> AgentResult | None:
        """Layer 2 before a turn: a refusal or a fired ceiling ends the invocation with kind `budget`."""
        try:
            self.hooks.before_turn()
        except BudgetExhaustedError as exc:
            return self._finish("error", error=budget_error(exc, stage), reason="budget")
        budget_signal = self.hooks.signal
        if budget_signal is not None and budget_signal.aborted:
            error = AgentError(kind="budget", message=f"{budget_signal.reason}", reason=fired_cause(budget_signal),
                               stage=stage)
            return self._finish("cancelled", error=error, reason="budget")
        return None

    def _finish(
        self,
        status: AgentStatus,
        *,
        output: Any = None,
        error: AgentError | None = None,
        reason: str | None = None,
    ) -> AgentResult:
        self.stop_reason = reason or status
        state = self.state
        limited = status == "limit" and self.stop_reason == "tool-budget"
        return AgentResult(
            status=status,
            output=output,
            usage=state.usage,
            usage_by_model=dict(state.usage_by_model),
            turns=state.turns,
            served_by=state.served_by,
            finish_reason=state.finish_reason,
            error=error,
            tool_budget=self._gate.summary(limited=limited) if self._gate is not None else None,
        )


def _call_key(call: ToolCallPart) -> str:
    return content_key([call.name, call.args])


def _args_text(call: ToolCallPart, limit: int = 120) -> str:
    text = canonical_json(to_jsonable(call.args)).decode()
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _validation_reason(issues: list[Issue]) -> str:
    """The last attempt's validator messages as one line (`loc: msg; ...`), cut to `REASON_CHARS`."""
    said = []
    for issue in issues:
        loc = ".".join(str(p) for p in issue.get("loc") or ())
        msg = " ".join(str(issue.get("msg") or "").split())
        said.append(f"{loc}: {msg}" if loc else msg)
    reason = "; ".join(s for s in said if s)
    return reason if len(reason) <= REASON_CHARS else reason[: REASON_CHARS - 1] + "…"


def _issue(issue: Issue) -> SchemaIssue:
    loc = [p if isinstance(p, int) else str(p) for p in issue.get("loc") or ()]
    return SchemaIssue(loc=loc, msg=str(issue.get("msg") or ""), type=str(issue.get("type") or ""))


def _tool_less(spec: AgentSpec, max_output_tokens: int | None) -> AgentSpec:
    """The reserve summary turn's spec: `tool_choice="none"` and no output schema.

    The tools stay defined: providers such as Anthropic refuse a history with tool calls when the
    request defines no tools, and "none" already forbids calling them.
    """
    return replace(
        spec, tool_choice="none", output=None, max_output_tokens=max_output_tokens or spec.max_output_tokens,
    )
