"""Values an agent invocation produces: `AgentError`, `ToolBudgetSummary`, `AgentResult` (seeds 000, 002)."""

from __future__ import annotations

from typing import Any, Generic, Literal

from pydantic import BaseModel, ConfigDict, Field
from typing_extensions import TypeVar

from tether.contracts.stops import StopReason
from tether.contracts.stream import ErrorKind, FinishReason
from tether.contracts.usage import Usage

AgentStatus = Literal["ok", "error", "limit", "cancelled", "skipped"]
Stage = Literal["loop", "summarize", "reserve-summary", "finalize", "extract", "compaction"]
OutputT = TypeVar("OutputT", default=Any)
"""What `AgentResult.output` holds: the final text (`str`) or the `output=` model (bare `AgentResult` is `[Any]`)."""


class AgentError(BaseModel):
    """The structured error on `AgentResult.error`, journaled in the terminal; a value, not an exception."""

    model_config = ConfigDict(frozen=True)

    kind: ErrorKind
    message: str = ""
    retryable: bool = False
    retry_after_ms: int | None = None
    reason: StopReason | None = None
    """Why money stopped the call (`kind="budget"`): a typed `StopReason`, journaled; replay decides on it."""
    limited_by: Literal["usd", "tokens"] | None = None
    """For an `output-floor` refusal: which ceiling left too little (a USD account, or the tree's tokens)."""
    stage: Stage | None = None
    issues: list[dict[str, Any]] | None = None
    evidence: dict[str, Any] | None = None
    """A runaway brake's evidence (`reason.is_brake`): the repeated call and its count, or the measured rate."""


class ToolBudgetSummary(BaseModel):
    """How close one invocation came to its tool budget (seed 000).

    Durable on replay: `used`, `cap`, `extensions_granted`, `finalization_window_entered`.
    Live-only (None after replay): `units_used`, `units_max`, `notices_fired`,
    `finalization_reserve_used`, `limiter`.
    """

    model_config = ConfigDict(frozen=True)

    used: int = 0
    cap: int | None = None
    units_used: float | None = None
    units_max: float | None = None
    extensions_granted: int | None = None
    notices_fired: list[float] | None = None
    finalization_reserve_used: bool | None = None
    finalization_window_entered: bool | None = None
    limiter: Literal["max_tool_calls", "tool_units"] | None = None


class AgentResult(BaseModel, Generic[OutputT]):
    """Everything one agent invocation produced; `AgentResult[Verdict]` when it was asked for a `Verdict`."""

    model_config = ConfigDict(frozen=True)

    status: AgentStatus
    output: OutputT | None = None
    """The final text, or the validated `output=` model; None when the invocation produced none."""
    usage: Usage = Usage()
    cost_usd: float = 0.0
    turns: int = 0
    served_by: str | None = None
    finish_reason: FinishReason | None = None
    """How the last model reply ended (None when no reply finished, e.g. a transport error or a cut)."""
    usage_by_model: dict[str, Usage] = Field(default_factory=dict)  # (a `{}` default is deep-copied per instance)
    error: AgentError | None = None
    tool_budget: ToolBudgetSummary | None = None
    transcript_ref: str | None = None
    artifacts: dict[str, str] = Field(default_factory=dict)
    """Files an invocation produced, e.g. the `patch` of an `isolation="worktree"` agent."""
    agent_id: int | None = None
    parent_agent_id: int | None = None
    replayed: bool = False
