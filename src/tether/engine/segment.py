"""One live drive of a run: journal appends under the lease, matching, branch liveness, suspension."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from tether.budget.accounts import Account
from tether.budget.calibration import InputCalibration
from tether.budget.exposure import ExposureGate
from tether.contracts.entries import JournalEntry, Lease, RunMeta
from tether.contracts.errors import (
    JournalMissError,
    JournalOrderViolation,
    LeaseHeldError,
    StoreUnavailableError,
    TetherError,
)
from tether.contracts.events import BaseEvent, BudgetUpdate, Figures, RunWarning
from tether.contracts.protocols import ImmediateRowWriting, JournalStore, RowWriting
from tether.contracts.signal import Signal
from tether.engine.events import EventStream
from tether.engine.external import ExternalSchema, check_resolution
from tether.engine.frame import CURRENT_FRAME
from tether.engine.outcome import DroppedBranch, ReplayStats
from tether.journal.disposition import Disposition, disposition
from tether.journal.matching import JournalIndex, Match
from tether.stores.codec import encode_entry

if TYPE_CHECKING:
    from tether.engine.engine import Engine
    from tether.engine.tree import Tree


class Abandoned(BaseException):
    """The matched call was abandoned: its branch derives `skipped` with zero spend.

    A `BaseException`, like `asyncio.CancelledError`: it unwinds the branch, and a workflow's `except
    Exception:` must not swallow it (the engine catches it where the branch ends)."""

    def __init__(self, scope: str, seq: int | None) -> None:
        super().__init__(f"abandoned work at scope {scope!r} (seq {seq})")
        self.scope = scope
        self.seq = seq


class AppendCancelled(asyncio.CancelledError):
    """The caller was cancelled, but its append finished: `stored` is the entry as journaled."""

    def __init__(self, stored: JournalEntry) -> None:
        super().__init__(f"cancelled after appending seq {stored.seq}")
        self.stored = stored


@dataclass(slots=True)
class Lookup:
    """The result of matching one call: what to do and with which journaled entries."""

    action: Disposition | None  # None = a miss
    match: Match | None

    @property
    def running(self) -> JournalEntry | None:
        return self.match.entry if self.match and self.action == "redispatch" else None


class _Commit(asyncio.Future[None]):
    """A group commit's future, which every caller of the batch awaits directly.

    Cancelling a waiting caller must never cancel the write, so `cancel()` refuses: the caller's task
    then receives its `CancelledError` when the commit is done (as `asyncio.shield` plus a wait for the
    write would arrange), and no caller allocates a shield of its own (one per agent in flight).
    """

    def cancel(self, msg: Any = None) -> bool:
        return False


@dataclass
class _Batch:
    """Entries staged since the last group commit, their stored text, and the commit's future."""

    entries: list[JournalEntry] = field(default_factory=list)
    rows: list[tuple[int, str]] = field(default_factory=list)
    awaited: list[bool] = field(default_factory=list)
    """Per entry: appended by a caller waiting for it (True) or staged to ride along (False)."""
    done: _Commit | None = None


@dataclass
class Segment:
    """Mutable state of one segment; everything durable goes through `append`."""

    engine: Engine
    run_id: str
    workflow: str
    store: JournalStore
    index: JournalIndex
    events: EventStream
    root: Account
    dry_run: bool = False
    strict_pricing: bool = False
    exposure: ExposureGate | None = None
    lease: Lease | None = None
    stats: ReplayStats = field(default_factory=ReplayStats)
    dropped: list[DroppedBranch] = field(default_factory=list)
    cancel: Signal = field(default_factory=Signal)
    appended: int = 0
    live: int = 1
    parked: dict[str, tuple[int, asyncio.Future[Any]]] = field(default_factory=dict)
    all_parked: asyncio.Event = field(default_factory=asyncio.Event)
    counters: dict[tuple[str, str], int] = field(default_factory=dict)
    tree: Tree = field(init=False)
    next_agent_id: int = 1
    pending_writes: list[asyncio.Future[Any]] = field(default_factory=list)
    head: int = 0
    """The last seq this segment knows; every append claims the next one, so a stale view is refused."""
    durable_head: int = 0
    """The last seq the store holds (everything after it is staged, waiting for a group commit)."""
    _open: _Batch | None = None
    _committer: asyncio.Future[None] | None = None
    _write_now: RowWriter | None = field(init=False)
    _rows_writer: AsyncRowWriter | None = field(init=False)
    lease_lost: TetherError | None = None
    handed_back: TetherError | None = None
    """Set by `hand_back`: the segment stops like a cancel but does not settle, and its lease is released."""
    warnings: list[str] = field(default_factory=list)
    allow_unpriced: bool = False
    _warned: set[str] = field(default_factory=set)
    schemas: dict[int, ExternalSchema] = field(default_factory=dict)
    """The declared schema of each `await_external` parked in this segment, by suspension seq."""
    calibration: InputCalibration = field(init=False)
    """Input tokens each model bills beyond the estimate, learned by this run (carried by its dispatch records)."""
    tool_orphans: dict[str, str] | None = None
    """Idempotency key → attempt id of tool dispatches orphaned by an earlier segment (loaded on first use)."""
    resources: AsyncExitStack = field(default_factory=AsyncExitStack)
    """What the segment opened on first use (MCP servers); the runner closes it when the segment ends."""
    hard_ceiling: bool = False
    """`overshoot="hard"`: every dispatch holds its worst case on the ceiling until it settles."""
    money_reset_seq: int = 0
    """The seq of the last raise or orphan settlement: budget refusals journaled before it are decided again."""

    def __post_init__(self) -> None:
        # From the index's side lists (agents' entries, decisions), not another pass over the journal.
        ids = [e.agent_id for e in self.index.spend_entries if e.agent_id is not None]
        self.next_agent_id = max(ids, default=0) + 1
        self.head = self.durable_head = max(self.index.by_seq, default=0)
        self.calibration = InputCalibration.from_journal(self.index.decision_entries)
        self._write_now = writes_without_waiting(self.store)
        rows = issubclass(type(self.store), RowWriting)
        self._rows_writer = cast(RowWriting, self.store).append_rows if rows else None

    # -- the lease -----------------------------------------------------------------------------
    def lose(self, error: TetherError) -> None:
        """This segment no longer owns the run (or its journal write failed): stop everything, write nothing more."""
        if self.lease_lost is None:
            self.lease_lost = error
            lost = isinstance(error, LeaseHeldError | JournalOrderViolation)
            self.cancel.abort(f"{'lease lost' if lost else 'journal write failed'}: {error.message}")

    def hand_back(self, error: TetherError) -> None:
        """Stop the segment without settling the run (a worker shutting down): in-flight calls are cut and
        journal their terminals, then the lease is released so another driver resumes at once."""
        if self.handed_back is None:
            self.handed_back = error
            self.cancel.abort(error.message)

    def _fenced(self) -> None:
        if self.lease_lost is not None:
            raise self.lease_lost

    async def _store_call(self, call: Any) -> Any:
        """Run a fenced store write; a rejection by lease or seq means another driver owns the run."""
        try:
            return await call
        except (LeaseHeldError, JournalOrderViolation) as exc:
            self.lose(exc)
            raise

    async def put_blob(self, key: str, data: bytes) -> None:
        """A fenced blob write (checkpoints) that finishes even if the caller is cancelled.

        Staged entries are committed first, so a checkpoint is never durable before the journal
        entries it was taken after.
        """
        if self.dry_run:
            return
        await self.flush()
        self._fenced()
        await asyncio.shield(self._store_call(self.store.put_blob(key, data, self.lease)))

    async def put_meta(self, meta: RunMeta) -> None:
        self._fenced()
        await self._store_call(self.store.put_meta(meta, self.lease))

    def warn(self, key: str, message: str) -> None:
        """A warning once per `key`: on the outcome, as an event and on the `tether` logger."""
        if key in self._warned:
            return
        self._warned.add(key)
        self.warnings.append(message)
        logging.getLogger("tether").warning("run %s: %s", self.run_id, message)
        self.events.emit(RunWarning(message=message))

    def warn_unpriced(self, model: str) -> None:
        self.warn(
            f"unpriced:{model}",
            f"model {model!r} has no price row; allow_unpriced=True lets it run under the USD ceiling, "
            f"and its spend is not counted against it (its usage is itemized under cost.unpriced).",
        )

    # -- journal -----------------------------------------------------------------------------
    # Every entry claims its seq and is indexed the moment it is staged; its bytes reach the store in
    # a group commit: one transaction for everything staged since the last one. An `append` returns
    # once the commit holding its entry is durable; `stage` (facts whose durability can ride the next
    # append: time, randomness, a budget draw, an agent's running entry) returns at once. Entries are
    # committed in seq order, so a staged entry is always durable before any later append returns.
    def stage(self, entry: JournalEntry) -> JournalEntry:
        """Claim the next seq, index the entry and queue it for the next group commit (not durable yet)."""
        if self.dry_run:
            raise JournalMissError(
                f"dry run of {self.run_id!r} would write a {entry.kind} entry at scope "
                f"{entry.scope!r}; the journal does not cover this call. Run without dry_run=True.",
                scope=entry.scope,
                kind=entry.kind,
            )
        self._fenced()
        seq = self.head + 1
        claimed = entry.seq
        entry.seq = seq  # numbered in place: callers hand over a fresh entry (at 10,000 agents copies add up)
        try:
            text = encode_entry(self.run_id, seq, entry)  # a value that is not JSON fails its own caller only
        except BaseException:
            entry.seq = claimed
            raise
        stored = entry
        if self._open is None:
            self._open = _Batch()
        self._open.entries.append(stored)
        self._open.rows.append((seq, text))
        self._open.awaited.append(False)
        self.head = seq
        self.index.add(stored)
        self.appended += 1
        return stored

    def defer(self, entry: JournalEntry) -> None:
        """Queue a fact (time, randomness) to be durable with the next append."""
        self.stage(entry)

    @property
    def deferred(self) -> list[JournalEntry]:
        """Staged entries not yet committed."""
        return list(self._open.entries) if self._open is not None else []

    async def append(self, entry: JournalEntry) -> JournalEntry:
        """Durably append (shielded from cancellation) and index the entry; never in a dry run."""
        stored = self.stage(entry)
        assert self._open is not None
        self._open.awaited[-1] = True
        if self._commit_now():
            return stored
        if await self._durable(self._commit()):
            raise AppendCancelled(stored) from None
        return stored

    async def flush(self) -> None:
        """Make every staged entry durable (a no-op when nothing is staged)."""
        if self._open is None or self.dry_run:
            return
        if self._commit_now():
            return
        if await self._durable(self._commit()):
            raise asyncio.CancelledError

    def _commit_now(self) -> bool:
        """Commit what is staged in this call, when a group commit could gather nothing more (True: done).

        That is when one branch of the workflow runs (no sibling can stage into the batch), no commit
        is in flight (this one cannot overtake it) and the store writes without waiting
        (`append_rows_now`): the write never suspends, so there is nothing to cancel and no reason for a
        task and the two loop turns it costs.
        """
        if self.live != 1 or self._write_now is None or not (self._committer is None or self._committer.done()):
            return False
        batch, self._open = self._open, None
        assert batch is not None
        try:
            self._fenced()
            self._check_order(batch, self._write_now(self.run_id, batch.rows, self.lease))
        except BaseException as exc:  # as in a group commit: the segment stops, whatever stopped the write
            failed = self._write_failed(exc)
            if failed is exc or not isinstance(exc, Exception):
                raise
            raise failed from exc
        self.durable_head = batch.rows[-1][0]
        return True

    @staticmethod
    async def _durable(commit: asyncio.Future[None]) -> bool:
        """Wait for a commit; True when the caller was cancelled meanwhile (the write still finished)."""
        try:
            await commit  # a `_Commit`: cancelling this caller cannot cancel it
            return False
        except asyncio.CancelledError:
            while not commit.done():  # (the commit refuses cancellation, so this is only a safeguard)
                with contextlib.suppress(asyncio.CancelledError):
                    await commit
            if commit.exception() is not None:
                raise
            return True

    def _commit(self) -> asyncio.Future[None]:
        """The future of the commit that will hold everything staged so far (starting it if needed)."""
        batch = self._open
        assert batch is not None
        if batch.done is None:
            batch.done = _Commit(loop=asyncio.get_running_loop())
        if self._committer is None or self._committer.done():
            # A task, so the write is shielded from its callers; it first runs on the next loop turn,
            # after every branch that is ready now has staged its entries into the same batch.
            self._committer = asyncio.ensure_future(self._group_commit())
        return batch.done

    async def _group_commit(self) -> None:
        while self._open is not None:
            batch, self._open = self._open, None
            try:
                self._fenced()
                await self._write_rows(batch)
            except BaseException as exc:
                failed = self._write_failed(exc)
                for b in (batch, self._open):
                    if b is not None and b.done is not None and not b.done.done():
                        b.done.set_exception(failed)
                        b.done.exception()  # retrieved here too: a batch nobody awaited must not warn
                self._open = None
                if isinstance(exc, asyncio.CancelledError):
                    raise
                return
            self.durable_head = batch.rows[-1][0]
            if batch.done is not None and not batch.done.done():
                batch.done.set_result(None)

    def _write_failed(self, exc: BaseException) -> TetherError:
        """A journal write failed: the staged view is ahead of the store now, so nothing more may be written."""
        failed = exc if isinstance(exc, TetherError) else StoreUnavailableError(
            f"journal write for run {self.run_id!r} failed ({type(exc).__name__}: {exc}); this "
            f"segment stopped and wrote nothing more. Resume the run once the store is usable.",
            run_id=self.run_id,
        )
        self.lose(failed)
        return failed

    async def _write_rows(self, batch: _Batch) -> None:
        # A `RowWriting` store takes the text encoded at staging; any other store (or a wrapper that
        # intercepts `append`) gets the protocol's own calls.
        if self._rows_writer is not None:
            seqs = await self._store_call(self._rows_writer(self.run_id, batch.rows, self.lease))
        else:
            seqs = []
            staged: list[JournalEntry] = []  # facts with no caller waiting ride one `append_many`, as before
            for entry, awaited in zip(batch.entries, batch.awaited, strict=True):
                if not awaited:
                    staged.append(entry)
                    continue
                if staged:
                    seqs += await self._store_call(self.store.append_many(self.run_id, staged, self.lease))
                    staged = []
                seqs.append(await self._store_call(self.store.append(self.run_id, entry, self.lease)))
            if staged:
                seqs += await self._store_call(self.store.append_many(self.run_id, staged, self.lease))
        self._check_order(batch, seqs)

    def _check_order(self, batch: _Batch, seqs: list[int]) -> None:
        if list(seqs) != [seq for seq, _ in batch.rows]:
            raise JournalOrderViolation(
                f"journal order: run {self.run_id!r} stored seqs {list(seqs)[:3]}... where this segment "
                f"claimed {batch.rows[0][0]}..; another writer appended. Resume the run.",
                run_id=self.run_id,
            )

    def lookup(self, scope: str, key: str) -> Lookup:
        """Match a call and decide with the one replay predicate; update the replay stats."""
        m = self.index.match(scope, key)
        if m is None:
            self._count("misses")
            return Lookup(None, None)
        return self._decided(scope, m, disposition(m.entry, m.terminal, abandoned=m.abandoned))

    def replayed(self, scope: str, key: str) -> JournalEntry | Lookup:
        """`lookup`, but a call that replays a terminal gets that terminal itself (no `Match`, no `Lookup`:
        this runs once per replayed host step); any other outcome is the `Lookup` `lookup` returns."""
        taken = self.index.take(scope, key)
        if taken is None:
            self.stats.misses += 1
            return Lookup(None, None)
        entry, terminal, abandoned = taken
        action = disposition(entry, terminal, abandoned=abandoned)
        if action == "replay" and terminal is not None:
            self._count("hits")
            return terminal
        return self._decided(scope, Match(entry, terminal, abandoned), action)

    def _count(self, name: str) -> None:
        """`stats.<name> += 1`."""
        setattr(self.stats, name, getattr(self.stats, name) + 1)

    def _decided(self, scope: str, m: Match, action: Disposition) -> Lookup:
        if action == "replay":
            self._count("hits")
        elif action == "skip":
            self._count("skipped")
            raise Abandoned(scope, m.entry.seq)
        else:
            self._count("reruns")
        return Lookup(action, m)

    def budget_update(self, model: str, usd: float) -> None:
        """Telemetry for every live debit: what was drawn, by which agent, and what the run has left."""
        frame = CURRENT_FRAME.get(None)
        agent_id = frame.agent_id if frame is not None else None
        self.events.emit(BudgetUpdate(model=model, usd=usd, agent_id=agent_id, **self.figures()))

    def figures(self) -> Figures:
        """Spend against the run's USD ceiling and the tree's token ceiling, right now."""
        root, tokens = self.root, self.tree.tokens
        room = tokens.room()
        return Figures(
            spent_usd=root.spent, held_usd=max(0.0, root.held), ceiling_usd=root.ceiling,
            remaining_usd=root.remaining(),
            spent_tokens=int(tokens.spent), held_tokens=max(0, int(tokens.held)),
            ceiling_tokens=None if tokens.ceiling is None else int(tokens.ceiling),
            remaining_tokens=None if room is None else int(room),
        )

    def require_live(self, what: str, scope: str) -> None:
        """Replay-strict runs stop at the first would-be-live call."""
        if self.dry_run:
            raise JournalMissError(
                f"dry run of {self.run_id!r}: {what} at scope {scope!r} is not in the journal "
                f"(it would run live). The workflow changed since the journal was written.",
                scope=scope,
            )

    def next_counter(self, scope: str, name: str) -> int:
        k = (scope, name)
        n = self.counters.get(k, 0)
        self.counters[k] = n + 1
        return n

    def mint_agent_id(self) -> int:
        n = self.next_agent_id
        self.next_agent_id += 1
        return n

    # -- branch liveness and suspension -------------------------------------------------------
    def branch_waiting(self, delta: int) -> None:
        """A branch stopped (-1) or resumed (+1) doing work; zero live with parked ones settles."""
        self.live += delta
        if self.live <= 0 and self.parked:
            self.all_parked.set()

    async def suspend(self, scope: str, entry: JournalEntry, key: str, event: BaseEvent) -> Any:
        """The value that closes suspension `entry`: journaled already, or awaited by parking."""
        assert entry.seq is not None
        closer = self.index.closer(entry.seq)
        if closer is not None and closer.kind == "abandon":
            self._count("skipped")
            raise Abandoned(scope, entry.seq)
        if closer is not None:
            return closer.value
        self.events.emit(event)
        return await self.park(key, entry.seq)

    async def park(self, key: str, seq: int) -> Any:
        """Park this branch until `key` is resolved live (or the run settles `suspended`)."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[Any] = loop.create_future()
        self.parked[key] = (seq, fut)
        self.branch_waiting(-1)
        try:
            return await fut
        finally:
            self.parked.pop(key, None)
            if not fut.cancelled():
                self.branch_waiting(+1)

    def wake(self, key: str, value: Any) -> bool:
        slot = self.parked.get(key)
        if slot is None or slot[1].done():
            return False
        slot[1].set_result(value)
        return True

    async def resolve(self, key: str, value: Any) -> bool:
        """Close the open suspension named `key` with `value`; False when none is open.

        `InvalidResolutionError` (nothing journaled) when the value does not match its schema.
        """
        target = find_open_suspension(self.index, key)
        if target is None:
            return False
        assert target.seq is not None
        # Validated before anything is written: an invalid value leaves the suspension open.
        data = check_resolution(target, value, self.schemas.get(target.seq), run_id=self.run_id)
        await self.append(
            JournalEntry(
                kind="resolution",
                ref=target.seq,
                scope=target.scope,
                key=target.key,
                value=data,
                started_at=self.engine.clock(),
            )
        )
        self.wake(key, data)
        return True


RowWriter = Callable[[str, list[tuple[int, str]], Lease | None], list[int]]
AsyncRowWriter = Callable[[str, list[tuple[int, str]], Lease | None], Awaitable[list[int]]]
"""`append_rows_now(run_id, rows, lease)`: a store's journal write that returns once durable, never waiting."""


def writes_without_waiting(store: JournalStore) -> RowWriter | None:
    """The store's `append_rows_now` when its class declares `ImmediateRowWriting` (a class, not a
    delegating wrapper: a wrapper that intercepts `append` must see every write) and the instance did
    not set it to None."""
    if not issubclass(type(store), ImmediateRowWriting):
        return None
    now = getattr(store, "append_rows_now", None)
    return now if callable(now) else None


def suspension_key(entry: JournalEntry) -> str | None:
    """The human key of a suspension entry (what `resolve_external` is called with)."""
    if isinstance(entry.value, dict):
        k = entry.value.get("key")
        return k if isinstance(k, str) else None
    return None


def find_open_suspension(index: JournalIndex, key: str) -> JournalEntry | None:
    for e in index.open_suspensions():
        if suspension_key(e) == key:
            return e
    return None
