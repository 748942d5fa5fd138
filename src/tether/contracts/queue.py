"""The run queue's data: what `enqueue` writes, what a worker's claim asks for and gets back."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

QueueState = Literal["queued", "claimed", "suspended", "done", "failed", "dead"]
"""Where a run stands in the queue: waiting, held by a worker, parked on a suspension, finished, refused, or
dead-lettered (its workers kept dying: never claimed again until it is enqueued again)."""
FinishState = Literal["queued", "suspended", "done", "failed", "dead"]
"""What a worker reports when it lets go of a claim (`queued` hands the run back to the queue)."""

DEFAULT_QUEUE = "default"
DEFAULT_MAX_ATTEMPTS = 5
"""Claims in a row that may end without their worker reporting (it died) before a run is dead-lettered."""


def queue_topic(queue: str) -> str:
    """The wake-up topic of new work on `queue`."""
    return f"q:{queue}"


def settled_topic(run_id: str) -> str:
    """The wake-up topic of `run_id` settling (or failing) anywhere."""
    return f"s:{run_id}"


class QueuedRun(BaseModel):
    """A run as `enqueue` places it: which queue, how urgent, which workflow, per-segment options."""

    model_config = ConfigDict(frozen=True)

    run_id: str
    workflow: str
    queue: str = DEFAULT_QUEUE
    priority: int = 0
    """Higher runs first; equal priorities run oldest first."""
    deadline_s: float | None = None
    """The wall-clock limit each segment a worker drives gets (not durable across segments)."""
    budgets: list[dict[str, Any]] | None = None
    """The run's budgets across runs (`Budget.to_json()`): a claim skips it while they cannot cover `reserve_usd`."""
    reserve_usd: float = 0.0
    """What the run's budgets must have room for before a worker starts it (its own ceiling, else 0)."""


class ClaimRequest(BaseModel):
    """One worker's ask: up to `limit` runs of the workflows it knows, from its queues."""

    model_config = ConfigDict(frozen=True)

    worker: str
    queues: list[str]
    workflows: list[str]
    limit: int = Field(ge=1)
    ttl_s: float = Field(gt=0)
    """How long the claim protects the run before its driver's lease does (the engine's lease TTL)."""
    limits: dict[str, int] = Field(default_factory=dict)
    """Cluster-wide cap of runs held at once, per queue (a queue not named has none)."""
    finished: list[Finished] = Field(default_factory=list)
    """Claims to let go of before claiming, as `finish` would, in the same round trip."""
    drives: bool = False
    """The claiming process drives what it claims (a worker): a store may take each run's lease for it in the
    claim's own transaction (one commit fewer per run), released with the claim's finish if no driver used it."""


class Claim(BaseModel):
    """A run a worker now holds; `claim_id` fences the worker's later report against a newer claim."""

    model_config = ConfigDict(frozen=True)

    run_id: str
    queue: str
    workflow: str
    claim_id: int
    args: dict[str, Any] = Field(default_factory=dict)
    deadline_s: float | None = None
    attempts: int = 1
    """Claims of this run so far, this one included (hand-backs and resolutions count too)."""
    takeover: bool = False
    """The previous holder's claim lapsed and its lease expired: this claim resumes its work."""
    lapsed: int = 0
    """How many claims in a row, up to this one, lapsed: their workers died (or lost the store) without
    reporting. Counted in the store; a claim its worker reports (settled, suspended, handed back) ends the streak."""
    lapsed_by: list[str] = Field(default_factory=list)
    """The workers that held those lapsed claims, oldest first."""


class Finished(BaseModel):
    """A claim a worker lets go of, reported with its next claim request."""

    model_config = ConfigDict(frozen=True)

    claim: Claim
    state: FinishState
    error: str | None = None


class QueueEntry(BaseModel):
    """A run's row in the queue, for listings and tests."""

    model_config = ConfigDict(frozen=True)

    run_id: str
    queue: str
    workflow: str
    priority: int
    state: QueueState
    enqueued_at: float
    """Database clock, epoch seconds."""
    claim_id: int = 0
    claimed_by: str | None = None
    attempts: int = 0
    error: str | None = None
    waiting: str | None = None
    """Why a queued run is not claimed yet (`budget: ...`: its budgets across runs cannot cover it now)."""
