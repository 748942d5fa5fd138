"""`Worker`: claims queued runs from a shared store and drives them through the engine's public API.

A worker holds up to `concurrency` runs at once. It claims when it has room and is woken by the
store's notifications (polling every `poll_s` as the fallback, which is also how lapsed claims of
dead workers are found). Each run is `engine.start(...)` of its id, so it resumes from the journal
under the run's lease; when it settles the worker reports the claim done (or suspended) with its
next claim, in the same round trip. Stopping stops claiming, lets runs finish for `grace_s`, then
hands the rest back: their leases are released and they are queued again, so another worker
resumes them at once. A run whose last `max_attempts` claims all lapsed (their workers died) is
dead-lettered instead of driven (`worker.dead_letter`).

Stopping is bounded even when the database stalls (accepts bytes, answers nothing): a round trip in
flight when `stop` is set, the hand-back and the reports of what the worker held all end by `grace_s` +
`STOP_S` after `stop`; what has not answered by then is abandoned (its claims lapse with their leases and
are taken over like a dead worker's), and the worker says so in one line.
"""

from __future__ import annotations

import asyncio
import os
import socket
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar, cast

from tether.contracts.errors import (
    ConfigError,
    LeaseHeldError,
    RunHandedBackError,
    StoreUnavailableError,
    TetherError,
)
from tether.contracts.money import usd
from tether.contracts.protocols import ClaimRiding, QueueStore, Wakeups
from tether.contracts.queue import (
    DEFAULT_MAX_ATTEMPTS,
    DEFAULT_QUEUE,
    Claim,
    ClaimRequest,
    Finished,
    FinishState,
    queue_topic,
)
from tether.contracts.schedules import ScheduleStore
from tether.engine.queue import queue_store
from tether.worker.dead_letter import dead_letter, dead_letter_reason
from tether.worker.schedules import fire_due

if TYPE_CHECKING:
    from tether.engine.engine import Engine
    from tether.engine.handle import RunHandle


T = TypeVar("T")

STOP_S = 4.0
"""After `stop` (and `grace_s`), seconds the store gets for what is left: an answer to the round trip in flight,
the hand-back of the runs still held and the reports of their claims. What has not answered by then is abandoned."""


class _Abandoned(Exception):
    """A store round trip did not answer within `STOP_S` of `stop`: the worker stops without it."""


def _retrieve(task: asyncio.Future[Any]) -> None:
    if not task.cancelled():
        task.exception()  # an abandoned round trip may still fail: that is expected, not worth a warning


@dataclass
class WorkerStats:
    """What a worker did, counted per claim."""

    claimed: int = 0
    takeovers: int = 0
    settled: int = 0
    suspended: int = 0
    handed_back: int = 0
    lost: int = 0
    failed: int = 0
    dead: int = 0


def _print(line: str) -> None:
    print(line, flush=True)


class Worker:
    """One worker process's claim loop (`tether worker` runs one)."""

    def __init__(
        self,
        engine: Engine,
        *,
        queues: Sequence[str] = (DEFAULT_QUEUE,),
        concurrency: int = 8,
        poll_s: float = 1.0,
        grace_s: float = 0.0,
        worker_id: str | None = None,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
        log: Callable[[str], None] = _print,
    ) -> None:
        """`max_attempts`: claims of a run in a row whose worker died before it settled, after which the
        run is dead-lettered (settled `error`, listed `dead`) instead of driven again."""
        if concurrency < 1:
            raise ConfigError(f"worker concurrency must be at least 1, got {concurrency}")
        if isinstance(max_attempts, bool) or not isinstance(max_attempts, int) or max_attempts < 1:
            raise ConfigError(
                f"max_attempts must be an int of at least 1 (claims whose worker died before a run is "
                f"dead-lettered), got {max_attempts!r}"
            )
        if not queues:
            raise ConfigError("a worker needs at least one queue to claim from")
        if poll_s <= 0 or grace_s < 0:
            raise ConfigError(f"poll must be > 0 and grace >= 0 seconds, got poll {poll_s}, grace {grace_s}")
        self.engine = engine
        self.queues = list(dict.fromkeys(queues))
        self.concurrency = concurrency
        self.poll_s = poll_s
        self.grace_s = grace_s
        self.max_attempts = max_attempts
        self.id = worker_id or f"{socket.gethostname()}:{os.getpid()}"
        self.stats = WorkerStats()
        self._log = log
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._handles: dict[str, RunHandle] = {}
        self._freed = asyncio.Event()
        self._finished: list[Finished] = []
        """Claims let go of since the last claim round trip, reported with the next one."""
        self._handing_back = False
        self._turn = 0
        self._schedules_at = 0.0
        """When (this loop's clock) to look for due schedule ticks next."""
        self._stopped_at: float | None = None
        """When (this loop's clock) the worker saw `stop`: shutdown's deadlines count from it."""
        self._unreachable = False
        """The store did not answer within `STOP_S` of `stop`: shutdown abandoned what was left."""
        self._reporting: list[Finished] = []
        """The finished claims the claim round trip in flight reports (back in `_finished` if it is abandoned)."""

    def health(self, store: QueueStore) -> str:
        """The line a worker prints when it is ready: who, what it serves, and where."""
        queues = ", ".join(
            f"{q} (cap {self.engine.limits.queues[q]})" if q in self.engine.limits.queues else q for q in self.queues
        )
        workflows = ", ".join(sorted(self.engine.workflows)) or "none registered"
        return (
            f"tether worker {self.id} ready: queues {queues}; concurrency {self.concurrency}; workflows "
            f"{workflows}; store {store.describe()}; lease ttl {self.engine.limits.lease_ttl_s:g} s; "
            f"poll {self.poll_s:g} s; max attempts {self.max_attempts}"
        )

    async def run(self, stop: asyncio.Event | None = None) -> WorkerStats:
        """Claim and drive runs until `stop` is set, then finish or hand back what it holds."""
        stop = stop or asyncio.Event()
        store = queue_store(await self.engine.store(), "tether worker")
        wakeups = await store.subscribe([queue_topic(q) for q in self.queues])
        riding = cast(ClaimRiding, store) if issubclass(type(store), ClaimRiding) else None
        self._log(self.health(store))
        try:
            if riding is not None:  # a finished run's settle rides the next claim, which it prompts at once
                riding.ride_claims(self._freed.set)
            while not stop.is_set():
                wakeups.clear()
                self._freed.clear()
                await self._unless_stopped(self._fire_schedules(store), stop, "its schedules look-up")
                # a run whose last write waits for this claim has done its work: its slot is free
                room = self.concurrency - len(self._tasks) + (riding.parked() if riding is not None else 0)
                if room > 0 or self._finished:
                    claims = await self._unless_stopped(self._claim(store, room), stop, "its claim")
                    for claim in claims:
                        self._start(claim)
                    if len(claims) == room:
                        continue  # there may be more: claim again as soon as there is room
                await self._idle(wakeups, stop)
        except _Abandoned:
            pass
        finally:
            if riding is not None:  # no more claims: what waits for one is written on its own
                riding.ride_claims(None)
            wakeups.close()
            await self._shutdown(store)
        return self.stats

    def _saw_stop(self) -> float:
        """When the worker first saw `stop` (this loop's clock)."""
        if self._stopped_at is None:
            self._stopped_at = asyncio.get_running_loop().time()
        return self._stopped_at

    async def _unless_stopped(self, work: Coroutine[Any, Any, T], stop: asyncio.Event, what: str) -> T:
        """`await work`, unless `stop` is set first and `work` then does not end within `STOP_S` (a store that
        stalls): then cancel it, leave it behind and raise `_Abandoned`."""
        task = asyncio.ensure_future(work)
        stopping = asyncio.ensure_future(stop.wait())
        try:
            await asyncio.wait([task, stopping], return_when=asyncio.FIRST_COMPLETED)
        except BaseException:
            task.cancel()
            raise
        finally:
            stopping.cancel()
        if not task.done():  # stopping with a round trip in flight: it may still answer, for a while
            left = self._saw_stop() + STOP_S - asyncio.get_running_loop().time()
            await asyncio.wait([task], timeout=max(0.0, left))
        if not task.done():
            self._unreachable = True
            self._finished = self._reporting + self._finished  # not reported: shutdown accounts for them
            self._reporting = []
            task.add_done_callback(_retrieve)
            task.cancel()  # psycopg may take seconds to give up on the stalled query: not waited for
            self._log(f"worker {self.id}: store unreachable: no answer within {STOP_S:g} s of stopping; "
                      f"abandoned {what}")
            raise _Abandoned
        return task.result()

    async def _claim(self, store: QueueStore, room: int) -> list[Claim]:
        """Report the finished claims and claim up to `room` runs, in one round trip."""
        finished, self._finished = self._finished, []
        if room <= 0:
            self._reporting = finished
            try:
                await self._report(store, finished)
            finally:
                self._reporting = []
            return []
        turn = self._turn % len(self.queues)  # rotate, so a busy first queue never starves the others
        self._turn += 1
        order = self.queues[turn:] + self.queues[:turn]
        request = ClaimRequest(
            worker=self.id,
            queues=order,
            workflows=sorted(self.engine.workflows),
            limit=room,
            ttl_s=self.engine.limits.lease_ttl_s,
            limits={q: self.engine.limits.queues[q] for q in order if q in self.engine.limits.queues},
            finished=finished,
            drives=True,  # it starts every run it claims: their leases may ride the claim
        )
        self._reporting = finished
        try:
            return await store.claim(request)
        except StoreUnavailableError as exc:
            if self._reporting is finished:  # not abandoned (then `_unless_stopped` put them back already)
                self._finished = finished + self._finished  # reported with the next claim
            self._log(f"worker {self.id}: claim failed, will retry: {exc.message}")
            return []
        finally:
            self._reporting = []

    async def _report(self, store: QueueStore, finished: list[Finished]) -> None:
        """Let go of claims on their own (no room to claim, or shutting down), taking each off `finished` once
        its report is answered (so what is left there was not reported)."""
        while finished:
            f = finished[0]
            try:
                await store.finish(f.claim, f.state, f.error)
            except TetherError as exc:
                self._log(f"run {f.claim.run_id}: could not report {f.state} ({exc.message}); its claim lapses instead")
            finished.pop(0)

    async def _fire_schedules(self, store: QueueStore) -> None:
        """Queue the due ticks of the schedules of this worker's workflows, at most once per poll (or at the tick)."""
        loop = asyncio.get_running_loop()
        if not isinstance(store, ScheduleStore) or loop.time() < self._schedules_at:
            return
        try:
            left = await fire_due(self.engine, store, sorted(self.engine.workflows), self._log)
        except TetherError as exc:
            self._log(f"worker {self.id}: firing schedules failed, will retry: {exc.message}")
            left = None
        # the tick's own moment (by the store's clock) when it comes before the next poll
        self._schedules_at = loop.time() + (self.poll_s if left is None else max(0.01, min(self.poll_s, left)))

    async def _idle(self, wakeups: Wakeups, stop: asyncio.Event) -> None:
        """Until new work is announced, a run frees a slot, `stop` is set, or the poll interval passes (or a
        schedule's tick is due)."""
        timeout = max(0.0, min(self.poll_s, self._schedules_at - asyncio.get_running_loop().time()))
        waiters = [
            asyncio.ensure_future(wakeups.wait(timeout)),
            asyncio.ensure_future(self._freed.wait()),
            asyncio.ensure_future(stop.wait()),
        ]
        try:
            await asyncio.wait(waiters, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for w in waiters:
                w.cancel()
            await asyncio.gather(*waiters, return_exceptions=True)
        if stop.is_set():
            self._saw_stop()

    def _start(self, claim: Claim) -> None:
        self.stats.claimed += 1
        self.stats.takeovers += claim.takeover
        task = asyncio.get_running_loop().create_task(self._drive(claim))
        self._tasks[claim.run_id] = task

    async def _drive(self, claim: Claim) -> None:
        loop = asyncio.get_running_loop()
        began = loop.time()
        how = "taken over" if claim.takeover else "claimed"
        lapsed = f", {claim.lapsed} lapsed in a row" if claim.lapsed else ""
        self._log(f"run {claim.run_id}: {how} from queue {claim.queue} (attempt {claim.attempts}{lapsed})")
        state: FinishState | None = "failed"  # None: already reported
        error: str | None = None
        try:
            if claim.lapsed >= self.max_attempts:
                state = await self._dead_letter(claim)
                return
            handle = self.engine.start(claim.workflow, claim.args, run_id=claim.run_id, deadline_s=claim.deadline_s)
            self._handles[claim.run_id] = handle
            if self._handing_back:
                handle.hand_back("worker shutting down")
            outcome = await handle
            state = "suspended" if outcome.status == "suspended" else "done"
            self.stats.suspended += state == "suspended"
            self.stats.settled += state == "done"
            self._log(
                f"run {claim.run_id}: {outcome.status} in {loop.time() - began:.2f} s, "
                f"{usd(outcome.cost.total_usd)} USD, replayed {outcome.replay.hits}"
            )
        except RunHandedBackError:
            state = "queued"
            self.stats.handed_back += 1
            self._log(f"run {claim.run_id}: handed back after {loop.time() - began:.2f} s")
        except (LeaseHeldError, StoreUnavailableError) as exc:
            state = "queued"  # another driver has it, or will once its lease lapses: never settle it here
            self.stats.lost += 1
            self._log(f"run {claim.run_id}: stopped, {exc.message}")
        except TetherError as exc:
            error = exc.message
            self.stats.failed += 1
            self._log(f"run {claim.run_id}: failed ({exc.code}): {exc.message}")
        except Exception as exc:  # a bug, not the workflow's error (those settle the run `error`)
            error = f"{type(exc).__name__}: {exc}"
            self.stats.failed += 1
            self._log(f"run {claim.run_id}: failed: {error}")
        finally:
            self._handles.pop(claim.run_id, None)
            if state is not None:
                self._finished.append(Finished(claim=claim, state=state, error=error))
            self._tasks.pop(claim.run_id, None)
            self._freed.set()

    async def _dead_letter(self, claim: Claim) -> FinishState | None:
        """Settle a run whose last `max_attempts` claims lapsed instead of driving it (None: reported `dead`)."""
        store = queue_store(await self.engine.store(), "tether worker")
        state = await dead_letter(self.engine, store, claim, self.max_attempts)
        if state is None:
            self.stats.dead += 1
            self._log(f"run {claim.run_id}: {dead_letter_reason(claim, self.max_attempts)}")
        else:
            self._log(f"run {claim.run_id}: had settled before its worker could report it; reported {state}")
        return state

    async def _shutdown(self, store: QueueStore) -> None:
        """Stop claiming (the caller did), let runs finish for `grace_s`, hand the rest back, report them; all of
        it by `grace_s` + `STOP_S` after `stop` (at least 1 s for the hand-back), abandoning what the store has
        not answered by then."""
        loop = asyncio.get_running_loop()
        began = self._saw_stop()
        tasks = list(self._tasks.values())
        if tasks and self.grace_s > 0:
            self._log(f"worker {self.id}: stopping; {len(tasks)} run(s) may finish within {self.grace_s:g} s")
            await asyncio.wait(tasks, timeout=max(0.0, began + self.grace_s - loop.time()))
        if self._tasks:
            self._log(f"worker {self.id}: handing back {len(self._tasks)} run(s)")
        self._handing_back = True
        for handle in list(self._handles.values()):
            handle.hand_back("worker shutting down")
        letting_go = loop.create_task(self._let_go(store))
        left = max(began + self.grace_s + STOP_S - loop.time(), 1.0)
        await asyncio.wait([letting_go], timeout=left)
        if not letting_go.done():
            self._unreachable = True
            letting_go.add_done_callback(_retrieve)
            letting_go.cancel()
        if self._unreachable:
            self._log(self._abandoned_line())
        self._log(f"worker {self.id}: stopped ({self.stats})")

    async def _let_go(self, store: QueueStore) -> None:
        """Wait for the handed-back runs to settle, then report every claim still held, one by one."""
        await asyncio.gather(*self._tasks.values(), return_exceptions=True)
        await self._report(store, self._finished)

    def _abandoned_line(self) -> str:
        """The one line a worker that stopped without its store prints: what it left to lapse."""
        held = sorted({*self._tasks, *(f.claim.run_id for f in self._finished)})
        if not held:
            return f"worker {self.id}: store unreachable: released nothing (it held no runs)"
        for task in self._tasks.values():
            task.cancel()  # their writes wait on the stalled store; the leases lapse instead
        ttl = self.engine.limits.lease_ttl_s
        return (
            f"worker {self.id}: store unreachable: released nothing for {len(held)} claimed run(s) "
            f"({', '.join(held)}); they are taken over when their leases lapse (lease ttl {ttl:g} s)"
        )
