"""`LeaseKeeper`: a segment's lease, taken before the journal is read and renewed at a third of its TTL.

A renewal the store refuses (another driver took the run over) loses the lease at once; renewals that
keep failing (the store is unreachable) lose it once two thirds of the TTL have passed since the last
good one, so this driver stops before anyone else may take the run. Losing it calls `on_lost`, which
cancels the segment: in-flight calls are cut and nothing more is written.

The renewal loop also reads the run's cancel request (`engine.cancel` from another process writes it
to the store), so a driven run stops within one renewal interval of being asked to.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Callable
from types import TracebackType

from ulid import ULID

from tether.contracts.entries import Lease
from tether.contracts.errors import LeaseHeldError, TetherError
from tether.contracts.protocols import JournalStore, LeasableStore
from tether.stores.leases import cancel_request_key, current_owner

LostListener = Callable[[TetherError], None]
CancelListener = Callable[[str], None]


async def request_cancel(store: JournalStore, run_id: str, reason: str, now: float) -> None:
    """Durably ask whoever drives `run_id` to cancel it (each request is unique, so a new one is always seen)."""
    body = {"reason": reason, "requested_at": now, "id": str(ULID())}
    await store.put_blob(cancel_request_key(run_id), json.dumps(body).encode())


def _reason(data: bytes) -> str:
    try:
        reason = json.loads(data).get("reason")
    except (ValueError, AttributeError):
        reason = None
    return str(reason or "cancelled by request")


class LeaseKeeper:
    """`async with LeaseKeeper(store, run_id, ttl_s) as lease:` holds the run for one segment."""

    def __init__(self, store: LeasableStore, run_id: str, ttl_s: float, *, patience_s: float = 0.0) -> None:
        """`patience_s`: how long to keep asking while another holder has the lease (0: refuse at once)."""
        self.store = store
        self.run_id = run_id
        self.ttl_s = ttl_s
        self.patience_s = patience_s
        self.lease: Lease | None = None
        self.lost: TetherError | None = None
        self._on_lost: LostListener | None = None
        self._on_cancel: CancelListener | None = None
        self._cancel_seen: bytes | None = None
        self._renewed_at = 0.0
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> Lease:
        owner, deadline, wait = current_owner(), time.monotonic() + self.patience_s, 0.02
        while True:
            try:
                self.lease = await self.store.acquire(self.run_id, owner, self.ttl_s)
                break
            except LeaseHeldError:
                if time.monotonic() + wait > deadline:
                    raise
                await asyncio.sleep(wait)
                wait = min(wait * 2, 0.5)
        self._renewed_at = time.monotonic()
        self._cancel_seen = await self._cancel_request()  # a request older than this segment is not for it
        self._task = asyncio.create_task(self._keep())
        return self.lease

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(BaseException):
                await self._task
        if self.lease is not None and self.lost is None:
            with contextlib.suppress(TetherError):
                await self.store.release(self.lease)

    def on_lost(self, listener: LostListener) -> None:
        """Call `listener(error)` when the lease is lost (at once if it already was)."""
        self._on_lost = listener
        if self.lost is not None:
            listener(self.lost)

    def on_cancel(self, listener: CancelListener) -> None:
        """Call `listener(reason)` when another process asks to cancel the run (seen at a renewal)."""
        self._on_cancel = listener

    async def _cancel_request(self) -> bytes | None:
        with contextlib.suppress(TetherError, OSError):
            return await self.store.get_blob(cancel_request_key(self.run_id))
        return None

    async def _check_cancel(self) -> None:
        data = await self._cancel_request()
        if data is not None and data != self._cancel_seen:
            self._cancel_seen = data
            if self._on_cancel is not None:
                self._on_cancel(_reason(data))

    def _lose(self, error: TetherError) -> None:
        self.lost = error
        if self._on_lost is not None:
            self._on_lost(error)

    async def _keep(self) -> None:
        interval = self.ttl_s / 3
        wait = interval
        while True:
            await asyncio.sleep(wait)
            assert self.lease is not None
            try:
                self.lease = await asyncio.wait_for(self.store.renew(self.lease), timeout=interval)
                self._renewed_at, wait = time.monotonic(), interval
                await self._check_cancel()
            except LeaseHeldError as exc:
                self._lose(exc)
                return
            except (TetherError, OSError, TimeoutError) as exc:
                silent = time.monotonic() - self._renewed_at
                if silent >= self.ttl_s - interval:
                    self._lose(LeaseHeldError(
                        f"lease lost: run '{self.run_id}' could not renew its lease for {silent:.1f} s "
                        f"(last error: {exc}); this driver stopped before the {self.ttl_s:g} s lease could "
                        f"expire and be taken over. Resume the run once the store is reachable.",
                        run_id=self.run_id,
                    ))
                    return
                wait = interval / 4  # try again soon: the lease is running out
