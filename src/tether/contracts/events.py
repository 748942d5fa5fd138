"""Telemetry events (never journaled), the agent-tree audit `AgentEvent` and `ToolEffectRecord`."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

EventType = Literal[
    "run:start", "run:end", "phase:start", "log", "budget:update",
    "agent:queued", "agent:start", "agent:end", "agent:error", "agent:schema-retry",
    "agent:stream", "tool:start", "tool:end", "spawn", "spawn:refused",
    "external:waiting", "approval:pending", "child:start", "child:end", "warning",
]


class Event(BaseModel):
    """One telemetry event; `seq` is a per-run counter, not a journal seq; `data` holds the payload."""

    model_config = ConfigDict(frozen=True)

    type: EventType
    run_id: str
    seq: int
    ts: float
    span_id: str | None = None
    parent_span_id: str | None = None
    replayed: bool = False
    data: dict[str, Any] = Field(default_factory=dict)

    def __getattr__(self, name: str) -> Any:
        data = self.__dict__.get("data") or {}
        if name in data:
            return data[name]
        raise AttributeError(name)


class AgentEvent(BaseModel):
    """One fact of an agent tree (seed 003): a spawn, a refused spawn, or a draw on the shared ceiling."""

    model_config = ConfigDict(frozen=True)

    agent_id: int
    step: int
    kind: Literal["spawn", "spawn_refused", "budget_draw"]
    child_agent_id: int | None = None
    detail: str | None = None
    tokens: int | None = None
    remaining: int | None = None
    usd: float | None = None
    remaining_usd: float | None = None
    parent_agent_id: int | None = None


class ToolEffectRecord(BaseModel):
    """One dispatch attempt's side-effect facts (seed 004); args are never stored, only their hash.

    An orphan (intent without outcome) has `outcome`, `exit_code`, `signal`, `duration_ms` = None.
    """

    model_config = ConfigDict(frozen=True)

    attempt_id: str
    idempotency_key: str
    run_id: str
    span_id: str
    tool: str
    args_hash: str
    executor: str
    workdir: str
    cwd: str | None = None
    work_mount: str | None = None
    started_at: float
    duration_ms: float | None = None
    outcome: Literal["ok", "error", "timeout"] | None = None
    exit_code: int | None = None
    signal: str | None = None
