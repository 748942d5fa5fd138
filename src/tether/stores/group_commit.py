"""`GroupCommit`: appends to one run that arrive while one is in flight share the next round trip.

Store-agnostic: the store supplies `send(run_id, head, rows, lease)`, one round trip that writes `rows`
if `head` is still the run's head (and the lease holds), and otherwise answers the real head. Rows are
numbered and checksummed here with the shared codec. A batch that carries its seqs is numbered from
them; one that leaves seq unset is numbered from the last head this store saw and renumbered once if
another writer moved it. Each caller gets its own seqs or its own error.
"""

from __future__ import annotations

import asyncio
import random
from collections import OrderedDict, deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from tether.contracts.entries import JournalEntry, Lease
from tether.contracts.errors import JournalOrderViolation, NonSerializableValueError
from tether.stores.codec import number_entries

Send = Callable[[str, int | None, list[tuple[int, str]], Lease | None], Awaitable[int | None]]
"""(run_id, the head the rows follow or None for a lease check only, rows, lease) -> None once written,
or the real head when it was not `head`; raises when the lease is refused."""

RETRIES = 32  # head races with writers in other processes before an append gives up
HEADS = 4096  # runs whose last seq is remembered, to number appends that leave seq unset


@dataclass
class _Append:
    """One caller's batch, waiting to ride along in the run's next round trip."""

    entries: list[JournalEntry]
    lease: Lease | None
    done: asyncio.Future[list[int]] | None = None
    result: list[int] | BaseException | None = None

    @property
    def explicit(self) -> bool:
        return any(e.seq is not None for e in self.entries)


def _settle(item: _Append) -> None:
    """Hand a follower its result: its seqs, its error, or cancellation if the round trip never finished."""
    done, result = item.done, item.result
    if done is None or done.done():
        return
    if isinstance(result, Exception):
        done.set_exception(result)
    elif isinstance(result, list):
        done.set_result(result)
    else:
        done.cancel()


class GroupCommit:
    """Per-run batching of appends over one `send` round trip each."""

    def __init__(self, send: Send) -> None:
        self._send = send
        self._appending: dict[str, deque[_Append]] = {}
        self._drains: set[asyncio.Task[None]] = set()
        self._heads: OrderedDict[str, int] = OrderedDict()

    async def append_many(self, run_id: str, entries: list[JournalEntry], lease: Lease | None) -> list[int]:
        item = _Append(list(entries), lease)
        waiting = self._appending.get(run_id)
        if waiting is not None:  # an append to this run is in flight: join the next round trip
            item.done = asyncio.get_running_loop().create_future()
            waiting.append(item)
            return await item.done
        self._appending[run_id] = deque()
        try:
            await self._write(run_id, [item])
        finally:
            self._hand_over(run_id)
        if isinstance(item.result, BaseException):
            raise item.result
        assert item.result is not None
        return item.result

    def saw_head(self, run_id: str, head: int) -> None:
        """A load saw the run end at `head` (a better guess for appends that leave seq unset)."""
        if run_id not in self._appending:
            self._remember(run_id, head)

    def forget(self, run_id: str) -> None:
        self._heads.pop(run_id, None)

    async def close(self) -> None:
        """Wait for appends still queued behind a round trip."""
        if self._drains:
            await asyncio.gather(*self._drains, return_exceptions=True)

    def _hand_over(self, run_id: str) -> None:
        """After a round trip: appends that queued behind it go in a drain task, or the run is idle."""
        if self._appending[run_id]:
            task = asyncio.get_running_loop().create_task(self._drain(run_id))
            self._drains.add(task)
            task.add_done_callback(self._drains.discard)
        else:
            del self._appending[run_id]

    async def _drain(self, run_id: str) -> None:
        waiting = self._appending[run_id]
        try:
            while waiting:
                group = [waiting.popleft()]
                # Followers share the leader's lease and leave seq to the store, so one head numbers them all.
                while waiting and waiting[0].lease == group[0].lease and not waiting[0].explicit:
                    group.append(waiting.popleft())
                group = [g for g in group if g.done is not None and not g.done.cancelled()]
                try:
                    if group:
                        await self._write(run_id, group)
                finally:
                    for g in group:
                        _settle(g)
        finally:
            for g in waiting:
                if g.done is not None and not g.done.done():
                    g.done.cancel()
            del self._appending[run_id]

    def _guess_head(self, run_id: str, leader: _Append) -> int:
        for i, e in enumerate(leader.entries):
            if e.seq is not None:
                return e.seq - 1 - i
        return self._heads.get(run_id, 0)

    def _remember(self, run_id: str, head: int) -> None:
        self._heads[run_id] = head
        self._heads.move_to_end(run_id)
        while len(self._heads) > HEADS:
            self._heads.popitem(last=False)

    async def _write(self, run_id: str, group: list[_Append]) -> None:
        """One round trip for `group` (usually); sets each item's result to its seqs or its error."""
        lease = group[0].lease
        head, confirmed = self._guess_head(run_id, group[0]), False
        try:
            for attempt in range(RETRIES):
                if attempt > 1:  # lost the head twice running: back off a little, at random, so racing writers part
                    await asyncio.sleep(random.uniform(0, 0.0005 * attempt))
                open_items = [g for g in group if g.result is None]
                if not open_items:
                    return
                batch: list[tuple[_Append, list[tuple[int, str]]]] = []
                at, unsure = head, False
                for g in open_items:
                    try:
                        rows = number_entries(run_id, at, g.entries)
                    except NonSerializableValueError as exc:
                        g.result = exc  # this caller's data, whatever the head
                        continue
                    except JournalOrderViolation as exc:
                        if confirmed:
                            g.result = exc
                            continue
                        unsure = True  # the head was a guess: learn it before blaming the batch
                        break
                    batch.append((g, rows))
                    at += len(rows)
                if unsure:
                    batch, at = [], head
                rows = [row for _, item_rows in batch for row in item_rows]
                actual = await self._send(run_id, None if not rows and not unsure else head, rows, lease)
                if actual is not None:
                    head, confirmed = actual, True
                    self._remember(run_id, head)
                    continue
                confirmed = True
                for g, item_rows in batch:
                    g.result = [seq for seq, _ in item_rows]
                if rows:
                    head = at
                    self._remember(run_id, at)
            raise JournalOrderViolation(
                f"journal order: run '{run_id}' kept moving under {RETRIES} append attempts (other writers "
                f"append to it at the same time); nothing from this batch was appended. Drive a run from one "
                f"place at a time (a lease does that), then retry.",
                run_id=run_id,
            )
        except BaseException as exc:
            for g in group:
                if g.result is None:
                    g.result = exc
            if not isinstance(exc, Exception):
                raise
