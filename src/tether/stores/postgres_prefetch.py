"""`Prefetch`: what the round trip that took (or renewed) a lease also read, for its holder's next reads.

A segment reads its journal, its meta and its cancel request right after it takes the run's lease,
and the renewal loop reads the cancel request right after each renewal. On PostgreSQL the acquire
and renew functions read them in the same round trip, after the lease row was written and under the
run's lock. Each read is served once, within `FRESH_S`, and dropped on any write of that run from
this store: while the lease holds, fenced writers elsewhere are refused, so what is served is the
state the holder would have read.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from tether.stores.leases import cancel_request_key

FRESH_S = 1.0  # a read not asked for this soon after the lease was taken goes to the database


@dataclass
class _Reads:
    until: float
    rows: list[tuple[int, str]] | None = None
    meta: tuple[str | None] | None = None
    """(the meta JSON or None when the run has none), or None when not prefetched."""
    cancel: tuple[bytes | None] | None = None


class Prefetch:
    """One store's prefetched reads, by run."""

    def __init__(self) -> None:
        self._runs: dict[str, _Reads] = {}
        self._cancel_keys: dict[str, str] = {}

    def keep(
        self, run_id: str, rows: list[tuple[int, str]], meta: str | None, cancel: bytes | None
    ) -> None:
        """What an acquire read: the journal, the meta and the cancel request."""
        if len(self._runs) >= 64:
            self._sweep()
        self._runs[run_id] = _Reads(time.monotonic() + FRESH_S, rows, (meta,), (cancel,))
        self._cancel_keys[cancel_request_key(run_id)] = run_id

    def keep_cancel(self, run_id: str, cancel: bytes | None) -> None:
        """What a renewal read: the cancel request."""
        if len(self._runs) >= 64:
            self._sweep()
        self._runs[run_id] = _Reads(time.monotonic() + FRESH_S, cancel=(cancel,))
        self._cancel_keys[cancel_request_key(run_id)] = run_id

    def rows(self, run_id: str) -> list[tuple[int, str]] | None:
        reads = self._fresh(run_id)
        rows = None if reads is None else reads.rows
        if reads is not None:
            reads.rows = None
            self._spent(run_id, reads)
        return rows

    def meta(self, run_id: str) -> tuple[str | None] | None:
        reads = self._fresh(run_id)
        meta = None if reads is None else reads.meta
        if reads is not None:
            reads.meta = None
            self._spent(run_id, reads)
        return meta

    def blob(self, key: str) -> tuple[bytes | None] | None:
        run_id = self._cancel_keys.get(key)
        reads = None if run_id is None else self._fresh(run_id)
        cancel = None if reads is None else reads.cancel
        if reads is not None and run_id is not None:
            reads.cancel = None
            self._spent(run_id, reads)
        return cancel

    def forget(self, run_id: str) -> None:
        """This store wrote to the run, or let go of its lease: nothing prefetched for it is current."""
        if self._runs.pop(run_id, None) is not None:
            self._cancel_keys.pop(cancel_request_key(run_id), None)

    def forget_key(self, key: str) -> None:
        run_id = self._cancel_keys.get(key)
        if run_id is not None:
            self.forget(run_id)

    def _fresh(self, run_id: str) -> _Reads | None:
        reads = self._runs.get(run_id)
        if reads is not None and time.monotonic() > reads.until:
            self.forget(run_id)
            return None
        return reads

    def _spent(self, run_id: str, reads: _Reads) -> None:
        if reads.rows is None and reads.meta is None and reads.cancel is None:
            self.forget(run_id)

    def _sweep(self) -> None:
        """Drop what nobody asked for in time (a lease taken by a caller that did not read next)."""
        now = time.monotonic()
        for run_id in [r for r, reads in self._runs.items() if now > reads.until]:
            self.forget(run_id)
