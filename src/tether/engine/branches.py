"""`ctx.parallel`'s branch tasks, started in input order in waves, never more at once than a bound allows.

`ctx.parallel` starts a wave of `WAVE` branches per pass of the event loop: each wave is a callback queued
behind what is already ready, so branches under way (a model reply arrived, a commit finished) go on between
the waves instead of waiting for every branch to have started. Unbounded, every branch still runs concurrently
with the others (none waits for another to finish); what the waves change is that a fan-out of 10,000 short
agents keeps in memory the ones under way, not 10,000 parked coroutine chains that every full cycle collection
walks (docs/performance.md). Bounded (`concurrency=k`), waves stop at `k` running, a branch's task exists only
while it runs, the next one (in input order) starts the moment one finishes, and a finished branch keeps only
its outcome. A branch's scope, and so its journal identity, is its input index either way; results come back in
input order.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Callable, Coroutine
from typing import Any

from tether.contracts.errors import BudgetExhaustedError
from tether.engine.replay import Abandoned

_PENDING: Any = object()
WAVE = 8
"""Branches `ctx.parallel` starts per pass of the event loop (fewer when a bound is reached). One per pass gives
each branch's commit a transaction of its own; thousands per pass park them all (docs/performance.md: at 10,000
one-turn agents 4 to 32 cost the same CPU; at 100,000 under a 10,000 bound, 8 made 35 full collections where 16
made 50)."""


class BranchPool:
    """Runs `n` branches `start(i)` at most `limit` at a time, keeping each one's outcome by index.

    `live` is the segment's count of working branches (`Suspensions.branch_waiting`): a successor is counted
    before the branch it replaces stops counting, and an unbounded pool's next wave while it waits to start, so
    a run whose started branches have all parked on `await_external` settles `suspended` (bounded, the unstarted
    ones wait for a slot, which a parked branch keeps) and never while a successor is being started.
    """

    __slots__ = (
        "_ctx",
        "_fail_fast",
        "_limit",
        "_live",
        "_n",
        "_next",
        "_on_done",
        "_outcomes",
        "_queued",
        "_running",
        "_start",
        "_stopped",
        "_wake",
        "failed",
        "refused",
    )

    def __init__(self, start: Callable[[int], Coroutine[Any, Any, Any]], n: int, limit: int,
                 live: Callable[[int], None], *, fail_fast: bool) -> None:
        self._start = start
        self._n = n
        self._limit = limit
        self._next = 0
        self._running: dict[asyncio.Task[Any], int] = {}
        self._outcomes: list[Any] = [_PENDING] * n
        self._ctx = contextvars.copy_context()  # each branch task runs in a copy of the caller's context
        self._wake: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._live = live
        self._fail_fast = fail_fast
        self._stopped = False
        self._on_done = self._finished  # bound once, not per branch
        self._queued = False  # a wave is queued
        self.failed: BaseException | None = None
        """Fail-fast: the first branch failure (in completion order) that is not a budget refusal."""
        self.refused: BudgetExhaustedError | None = None
        """Fail-fast: the first budget refusal (its admitted siblings finish, then it is raised)."""

    def fill(self) -> None:
        """Start the next wave: up to `WAVE` branches in input order, as many as the bound leaves room for; while
        some are left and there is room, queue the next wave behind what is ready now."""
        end = min(self._n, self._next + WAVE)
        while not self._stopped and self._next < end and len(self._running) < self._limit:
            self._spawn()
        if not self._stopped and self._next < self._n and len(self._running) < self._limit and not self._queued:
            self._queued = True
            self._live(+1)  # the branches to start next count as working until they have started
            asyncio.get_running_loop().call_soon(self._next_wave, context=self._ctx)

    def _next_wave(self) -> None:
        self._queued = False
        self.fill()
        self._live(-1)
        self._wake_if_done()

    def _spawn(self) -> None:
        i = self._next
        self._next = i + 1
        self._live(+1)
        task = asyncio.create_task(self._start(i), context=self._ctx.copy())
        self._running[task] = i
        task.add_done_callback(self._on_done, context=self._ctx)

    def _wake_if_done(self) -> None:
        done = not self._running and (self._stopped or self._next >= self._n)
        if (self.failed is not None or done) and not self._wake.done():
            self._wake.set_result(None)

    def _finished(self, task: asyncio.Task[Any]) -> None:
        i = self._running.pop(task)
        if task.cancelled():
            self._outcomes[i] = asyncio.CancelledError()
        else:
            exc = task.exception()
            self._outcomes[i] = exc if exc is not None else _Value(task.result())
            if exc is not None and self._fail_fast and not isinstance(exc, Abandoned):
                if isinstance(exc, BudgetExhaustedError):
                    self.refused = self.refused or exc
                elif self.failed is None:
                    self.failed = exc
                    self._stopped = True  # nothing more starts; the caller cancels the running ones
        if not self._queued:  # (a queued wave starts the next ones; else the bound held them: the successor starts)
            self.fill()  # the successor counts as working before this branch stops counting
        self._live(-1)
        self._wake_if_done()

    async def wait(self) -> None:
        """Until every branch finished (fail-fast: or one failed); on any exit by exception (the caller was
        cancelled), cancel the running branches and wait for them."""
        try:
            if self._running or self._next < self._n:
                await asyncio.shield(self._wake)
        except BaseException:
            await self.cancel()
            raise

    async def cancel(self) -> None:
        """Start nothing more; cancel the running branches and wait until they finished."""
        self._stopped = True
        running = list(self._running)
        for task in running:
            task.cancel()
        if running:
            await asyncio.gather(*running, return_exceptions=True)  # their done callbacks ran before gather's

    def outcomes(self) -> list[Any]:
        """Each branch's value or the exception it ended with, in input order (as `gather(return_exceptions)`)."""
        return [o.value if type(o) is _Value else o for o in self._outcomes]

    def results(self) -> list[Any]:
        """Fail-fast results in input order: a value, None for an abandoned branch; a cancelled one raises."""
        out: list[Any] = []
        for o in self._outcomes:
            if type(o) is _Value:
                out.append(o.value)
            elif isinstance(o, Abandoned):
                out.append(None)
            else:
                raise o
        return out


class _Value:
    """A branch's returned value (told apart from a returned exception object)."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value
