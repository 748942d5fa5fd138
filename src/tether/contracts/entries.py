"""The journal entry envelope and run metadata, as every store persists them."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from tether.contracts.usage import Usage

HASH_VERSION = 1
"""The identity scheme entries are written with; `SUPPORTED_HASH_VERSIONS` may be read."""
SUPPORTED_HASH_VERSIONS = frozenset({1})

EntryKind = Literal[
    "agent", "step", "child", "rand", "decision", "external", "approval", "resolution", "abandon",
    "tree",
]
TWO_PHASE_KINDS = frozenset({"agent", "step", "child"})
EntryStatus = Literal[
    "running", "ok", "error", "limit", "cancelled", "exhausted", "suspended", "skipped",
]
RunStatus = Literal["running", "ok", "error", "cancelled", "exhausted", "suspended"]
MetaStatus = Literal["queued", "running", "ok", "error", "cancelled", "exhausted", "suspended", "dead"]
"""A run's status as listed: a run outcome's status, `queued` (waiting in the run queue for a worker), or
`dead` (dead-lettered: settled `error` after its workers kept dying, and never claimed again; docs/workers.md)."""
SETTLED_STATUSES = frozenset({"ok", "error", "cancelled", "exhausted", "suspended"})


class JournalEntry(BaseModel):
    """One journal record. Unknown fields written by newer versions are kept untouched."""

    model_config = ConfigDict(extra="allow")

    seq: int | None = None
    ref: int | None = None
    scope: str = ""
    key: str = ""
    ordinal: int = 0
    kind: EntryKind
    status: EntryStatus | None = None
    label: str | None = None
    value: Any = None
    error: dict[str, Any] | None = None
    usage: Usage | None = None
    usage_by_model: dict[str, Usage] | None = None
    served_by: str | None = None
    provider_calls: int | None = None
    checkpoint_ref: str | None = None
    tool_budget: dict[str, Any] | None = None
    memoized: bool | None = None
    cost_usd: float | None = None
    phase: str | None = None
    agent_id: int | None = None
    parent_agent_id: int | None = None
    agent_type: str | None = None
    role: str | None = None
    hash_version: int = HASH_VERSION
    span_id: str | None = None
    started_at: float | None = None
    ended_at: float | None = None

    def to_json_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json", exclude_none=True)


def extra(entry: JournalEntry, name: str) -> Any:
    """A member of `entry` beyond its declared fields (what an envelope or a newer version added), or None.

    Read from the extras dict: `getattr(entry, name, None)` takes pydantic's Python `__getattr__` and,
    for a member the entry lacks, an exception, and the cost folds ask this of every entry.
    """
    extras = entry.__pydantic_extra__
    return extras.get(name) if extras else None


class RunMeta(BaseModel):
    """What a store keeps about a run beside its journal (for listings and the CLI)."""

    model_config = ConfigDict(extra="allow")

    run_id: str
    workflow: str
    status: MetaStatus = "running"
    args_hash: str | None = None
    args: Any = None
    budget_usd: float | None = None
    created_at: float
    updated_at: float
    parent_run_id: str | None = None
    segments: int = 1


class LeaseOwner(BaseModel):
    """Who drives a segment: a process on a host (so a dead owner on this host is provable)."""

    model_config = ConfigDict(frozen=True)

    owner_id: str
    host: str
    pid: int
    started_at: float
    """Process start time (boot-relative clock ticks on Linux) to defeat pid reuse."""
    pid_namespace: str | None = None
    """The kernel boot and pid namespace `pid` is numbered in (`<boot id>/pid:[<inode>]` on Linux): only a
    judge in the same one may call the owner dead by its pid. None when unknown (and in leases written
    before it was recorded): such an owner's lease is honoured until it expires."""


class Lease(BaseModel):
    """The right to append to one run; `epoch` grows on every acquire and survives delete."""

    model_config = ConfigDict(frozen=True)

    run_id: str
    owner: LeaseOwner
    epoch: int
    expires_at: float
    ttl_s: float = Field(default=60.0)
