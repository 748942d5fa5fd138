"""The foreign-loop seam: an agent invocation whose loop another framework (or your own code) drives.

`ctx.agent(prompt, loop=my_loop, ...)` runs the invocation as tether runs its own (identity, admission,
containment, the two-phase entry, checkpoints, the terminal) but hands the loop to `my_loop.run(session)`.
The `LoopSession` is the only way the loop reaches a provider or a tool: `model_turn` is one turn through
tether's dispatch (budget clamp, dispatch record, live meter, retries, failover; served from the checkpoint
on resume, never paid twice), `run_tool`/`record_tool` one tool call through the effect ledger. The long
form, with a worked example, is docs/internals.md ("Extension seams").
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from tether.contracts.events import AgentScoped
from tether.contracts.messages import Message, ToolSpec
from tether.contracts.results import AgentError, AgentResult, AgentStatus
from tether.contracts.stream import FinishReason, ModelCaps
from tether.contracts.usage import Usage


@dataclass(frozen=True)
class OutputSpec:
    """Structured output: the JSON schema sent to the model and an optional pydantic class to validate."""

    schema: dict[str, Any]
    model_cls: type[Any] | None = None
    name: str = "result"


@dataclass(frozen=True)
class LoopTurn:
    """One model turn as a foreign loop sees it: the reply (engine-minted call ids) and what it used."""

    message: Message
    """The assistant reply, its `tether:foreign` part included (hand it back unchanged in later histories)."""
    usage: Usage
    cost_usd: float | None
    """What the turn cost at tether's price (None for an unpriced model)."""
    finish_reason: FinishReason | None
    served_by: str | None
    replayed: bool
    """Served from the checkpoint: an earlier segment paid for it, nothing was sent."""


@dataclass(frozen=True)
class RecordedTool:
    """A tool call's journaled result: its JSON `value`, a `retry` or `failed` message for the model, or
    `unknown` (an interrupted call of a tool that is not idempotent, not run again)."""

    kind: Literal["value", "retry", "failed", "unknown"]
    value: Any = None
    message: str = ""

    def dump(self) -> str:
        # Key order kept (not canonical JSON): a replayed value must serialize for the model as the live one did.
        return json.dumps({"kind": self.kind, "value": self.value, "message": self.message}, separators=(",", ":"))

    @classmethod
    def load(cls, text: str) -> RecordedTool:
        data = json.loads(text)
        return cls(kind=data["kind"], value=data.get("value"), message=str(data.get("message") or ""))


class TurnStopped(Exception):
    """The invocation stops at this turn: a budget refusal or cut, cancellation, `max_turns`, or a provider error.

    `model_turn` raises it; let it propagate (also wrapped, or as the cause of the driving framework's own
    error): the session settles the invocation with its `status` and `error`.
    """

    def __init__(self, status: AgentStatus, error: AgentError | None, reason: str) -> None:
        super().__init__(error.message if error is not None else status)
        self.status, self.error, self.reason = status, error, reason


def find_stop(exc: BaseException) -> TurnStopped | None:
    """The `TurnStopped` behind `exc`: itself, inside an exception group, or the cause it was raised from."""
    seen: set[int] = set()
    todo: list[BaseException] = [exc]
    while todo:
        e = todo.pop()
        if id(e) in seen:
            continue
        seen.add(id(e))
        if isinstance(e, TurnStopped):
            return e
        if isinstance(e, BaseExceptionGroup):
            todo.extend(e.exceptions)
        todo.extend(x for x in (e.__cause__, e.__context__) if x is not None)
    return None


class LoopSession(Protocol):
    """What a foreign loop may ask of the engine for one agent invocation (the typed host object)."""

    @property
    def run_id(self) -> str: ...
    @property
    def prompt(self) -> str:
        """The invocation's prompt (`ctx.agent`'s first argument)."""
    @property
    def system(self) -> str | None:
        """The system prompt `ctx.agent` resolved (its `system=`, else the profile's)."""
    @property
    def model(self) -> str:
        """The model that serves first (`adapter:model`); fallbacks follow the route."""
    @property
    def caps(self) -> ModelCaps:
        """That model's capabilities (context window, output cap, native structured output)."""
    @property
    def resumed(self) -> bool:
        """An earlier segment checkpointed this invocation: its turns and tool results are served from it."""
    @property
    def turns(self) -> int:
        """Model turns dispatched so far (replayed ones included)."""
    @property
    def max_turns(self) -> int | None:
        """`ctx.agent(max_turns=...)`: `model_turn` stops the invocation (`limit`) past it; None: the loop's own."""

    async def model_turn(
        self, history: Sequence[Message], *, system: str | None = None, tools: Sequence[ToolSpec] = (),
        tool_choice: str = "auto", output: OutputSpec | None = None, max_output_tokens: int | None = None,
    ) -> LoopTurn:
        """The reply to `history` (the opening user message first): from the checkpoint when an earlier
        segment paid for it, else one turn through tether's dispatch, checkpointed before it is returned.
        Raises `TurnStopped` when the turn may not run or did not end well."""
        ...

    def recorded_tool(self, call_id: str) -> RecordedTool | None:
        """The result an earlier segment checkpointed for this call (None: run it)."""

    async def run_tool(
        self, call_id: str, name: str, args: dict[str, Any], run: Callable[[str], Awaitable[Any]], *,
        idempotent: bool = False,
    ) -> Any:
        """Run one call through the effect ledger; `run(idempotency_key)` performs it. Returns what `run`
        returned, or a `RecordedTool("unknown")` for an interrupted call that is not run again."""
        ...

    async def record_tool(self, call_id: str, name: str, recorded: RecordedTool) -> None:
        """Checkpoint a call's result (before the loop acts on it), and say how it ended (`tool:end`)."""
        ...

    def emit(self, event: AgentScoped, /) -> None:
        """Emit a telemetry event of this invocation (its agent id, spans and cost filled in)."""

    def result(
        self, status: AgentStatus, *, output: Any = None, error: AgentError | None = None,
        artifacts: dict[str, str] | None = None,
    ) -> AgentResult:
        """The invocation's `AgentResult` with the session's usage, turns and model filled in."""
        ...


class AgentLoop(Protocol):
    """A foreign agent loop: `ctx.agent(prompt, loop=...)` hands it the invocation's `LoopSession`."""

    async def run(self, session: LoopSession) -> AgentResult:
        """Run the invocation to its result (build it with `session.result(...)`)."""
        ...


__all__ = ["AgentLoop", "LoopSession", "LoopTurn", "OutputSpec", "RecordedTool", "TurnStopped", "find_stop"]
