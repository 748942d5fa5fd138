"""`JournalWriter`: one segment's journal appends under its lease, in group commits, fenced.

Every entry claims its seq and is indexed the moment it is staged; its bytes reach the store in a
group commit: one transaction for everything staged since the last one. An `append` returns once the
commit holding its entry is durable; `stage` (facts whose durability can ride the next append: time,
randomness, a budget draw, an agent's running entry) returns at once. Entries are committed in seq
order, so a staged entry is always durable before any later append returns.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, cast

from tether.contracts.entries import JournalEntry, Lease, RunMeta
from tether.contracts.errors import (
    JournalMissError,
    JournalOrderViolation,
    LeaseHeldError,
    StoreUnavailableError,
    TetherError,
)
from tether.contracts.protocols import ClaimRiding, ImmediateRowWriting, JournalStore, MetaRiding, RowWriting
from tether.contracts.signal import Signal
from tether.journal.chain import link_after
from tether.journal.matching import JournalIndex
from tether.stores.codec import encode_linked

RowWriter = Callable[[str, list[tuple[int, str]], Lease | None], list[int]]
"""`append_rows_now(run_id, rows, lease)`: a store's journal write that returns once durable, never waiting."""
AsyncRowWriter = Callable[[str, list[tuple[int, str]], Lease | None], Awaitable[list[int]]]
"""`append_rows(run_id, rows, lease)`: a store's journal write of rows already encoded."""


class AppendCancelled(asyncio.CancelledError):
    """The caller was cancelled, but its append finished: `stored` is the entry as journaled."""

    def __init__(self, stored: JournalEntry) -> None:
        super().__init__(f"cancelled after appending seq {stored.seq}")
        self.stored = stored


@dataclass
class _Batch:
    """Entries staged since the last group commit, their stored text, and the commit's future."""

    entries: list[JournalEntry] = field(default_factory=list)
    rows: list[tuple[int, str]] = field(default_factory=list)
    awaited: list[bool] = field(default_factory=list)
    """Per entry: appended by a caller waiting for it (True) or staged to ride along (False)."""
    last: bool = False
    """The segment's last write (its settle): a `ClaimRiding` store may carry it in its worker's next claim."""
    done: asyncio.Future[None] | None = None
    """The commit's future: set once the batch is durable (or failed). Callers await it through
    `asyncio.shield`, so cancelling one caller never cancels the write or its siblings' wait."""


@dataclass(eq=False)
class JournalWriter:
    """Appends one segment's entries; once a write is refused or fails (`lost`), it writes nothing more."""

    run_id: str
    store: JournalStore
    index: JournalIndex
    cancel: Signal
    """Aborted when the writer is lost, so every branch of the segment stops."""
    lease: Lease | None = None
    dry_run: bool = False
    head: int = 0
    """The last seq this segment knows; every append claims the next one, so a stale view is refused."""
    durable_head: int = 0
    """The last seq the store holds (everything after it is staged, waiting for a group commit)."""
    appended: int = 0
    live: int = 1
    """Branches of the workflow doing work now: with one, nothing else can stage into a batch."""
    lost: TetherError | None = None
    """Why this segment no longer writes (its lease was taken, or a journal write failed)."""
    _link: str = ""
    """The hash chain's next link (`tether.journal.chain`): the digest of the last entry staged or loaded."""
    _open: _Batch | None = None
    _committer: asyncio.Future[None] | None = None
    _write_now: RowWriter | None = field(init=False)
    _rows_writer: AsyncRowWriter | None = field(init=False)
    _last_writer: AsyncRowWriter | None = field(init=False)

    def __post_init__(self) -> None:
        top = self.index.head
        self.head = self.durable_head = (top.seq or 0) if top is not None else 0
        self._link = link_after([top] if top is not None and self.head else [])
        self._write_now = writes_without_waiting(self.store)
        rows = issubclass(type(self.store), RowWriting)
        self._rows_writer = cast(RowWriting, self.store).append_rows if rows else None
        last = rows and issubclass(type(self.store), ClaimRiding)
        self._last_writer = cast(ClaimRiding, self.store).append_last_rows if last else None

    # -- fencing ---------------------------------------------------------------------------------
    def lose(self, error: TetherError) -> None:
        """This segment no longer owns the run (or its journal write failed): stop everything, write nothing more."""
        if self.lost is None:
            self.lost = error
            lost = isinstance(error, LeaseHeldError | JournalOrderViolation)
            self.cancel.abort(f"{'lease lost' if lost else 'journal write failed'}: {error.message}")

    def _fenced(self) -> None:
        if self.lost is not None:
            raise self.lost

    async def _store_call(self, call: Awaitable[Any]) -> Any:
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

    def carry_meta(self, meta: RunMeta) -> bool:
        """Hand the meta to the store to ride this segment's next journal write (one commit fewer), when the
        store's class can (`MetaRiding`); False: it cannot, write it with `put_meta`."""
        self._fenced()
        if self.lease is None or not issubclass(type(self.store), MetaRiding):
            return False
        cast(MetaRiding, self.store).defer_meta(meta, self.lease)
        return True

    # -- staging and committing ------------------------------------------------------------------
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
        claimed, linked, digest = entry.seq, entry.prev, entry.payload_sha256
        entry.seq, entry.prev = seq, self._link  # numbered, chained and sealed in place: a fresh entry is handed over
        try:
            text, self._link = encode_linked(self.run_id, seq, entry, seal=True)  # a value not JSON fails its caller
        except BaseException:
            entry.seq, entry.prev, entry.payload_sha256 = claimed, linked, digest
            raise
        batch = self._open
        if batch is None:
            batch = self._open = _Batch()
        batch.entries.append(entry)
        batch.rows.append((seq, text))
        batch.awaited.append(False)
        self.head = seq
        self.index.add(entry)
        self.appended += 1
        return entry

    def defer(self, entry: JournalEntry) -> None:
        """Queue a fact (time, randomness) to be durable with the next append."""
        self.stage(entry)

    @property
    def deferred(self) -> list[JournalEntry]:
        """Staged entries not yet committed."""
        return list(self._open.entries) if self._open is not None else []

    def stage_awaited(self, entry: JournalEntry) -> JournalEntry:
        """`stage` an entry written as an awaited append is (a store's `append`, where it has no `append_rows`),
        made durable by the next `flush`: what is done between the two rides the same commit."""
        stored = self.stage(entry)
        assert self._open is not None
        self._open.awaited[-1] = True
        return stored

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

    async def flush(self, *, last: bool = False) -> None:
        """Make every staged entry durable (a no-op when nothing is staged). `last`: the segment writes nothing
        after this (its settle), so a `ClaimRiding` store may carry it in its worker's next claim."""
        if self._open is None or self.dry_run:
            return
        self._open.last = last
        if self._commit_now():
            return
        if await self._durable(self._commit()):
            raise asyncio.CancelledError

    def _commit_now(self) -> bool:
        """Commit what is staged in this call, when a group commit could gather nothing more (True: done).

        That is when one branch of the workflow runs (no sibling can stage into the batch), no commit
        is in flight (this one cannot overtake it) and the store writes without waiting
        (`ImmediateRowWriting`): the write never suspends, so there is nothing to cancel.
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
        """Wait for a commit; True when the caller was cancelled meanwhile (the write still finished).

        A cancelled caller keeps waiting (shielded) until its entry is durable, then reports the cancel.
        """
        try:
            await asyncio.shield(commit)
            return False
        except asyncio.CancelledError:
            while not commit.done():
                with contextlib.suppress(asyncio.CancelledError):
                    await asyncio.shield(commit)
            if commit.cancelled() or commit.exception() is not None:
                raise
            return True

    def _commit(self) -> asyncio.Future[None]:
        """The future of the commit that will hold everything staged so far (starting it if needed)."""
        batch = self._open
        assert batch is not None
        if batch.done is None:
            batch.done = asyncio.get_running_loop().create_future()
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
        if batch.last and self._last_writer is not None:
            seqs = await self._store_call(self._last_writer(self.run_id, batch.rows, self.lease))
        elif self._rows_writer is not None:
            seqs = await self._store_call(self._rows_writer(self.run_id, batch.rows, self.lease))
        else:
            seqs = []
            staged: list[JournalEntry] = []  # facts with no caller waiting ride one `append_many`
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


def writes_without_waiting(store: JournalStore) -> RowWriter | None:
    """The store's `append_rows_now` when its class declares `ImmediateRowWriting` (a class, not a
    delegating wrapper: a wrapper that intercepts `append` must see every write) and the instance did
    not set it to None."""
    if not issubclass(type(store), ImmediateRowWriting):
        return None
    now = getattr(store, "append_rows_now", None)
    return now if callable(now) else None
