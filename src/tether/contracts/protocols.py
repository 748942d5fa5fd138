"""The seams: stores, models, executors and the budget hooks the agent loop sees."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Any, Literal, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

from tether.contracts.entries import JournalEntry, Lease, LeaseOwner, RunMeta
from tether.contracts.messages import ChatRequest
from tether.contracts.queue import Claim, ClaimRequest, FinishState, QueuedRun, QueueEntry
from tether.contracts.signal import Signal
from tether.contracts.stream import ChatEvent, ModelCaps
from tether.contracts.usage import Usage


@runtime_checkable
class JournalStore(Protocol):
    """Append-only per-run journals plus run metadata, blobs and the effect ledger.

    `append` assigns `seq` (or checks the caller's `entry.seq` is the next one) atomically and
    returns it. With a `lease`, an append, meta or blob write whose epoch is stale or whose lease
    expired is rejected (`LeaseHeldError`) and never becomes visible (a blob's lease names its run).
    """

    async def append(self, run_id: str, entry: JournalEntry, lease: Lease | None = None) -> int: ...
    async def append_many(
        self, run_id: str, entries: list[JournalEntry], lease: Lease | None = None
    ) -> list[int]: ...
    async def load(self, run_id: str) -> list[JournalEntry]: ...
    async def put_meta(self, meta: RunMeta, lease: Lease | None = None) -> None: ...
    async def get_meta(self, run_id: str) -> RunMeta | None: ...
    async def list_runs(self, *, limit: int = 100) -> list[RunMeta]: ...
    async def delete(self, run_id: str) -> None: ...
    async def put_blob(self, key: str, data: bytes, lease: Lease | None = None) -> None: ...
    async def get_blob(self, key: str) -> bytes | None: ...
    async def append_effect(self, run_id: str, row: Mapping[str, Any]) -> None: ...
    async def load_effects(self, run_id: str) -> list[dict[str, Any]]: ...
    async def close(self) -> None: ...


@runtime_checkable
class RowWriting(Protocol):
    """A journal store that takes rows already encoded by `codec.encode_entry` (the segment's group
    commits): `(seq, json)` pairs, checked to continue the run's journal, durable when it returns."""

    async def append_rows(
        self, run_id: str, rows: list[tuple[int, str]], lease: Lease | None = None
    ) -> list[int]: ...


@runtime_checkable
class MetaRiding(Protocol):
    """A row-writing store that can carry a run's meta in that run's next journal write under the same
    lease (one transaction: one commit fewer per meta write). `defer_meta` returns at once; the meta is
    durable once that write is, superseded by a later meta write, and written on its own at release."""

    def defer_meta(self, meta: RunMeta, lease: Lease) -> None: ...


@runtime_checkable
class ClaimRiding(Protocol):
    """A queue store that can carry a segment's last journal write (its settle entry, with the settled meta it
    carries as `MetaRiding`) in the transaction of its worker's next claim, fenced by the segment's lease: one
    commit fewer per run. That claim also reports the run's claim (done, or suspended) and releases its lease.

    Only while a worker rides the claims (`ride_claims(wake)`) and only for runs that worker claimed here:
    `append_last_rows` then parks the rows, calls `wake` (the worker claims as soon as it can, even with no
    room to take a run), and returns once the claim that carried them committed, raising what a write of
    them would (a lost lease, a moved head: nothing written) or why the claim failed. Anything else is
    written as `append_rows` writes it. `ride_claims(None)` (a worker stopping) writes what waits now, each
    on its own. Until it returns, nobody sees the settle: not the run's handle, not another process."""

    async def append_last_rows(
        self, run_id: str, rows: list[tuple[int, str]], lease: Lease | None = None
    ) -> list[int]: ...

    def ride_claims(self, wake: Callable[[], None] | None) -> None: ...

    def parked(self) -> int:
        """How many finished runs' last writes wait for the next claim (each frees a worker's slot)."""
        ...


@runtime_checkable
class ImmediateRowWriting(Protocol):
    """A row-writing store whose write never suspends (SQLite, JSONL, memory): the engine calls
    `append_rows_now` in place of `append_rows` and commits without a task.

    A subclass (or instance) that makes writes wait, or wraps `append_rows` to watch them, sets
    `append_rows_now = None` to be written through `append_rows` again. The class is what declares
    it: a wrapper delegating through `__getattr__` is written through its own `append`/`append_many`.
    """

    def append_rows_now(
        self, run_id: str, rows: list[tuple[int, str]], lease: Lease | None = None
    ) -> list[int]: ...


@runtime_checkable
class LeasableStore(JournalStore, Protocol):
    """A store that fences writers: one live segment per run."""

    async def acquire(self, run_id: str, owner: LeaseOwner, ttl_s: float) -> Lease: ...
    async def renew(self, lease: Lease) -> Lease: ...
    async def release(self, lease: Lease) -> None: ...


@runtime_checkable
class Wakeups(Protocol):
    """A subscription to store notifications: `wait` returns True when one arrived since `clear`."""

    def clear(self) -> None: ...
    async def wait(self, timeout_s: float) -> bool: ...
    def close(self) -> None: ...


@runtime_checkable
class QueueStore(LeasableStore, Protocol):
    """A store that also holds the run queue, so workers on any number of hosts share the work.

    Claims skip rows other claimers hold (`FOR UPDATE SKIP LOCKED` on PostgreSQL) and rows whose run
    has a live lease; a claim whose holder's lease expired is claimed again (a takeover). Every
    time in the queue is the store's own clock, never a host's.
    """

    def describe(self) -> str:
        """Where the store lives, without secrets (for health lines and errors)."""
        ...

    async def enqueue(self, run: QueuedRun, meta: RunMeta, genesis: JournalEntry | None) -> bool:
        """Queue a run (writing `genesis` as its first entry when given); False if it was queued already."""
        ...

    async def claim(self, request: ClaimRequest) -> list[Claim]:
        """Let go of `request.finished` (as `finish` does), then claim up to `request.limit` runs."""
        ...

    async def finish(self, claim: Claim, state: FinishState, error: str | None = None) -> bool:
        """Let go of a claim; False when a newer claim (or a re-queue) superseded it."""
        ...

    async def requeue(self, lease: Lease) -> bool:
        """Put a suspended (or lapsed) run back in its queue, under `lease`; it is claimable once released."""
        ...

    async def queue_entry(self, run_id: str) -> QueueEntry | None: ...
    async def list_runs(self, *, limit: int = 100, status: str | None = None) -> list[RunMeta]: ...
    async def subscribe(self, topics: Sequence[str]) -> Wakeups: ...


@runtime_checkable
class ChatModel(Protocol):
    """A provider adapter. `id` is the adapter id (`"anthropic"`), `family` the raw-part family."""

    id: str
    family: str

    def caps(self, model: str) -> ModelCaps: ...
    def stream(self, request: ChatRequest, signal: Signal | None = None) -> AsyncIterator[ChatEvent]: ...


@runtime_checkable
class ClosableModel(ChatModel, Protocol):
    """An adapter that opens connections (its SDK client): `Engine.close` calls `aclose`, which releases what
    the adapter opened itself (a client passed in stays the caller's) and leaves it usable again."""

    async def aclose(self) -> None: ...


LimitName = Literal["max_processes", "max_memory_bytes", "max_cpu_s", "max_result_bytes"]
"""A resource cap of `ToolLimits`, as a capped call's `ExecResult.limit` names it."""


class ToolLimits(BaseModel):
    """What one out-of-process tool call may use (docs/executors.md, *Resource caps*); None lifts a cap.

    A call that hits one ends as a typed tool error naming it (`ExecResult.limit`), never an engine crash."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    max_processes: int | None = Field(default=128, ge=1)
    """Processes (and threads) the call may have at once, its own included."""
    max_memory_bytes: int | None = Field(default=2 * 1024**3, ge=1)
    """Address space per process (RLIMIT_AS): an allocation past it fails in the tool."""
    max_cpu_s: int | None = Field(default=600, ge=1)
    """CPU seconds per process (RLIMIT_CPU): the kernel stops it with SIGXCPU."""
    max_result_bytes: int | None = Field(default=16 * 1024**2, ge=1)
    """The size of the JSON result the engine reads back; past it the call is killed while it writes."""


class ExecRequest(BaseModel):
    """One tool dispatch handed to an executor."""

    model_config = ConfigDict(frozen=True)

    tool: str
    target: str
    """`module:qualname` of the tool function (out-of-process executors import it)."""
    args: dict[str, Any]
    timeout_s: float | None = None
    env: dict[str, str] = {}
    """Variables set for the call on top of the executor's environment (the tool's `env=`)."""
    cwd: str | None = None
    idempotency_key: str = ""
    attempt_id: str = ""
    """The ledger's id for this dispatch attempt (a container is named after it)."""
    workdir: str | None = None
    """The dispatch's fresh directory once `prepare` made it; None: the executor makes one."""
    work_mount: str | None = None
    """Where `cwd` appears inside a container (set by the container executor's `prepare`)."""
    read_paths: tuple[str, ...] = ()
    """Extra paths the tool declared it reads (the sandbox binds them read-only)."""
    hide_paths: tuple[str, ...] = ()
    """Paths a sandboxed call must never see even under a readable directory (the engine's store)."""
    limits: ToolLimits = ToolLimits()
    """The call's resource caps (process executors enforce them; docs/executors.md)."""


class ExecResult(BaseModel):
    """What an executor observed: the JSON result or the error, and how the process ended."""

    model_config = ConfigDict(frozen=True)

    outcome: Literal["ok", "error", "timeout"]
    value: Any = None
    error: str | None = None
    exit_code: int | None = None
    signal: str | None = None
    duration_ms: float = 0.0
    workdir: str = ""
    cwd: str | None = None
    work_mount: str | None = None
    pgid: int | None = None
    """The host process group the call ran in (process executors); gone once the result exists."""
    limit: LimitName | None = None
    """The resource cap the call hit (its outcome is then `error`), if one did."""


@runtime_checkable
class Executor(Protocol):
    """Runs one tool call somewhere (this process, a subprocess, a sandbox, a container)."""

    name: str

    async def run(
        self, request: ExecRequest, fn: Callable[..., Any] | None = None
    ) -> ExecResult: ...


@runtime_checkable
class PreparingExecutor(Executor, Protocol):
    """An executor that can fix a dispatch's placement (workdir, mounts) before the effect starts.

    The effect ledger calls `prepare` before it writes the intent row, so the row names the real
    workdir; `run` then uses `request.workdir` and removes it afterwards like one it made itself.
    """

    def prepare(self, request: ExecRequest) -> ExecRequest: ...


ExposureWait = Literal["released", "drained", "aborted", "timeout"]
"""How a wait for in-flight room ended: a hold `released`; `drained`, nothing in flight to wait for;
`aborted` by the signal; `timeout`, the hard ceiling's wait ran out (see `BudgetHooks.admit_turn_exposure`)."""


@runtime_checkable
class BudgetHooks(Protocol):
    """The only budget surface the agent loop sees (seed 001). `None` answers mean unbounded."""

    @property
    def signal(self) -> Signal | None:
        """Layer 3: fires when a ceiling is reached (a stream in flight is cut)."""

    def before_turn(self) -> None:
        """Layer 2: raise `BudgetExhaustedError` to block the next dispatch."""

    def max_affordable_output_tokens(self, served_by: str, est_input: int) -> int | None: ...
    def limited_by(self) -> Literal["usd", "tokens"] | None:
        """Which ceiling set the last `max_affordable_output_tokens` answer (None: none did), so a refusal
        names the ceiling that stopped it in its own unit."""
    def max_exposure_output_tokens(self, served_by: str, est_input: int) -> int | None: ...
    def admit_turn_exposure(
        self, served_by: str, est_input: int, planned_output: int
    ) -> Callable[[], None] | None:
        """Hold the attempt's estimate before it leaves; the returned release runs when the attempt settles.

        Raises `BudgetExhaustedError` with `data["reason"]` `exposure` (the in-flight exposure cap) or
        `in-flight` (the hard ceiling: the attempt's worst case does not fit beside the worst cases in
        flight). The loop always waits (`await_exposure_release`) on `in-flight`, and on `exposure` only
        when the invocation opted into the wait."""

    async def await_exposure_release(self, signal: Signal | None = None) -> ExposureWait: ...
    def live_exposure_usd(self) -> float: ...
    def open_call_meter(self, served_by: str) -> Callable[[Usage], None] | None: ...
    def remaining_usd(self) -> float | None: ...
    def assert_priced_dispatch(self, served_by: str) -> None: ...
    def on_usage(self, usage: Usage, served_by: str) -> None: ...
