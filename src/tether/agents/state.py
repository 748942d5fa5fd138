"""`LoopState`: the agent loop's turn-boundary checkpoint, enough to continue after a crash."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from tether.contracts.messages import Message, ToolCallPart, ToolResultPart
from tether.contracts.records import Record
from tether.contracts.stream import FinishReason
from tether.contracts.usage import ZERO_USAGE, Usage

CHECKPOINT_VERSION = 1


@dataclass(slots=True, kw_only=True)
class PendingBatch(Record):
    """The tool calls of a turn not finished yet: a resume runs only the calls without a result."""

    turn: int
    calls: list[ToolCallPart]
    first_ordinal: int
    """Call `i` of the batch dispatches with ordinal `first_ordinal + i` (stable across resumes)."""
    results: dict[str, ToolResultPart] = field(default_factory=dict)
    """Results already produced, by call id."""
    approved: dict[str, bool] = field(default_factory=dict)
    """Human answers already received, by call id."""


@dataclass(slots=True, kw_only=True)
class ToolBudgetState(Record):
    """The tool budget's counters; riding the checkpoint is what keeps notices from re-firing."""

    units_used: float = 0.0
    grants: int = 0
    """Extension grants in effect (each one a journaled `tool-grant` decision)."""
    notices_fired: list[float] = field(default_factory=list)
    window_entered: bool = False
    notes: list[str] = field(default_factory=list)
    """Grant and window announcements waiting for the batch boundary."""
    expired: Literal["max_tool_calls", "tool_units"] | None = None
    """Set at expiry: the loop settles `limit` (after the reserve summary turn when configured)."""
    reserve_prompted: bool = False
    reserve_used: bool = False


@dataclass(slots=True, kw_only=True)
class LoopState(Record):
    """Everything the loop needs to continue an invocation; mutated in place between checkpoints."""

    version: int = CHECKPOINT_VERSION
    messages: list[Message]
    """The canonical conversation (system prompt excluded: it is rebuilt from the spec)."""
    turns: int = 0
    """Model turns dispatched (what `max_turns` counts)."""
    provider_calls: int = 0
    """Wire attempts, retries and failovers included."""
    usage: Usage = ZERO_USAGE  # frozen: one shared zero, replaced (never mutated) as usage adds up
    usage_by_model: dict[str, Usage] = field(default_factory=dict)
    served_by: str | None = None
    model_index: int = 0
    """Index into `AgentSpec.models` of the model in use (failover is sticky for the invocation)."""
    tool_calls: int = 0
    """Tool calls executed (denied, invalid and unknown calls never count)."""
    tool_ordinal: int = 0
    """Ordinal the next tool call of this invocation gets."""
    schema_retries_used: int = 0
    reprompting: bool = False
    """The next turn answers a structured-output re-prompt (a budget refusal says "extract")."""
    no_progress: int = 0
    last_batch_key: str | None = None
    finish_reason: FinishReason | None = None
    """How the last provider reply ended (None after a turn no reply finished)."""
    empty_replies: int = 0
    """Empty replies in a row (one is re-asked; a second settles `error`)."""
    pauses: int = 0
    """Paused replies in a row that were continued (bounded by `MAX_PAUSE_CONTINUATIONS`)."""
    pending: PendingBatch | None = None
    tool_budget: ToolBudgetState = field(default_factory=ToolBudgetState)
    compactions: int = 0
    """Context compactions applied to `messages` (each a journaled `context-compaction` decision)."""
    call_counts: dict[str, int] = field(default_factory=dict)
    """Tool calls asked for so far by content key (tool and canonical args); kept only under
    `max_identical_tool_calls`."""
    braked: dict[str, Any] | None = None
    """A runaway brake that stopped this invocation (its reason and evidence): a resume stops on it again."""

    @classmethod
    def start(cls, prompt: str, opening: Message | None = None, history: Sequence[Message] = ()) -> LoopState:
        """A fresh invocation's state: its transcript is `history`, then `opening` (the prompt as the user's)."""
        return cls(messages=[*history, opening or Message.text("user", prompt)])
