"""The seam between the agent loop and whoever runs it (the engine, or a test double).

The loop owns the conversation; the host owns durability (checkpoints, journaled decisions,
approval suspensions), tool dispatch (executors and the effect ledger) and telemetry.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from tether.contracts.events import AgentScoped
from tether.contracts.loops import OutputSpec as OutputSpec  # the structured-output spec lives with the loop seam
from tether.contracts.routes import ResolvedModel as ResolvedModel

if TYPE_CHECKING:
    from tether.agents.context import Context
    from tether.agents.state import LoopState
    from tether.contracts.messages import Message
    from tether.tools.definition import Tool
    from tether.tools.permissions import Permissions


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    attempts: int = 3
    base_s: float = 0.5
    max_s: float = 8.0


DEFAULT_RETRY = RetryPolicy()
"""(frozen: one for every invocation, not one each)"""


@dataclass(frozen=True, slots=True)
class AgentSpec:
    """Everything one invocation needs, already resolved by the engine (routing, profiles, defaults)."""

    prompt: str
    models: Sequence[ResolvedModel]
    """The primary model first, then the fallbacks tried after its retries."""
    system: str | None = None
    output: OutputSpec | None = None
    tools: Sequence[Tool] = ()
    max_turns: int = 32
    max_output_tokens: int | None = 4_096
    """The output limit of each turn, never above the serving model's cap; None: that cap (the budget still
    clamps it)."""
    effort: str | None = None
    retry: RetryPolicy = DEFAULT_RETRY
    schema_retries: int = 2
    no_progress_turns: int = 3
    """The identical-call brake's default: the same tool batch asked for again this many turns in a row stops."""
    max_identical_tool_calls: int | None = None
    """The identical-call brake: a tool call (canonically equal arguments) asked for more often than this stops."""
    tool_budget: Any = None
    """A `tether.ToolBudget` or None (see docs/tool-budgets.md)."""
    label: str | None = None
    agent_type: str | None = None
    tool_choice: str | None = None
    """Overrides the request's `tool_choice` (the reserve summary turn sends "none")."""
    exposure_wait: bool = False
    """Wait for an in-flight exposure hold to release instead of failing (orchestrator children)."""
    permissions: Permissions | None = None
    """The per-call permission chain; None = allow, or ask when a tool `needs_approval`."""
    history: tuple[Message, ...] = ()
    """Earlier messages the transcript starts with, before the opening (a session's turns: docs/sessions.md)."""
    opening: Message | None = None
    """The first message (the prompt, as the user's) when the engine built it already, to estimate the call."""
    context: Context | None = None
    """The `tether.Context` policy (None: the conversation is sent whole, and nothing is checked per turn)."""
    measured: dict[int, tuple[Any, int]] = field(default_factory=dict, compare=False, repr=False)
    """Canonical sizes of this invocation's messages measured so far, by identity: the engine's admission
    estimate measures the opening and the first turn's estimate reads it back."""


class LoopHost(Protocol):
    """What the loop asks of its host. Every method may be called again after a crash and resume."""

    run_id: str

    async def load_checkpoint(self) -> LoopState | None:
        """The last turn-boundary checkpoint of this invocation, or None (also when unreadable)."""

    async def save_checkpoint(self, state: LoopState) -> None:
        """Persist a turn-boundary checkpoint before anything that depends on it happens."""

    async def decide(self, name: str, payload: dict[str, Any]) -> dict[str, Any]:
        """Journal a decision (awaited before its effect); on replay return the journaled payload."""

    async def record_dispatch(
        self, served_by: str, est_input: int, max_output: int, *, purpose: str | None = None
    ) -> None:
        """Make one provider attempt durable (with its worst case) before the request leaves. A compaction's
        summarize call passes `purpose="compaction"` too (only then: hosts without a `Context` never see it)."""

    async def recorded(self, name: str) -> dict[str, Any] | None:
        """The next journaled decision `name` of this invocation not read yet (on replay), else None; nothing is
        written (a compaction asks before it calls the model, and `decide`s after)."""

    async def end_attempt(self, turn: int, *, reached: bool) -> None:
        """A provider attempt of `turn` failed: settle it (what it drew, even nothing) so the worst case it held
        is released before a retry or a failover is sized. `reached=False`: the request never left (the
        connection failed), so it cost nothing and is not counted as a provider call."""

    async def approve(self, tool: str, args: dict[str, Any]) -> bool:
        """Ask a human: suspends this branch (the run settles `suspended`) until resolved.

        Returns True only for an explicit allow. The checkpoint must be saved before calling.
        """

    async def execute_tool(
        self, tool: Tool, args: dict[str, Any], *, call_id: str, ordinal: int
    ) -> Any:
        """Run a validated tool call through its executor and the effect ledger; raise on failure."""

    def emit(self, event: AgentScoped, /) -> None:
        """Telemetry only (the typed agent, model and tool events); never journaled.

        The loop builds the event with what it knows; the host fills the agent's ids, its span ids and its
        live cost, and emits it.
        """

    async def sleep(self, seconds: float) -> None:
        """Backoff sleeps go through the host so tests control time."""
