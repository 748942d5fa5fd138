"""`ForeignSession`: the engine's `LoopSession`, for an agent invocation whose loop another framework drives.

`ctx.agent(prompt, loop=...)` runs the invocation as `ctx.agent` runs its own: the same identity and matching
(a completed one is served from its terminal), admission, containment, the two-phase entry, checkpoints
and terminal; only the loop is `loop.run(session)` (`AgentCall` calls `run_foreign` in place of tether's
loop), which asks the session for every model turn and every tool call (`tether.integrations.pydantic_ai`
drives pydantic-ai's agent graph this way; the protocol is `tether.contracts.loops`):

- `model_turn(history, ...)` serves the reply from the checkpoint when `history` is a prefix of the
  transcript an earlier segment checkpointed (never paid twice); otherwise `Dispatcher` runs the turn
  (the per-turn guard, output clamp, exposure, dispatch record, live meter and stream cut, retries and
  failover) and the reply is checkpointed before it is handed back.
- `run_tool(...)` dispatches through the effect ledger (intent and outcome rows; an orphan of an
  idempotent tool runs again with the same key, any other is reported unknown); `record_tool` checkpoints
  the result, so `recorded_tool` serves it on resume instead of running the tool again.

The checkpoint's `messages` hold the conversation (the last history and its reply; each reply carries
its usage in a `tether:foreign` raw part that no provider is sent), and its `pending.results` every tool
result, by call id, as the canonical JSON of a `RecordedTool`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, cast

from tether.agents.dispatch import Dispatcher, budget_error, fired_cause
from tether.agents.host import AgentSpec
from tether.agents.loop import cut_error, end_event
from tether.agents.state import CHECKPOINT_VERSION, LoopState, PendingBatch
from tether.contracts.errors import BudgetExhaustedError, TetherError
from tether.contracts.events import AgentFailed, AgentScoped, AgentStart, ToolEnd, ToolStart
from tether.contracts.loops import AgentLoop, LoopTurn, OutputSpec, RecordedTool, TurnStopped, find_stop
from tether.contracts.messages import Message, RawPart, ToolResultPart, ToolSpec
from tether.contracts.results import AgentError, AgentResult, AgentStatus
from tether.contracts.signal import Signal
from tether.contracts.stream import FinishReason, ModelCaps
from tether.contracts.usage import Usage
from tether.journal.canonical import canonical_json, to_jsonable
from tether.tools.definition import Tool

if TYPE_CHECKING:
    from tether.budget.hooks import AccountHooks
    from tether.engine.loop_host import EngineLoopHost

META_FAMILY = "tether:foreign"
"""The raw-part family of a reply's journaled usage: kept in the transcript, sent to no provider."""

@dataclass
class _Invoked:
    called: bool = False


class ForeignSession:
    """The engine's `LoopSession` for one invocation (see the module docstring)."""

    def __init__(
        self, spec: AgentSpec, host: EngineLoopHost, hooks: AccountHooks, state: LoopState, signal: Signal | None,
        *, restored: bool, max_turns: int | None = None,
    ) -> None:
        self.spec, self.host, self.hooks, self.state, self.signal = spec, host, hooks, state, signal
        self._restored, self._max_turns = restored, max_turns
        if state.pending is None:
            state.pending = PendingBatch(turn=0, calls=[], first_ordinal=0)
        self._transcript = list(state.messages) if restored else []
        """What an earlier segment checkpointed: served until the first turn that is not in it."""
        self._results = dict(state.pending.results) if restored else {}
        self._ordinals: dict[str, int] = {}
        self._next_ordinal = 0
        self._saving = asyncio.Lock()
        self._tools: dict[bytes, Tool] = {}  # request-only tools by their spec: built (and checked) once

    @property
    def run_id(self) -> str:
        return self.host.run_id

    @property
    def prompt(self) -> str:
        return self.spec.prompt

    @property
    def system(self) -> str | None:
        return self.spec.system

    @property
    def model(self) -> str:
        return self.spec.models[0].ref

    @property
    def caps(self) -> ModelCaps:
        served = self.spec.models[0]
        return served.adapter.caps(served.name)

    @property
    def resumed(self) -> bool:
        return self._restored

    @property
    def turns(self) -> int:
        return self.state.turns

    @property
    def max_turns(self) -> int | None:
        """Turns allowed before the invocation settles `limit` (None: the driving framework's own limits)."""
        return self._max_turns

    def emit(self, event: AgentScoped, /) -> None:
        self.host.emit(event)

    # -- model turns ---------------------------------------------------------------------------
    async def model_turn(
        self, history: Sequence[Message], *, system: str | None = None, tools: Sequence[ToolSpec] = (),
        tool_choice: str = "auto", output: OutputSpec | None = None, max_output_tokens: int | None = None,
    ) -> LoopTurn:
        """The reply to `history`: from the checkpoint when an earlier segment paid for it, else live."""
        served = self._replayed_turn(history)
        if served is not None:
            return served
        self._transcript, self._results = [], {}  # past the journal: everything from here on is live
        self._guard()
        state = self.state
        spec = replace(
            self.spec, system=system, tools=[self._spec_tool(t) for t in tools], output=output,
            tool_choice=None if tool_choice == "auto" else tool_choice,
            max_output_tokens=_lower(self.spec.max_output_tokens, max_output_tokens),
        )
        state.messages = _extend(state.messages, history)
        before, calls_before, paid_before = state.usage, state.provider_calls, self.hooks.cost_usd
        turn = await Dispatcher(spec, self.host, self.hooks, state, self.signal).turn("loop")
        if state.provider_calls > calls_before:
            state.turns += 1
            state.finish_reason = turn.finish_reason
        if turn.status != "ok" or turn.message is None:
            raise TurnStopped(turn.status, turn.error, turn.status)
        if turn.finish_reason == "max_tokens" and turn.budget_clamped:
            message = (f"the reply was cut at {turn.output_limit} output tokens, the most the remaining budget "
                       "allows")
            raise TurnStopped("limit", cut_error(self.hooks, message, "loop"), "max-tokens")
        usage = state.usage.minus(before)
        priced = state.served_by is not None and self.hooks.price_of(state.served_by) is not None
        cost = round(self.hooks.cost_usd - paid_before, 10) if priced else None
        meta = {"usage": to_jsonable(usage), "cost_usd": cost, "finish_reason": turn.finish_reason,
                "served_by": state.served_by}
        reply = Message(role="assistant", parts=(*turn.message.parts, RawPart(family=META_FAMILY, data=meta)))
        state.messages.append(reply)
        self._number(reply)
        await self._checkpoint()
        return LoopTurn(reply, usage, cost, turn.finish_reason, state.served_by, replayed=False)

    def _replayed_turn(self, history: Sequence[Message]) -> LoopTurn | None:
        journaled, n = self._transcript, len(history)
        if n >= len(journaled) or journaled[n].role != "assistant" or journaled[:n] != list(history):
            return None
        reply = journaled[n]
        self._number(reply)
        meta = next((p.data for p in reply.parts if isinstance(p, RawPart) and p.family == META_FAMILY), {})
        usage = Usage.model_validate(meta.get("usage") or {})
        finish = cast("FinishReason | None", meta.get("finish_reason"))
        cost = meta.get("cost_usd")
        return LoopTurn(reply, usage, float(cost) if cost is not None else None, finish, meta.get("served_by"),
                    replayed=True)

    def _guard(self) -> None:
        """Layer 2 before a turn (as the native loop's guard), and `max_turns` when set."""
        try:
            self.hooks.before_turn()
        except BudgetExhaustedError as exc:
            raise TurnStopped("error", budget_error(exc, "loop"), "budget") from None
        fired = self.hooks.signal
        if fired is not None and fired.aborted:
            error = AgentError(kind="budget", message=f"{fired.reason}", reason=fired_cause(fired), stage="loop")
            raise TurnStopped("cancelled", error, "budget")
        if self.signal is not None and self.signal.aborted:
            raise TurnStopped("cancelled", None, "cancelled")
        if self._max_turns is not None and self.state.turns >= self._max_turns:
            error = AgentError(kind="terminal", message=f"max_turns={self._max_turns} model turns reached")
            raise TurnStopped("limit", error, "max-turns")

    def _spec_tool(self, spec: ToolSpec) -> Tool:
        """A request-only `Tool` (what the model sees); foreign tools run through `run_tool`, never through it."""
        key = canonical_json(spec)
        tool = self._tools.get(key)
        if tool is None:
            tool = self._tools[key] = Tool(spec.name, spec.description, spec.parameters, _never)
        return tool

    def _number(self, reply: Message) -> None:
        """Ordinals for the reply's tool calls, in the order the model made them (stable across resumes)."""
        for call in reply.tool_calls:
            if call.id not in self._ordinals:
                self._ordinals[call.id] = self._next_ordinal
                self._next_ordinal += 1

    # -- tool calls ----------------------------------------------------------------------------
    def recorded_tool(self, call_id: str) -> RecordedTool | None:
        """The result an earlier segment checkpointed for this call (None: run it)."""
        part = self._results.get(call_id)
        return RecordedTool.load(part.content) if part is not None else None

    async def run_tool(
        self, call_id: str, name: str, args: dict[str, Any], run: Callable[[str], Awaitable[Any]], *,
        idempotent: bool = False,
    ) -> Any:
        """Dispatch one call through the effect ledger; `run(idempotency_key)` performs it.

        Returns what `run` returned, or a `RecordedTool("unknown")` when the call is an orphan that is not run
        again. Exceptions from `run` propagate (the ledger has its `error` outcome row by then).
        """
        invoked = _Invoked()

        async def perform(idempotency_key: str = "", **_: Any) -> Any:
            invoked.called = True
            return await run(idempotency_key)

        ordinal = self._ordinal(call_id)
        tool = Tool(name, "", {"type": "object"}, perform, idempotent=idempotent)
        self.host.emit(ToolStart(tool=name, call_id=call_id, ordinal=ordinal, args=_json_args(args)))
        value = await self.host.execute_tool(tool, args, call_id=call_id, ordinal=ordinal)
        if not invoked.called:
            return RecordedTool("unknown", message=str(value))
        return value

    async def record_tool(self, call_id: str, name: str, recorded: RecordedTool) -> None:
        """Checkpoint a call's result (before the driving framework sees it), and say how it ended."""
        pending = self.state.pending
        assert pending is not None
        is_error = recorded.kind != "value"
        pending.results[call_id] = ToolResultPart(call_id=call_id, name=name, content=recorded.dump(),
                                                  is_error=is_error)
        if recorded.kind != "unknown":
            self.state.tool_calls += 1
        result = recorded.message if is_error else _summary(recorded.value)
        self.host.emit(ToolEnd(tool=name, call_id=call_id, ordinal=self._ordinals.get(call_id), is_error=is_error,
                               executed=recorded.kind != "unknown", outcome="ok" if not is_error else "error",
                               result=result[:1_000]))
        await self._checkpoint()

    def _ordinal(self, call_id: str) -> int:
        if call_id not in self._ordinals:  # a call the model did not make in this run (e.g. from a history)
            self._ordinals[call_id] = self._next_ordinal
            self._next_ordinal += 1
        return self._ordinals[call_id]

    # -- settling ------------------------------------------------------------------------------
    def result(
        self, status: AgentStatus, *, output: Any = None, error: AgentError | None = None,
        artifacts: dict[str, str] | None = None,
    ) -> AgentResult:
        state = self.state
        return AgentResult(
            status=status, output=output, usage=state.usage, usage_by_model=dict(state.usage_by_model),
            turns=state.turns, served_by=state.served_by, finish_reason=state.finish_reason, error=error,
            artifacts=artifacts or {},
        )

    async def _checkpoint(self) -> None:
        async with self._saving:  # tools of one turn may finish together: one checkpoint at a time
            await self.host.save_checkpoint(self.state)


async def run_foreign(
    spec: AgentSpec, host: EngineLoopHost, hooks: AccountHooks, signal: Signal | None, loop: AgentLoop,
    max_turns: int | None = None,
) -> AgentResult:
    """The foreign loop of one invocation, from its checkpoint when an earlier segment left one."""
    restored = await host.load_checkpoint()
    if restored is not None and restored.version != CHECKPOINT_VERSION:
        restored = None  # a checkpoint this version cannot read is never trusted: start over
    state = restored if restored is not None else LoopState.start(spec.prompt, spec.opening, spec.history)
    host.emit(AgentStart(label=spec.label, agent_type=spec.agent_type, model=spec.models[0].ref,
                         resumed=restored is not None, turns=state.turns, prompt=spec.prompt[:2_000]))
    session = ForeignSession(spec, host, hooks, state, signal, restored=restored is not None, max_turns=max_turns)
    reason: str | None = None
    try:
        result = await loop.run(session)
    except Exception as exc:
        stop = find_stop(exc)
        if stop is None:
            raise
        result, reason = session.result(stop.status, error=stop.error), stop.reason
    if result.error is not None:
        host.emit(AgentFailed(status=result.status, error=result.error))
    host.emit(end_event(result, reason=reason or result.status, provider_calls=state.provider_calls))
    return result


def _extend(transcript: list[Message], history: Sequence[Message]) -> list[Message]:
    """`history`, reusing the transcript's own message objects for the prefix they share (so a checkpoint
    writes only what is new)."""
    shared = 0
    for mine, theirs in zip(transcript, history, strict=False):
        if mine is not theirs and mine != theirs:
            break
        shared += 1
    return [*transcript[:shared], *history[shared:]]


def _lower(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else min(a, b)


def _never(**_: Any) -> Any:  # pragma: no cover - a request-only tool is never executed
    raise TetherError("a foreign agent's tools run through LoopSession.run_tool")


def _json_args(args: dict[str, Any]) -> dict[str, Any]:
    try:
        data = to_jsonable(args)
    except TetherError:
        return {k: str(v) for k, v in args.items()}
    return data if isinstance(data, dict) else {}


def _summary(value: Any) -> str:
    if isinstance(value, str):
        return value
    try:
        return canonical_json(value).decode()
    except TetherError:
        return str(value)
