"""The run queue on PostgreSQL: enqueue, `SKIP LOCKED` claims, hand-backs, and LISTEN/NOTIFY wake-ups.

A queued run is a row beside its journal. Workers claim rows in priority then age order, skipping
rows other claimers hold and runs with a live lease; a claim whose holder's lease expired (a dead
or cut-off worker) is claimed again, and counted in the same statement (`Claim.lapsed`), so a worker
can dead-letter a run whose workers keep dying. A per-queue cap counts claimed rows cluster-wide under
an advisory lock, so the cap holds however many workers claim at once. Every time is the database's.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NoReturn

from tether.contracts.entries import JournalEntry, Lease, LeaseOwner, RunMeta
from tether.contracts.errors import LeaseHeldError, StoreUnavailableError
from tether.contracts.queue import Claim, ClaimRequest, FinishState, QueuedRun, QueueEntry
from tether.stores.codec import check_rows, number_entries
from tether.stores.leases import current_owner
from tether.stores.postgres_budgets import PostgresBudgets, budget_statements
from tether.stores.postgres_schedules import PostgresSchedules, schedule_statements
from tether.stores.postgres_sessions import PostgresSessions, session_statements
from tether.stores.postgres_sql import notify_channel

_RECONNECT_S = (0.1, 5.0)  # backoff bounds of the LISTEN connection


# The claim, and in the same statement (one transaction) the count of lapsed claims of each run it takes
# over, kept in the blob `<run_id>/queue-lapses` as {"lapses", "claim", "enqueued_at", "workers"}. A
# takeover at claim id c means claim c-1 lapsed; the blob remembers the takeover claim that last counted,
# so the streak goes on only when c-1 was itself a counted takeover (of the same queue row: a deleted and
# re-queued run starts again). Any claim its worker reported in between ends the streak. The update reads
# the stored row under its row lock (ON CONFLICT), never an older snapshot of it.
# Then, still in the same transaction, the claiming worker's driver takes each claimed run's lease (`acquire`, its
# rows 'a' after the claims'), so the segment that drives the run starts without a commit of its own.
# First of all, the claim carries the last journal write of each run this worker finished since its previous
# claim (`ClaimRiding`): the run's settle rows and settled meta, through the store's own fenced `append` (its
# advisory lock, lease and head checks; refused, it writes nothing and the claim goes on), and once written the
# run's claim is reported (done, or suspended) with its lease released (`finish`). The claim's limit reads `f`,
# so all of that is done before the claim looks at the queue (a capped queue counts the reported run as gone).
# A claim that only takes queued runs and their leases (no takeover, no report, no carried write: `quiet`)
# commits without waiting for the WAL flush (`synchronous_commit` off for its transaction alone): it is
# visible to every other session at once, so no two drivers ever hold a run, and its driver's first journal
# write (always a synchronous commit, before any effect) flushes it too. A server crash can lose only a claim
# whose driver has made nothing durable, and a lost claim's lease can never fence a write again (each claim's
# owner id is new); the run is queued again as it was. It takes one WAL flush off enqueue-to-start.
_COUNTED_CLAIM = """
WITH w AS MATERIALIZED (
  SELECT p.i, p.run, p.claim, p.state, p.epoch,
         {s}.append(p.run, p.head, NULL, NULL, r.seqs, r.texts, p.epoch, p.owner, p.created, p.status, p.meta) AS answer
    FROM unnest(%s::text[], %s::bigint[], %s::bigint[], %s::text[], %s::float8[], %s::text[], %s::text[],
                %s::bigint[], %s::text[]) WITH ORDINALITY AS p(run, head, epoch, owner, created, status, meta, claim,
                                                               state, i)
   CROSS JOIN LATERAL (
     SELECT array_agg(x.seq ORDER BY x.seq) AS seqs, array_agg(x.text ORDER BY x.seq) AS texts
       FROM unnest(%s::bigint[], %s::bigint[], %s::text[]) AS x(i, seq, text) WHERE x.i = p.i) r
   ORDER BY p.i
), f AS MATERIALIZED (
  SELECT w.i, w.run, w.answer, CASE WHEN w.answer = 'ok' AND w.state IS NOT NULL
                                    THEN {s}.finish(w.run, w.claim, w.state, NULL, w.epoch) END AS finished
    FROM w
), c AS MATERIALIZED (
  SELECT * FROM {s}.claim(%s::text, %s::text[], %s::integer[], %s::text[],
                          (SELECT %s::integer + 0 * count(*) FROM f)::integer, %s::float8, %s::text[],
                          %s::bigint[], %s::text[], %s::text[], %s::bigint[]) WITH ORDINALITY
), counted AS (
  INSERT INTO {s}.blobs AS b (key, data)
  SELECT c.o_run || '/queue-lapses', convert_to(jsonb_build_object('lapses', 1, 'claim', c.o_claim,
         'enqueued_at', q.enqueued_at, 'workers', jsonb_build_array(q.claimed_by))::text, 'UTF8')
    FROM c JOIN {s}.queue q ON q.run_id = c.o_run WHERE c.o_takeover
  ON CONFLICT (key) DO UPDATE SET data = CASE
    WHEN (OLD ->> 'claim')::bigint = (NEW ->> 'claim')::bigint - 1 AND OLD -> 'enqueued_at' = NEW -> 'enqueued_at'
    THEN convert_to(jsonb_set(jsonb_set(NEW, '{lapses}', to_jsonb((OLD ->> 'lapses')::integer + 1)),
                              '{workers}', (OLD -> 'workers') || (NEW -> 'workers'))::text, 'UTF8')
    ELSE EXCLUDED.data END
  RETURNING b.key, convert_from(b.data, 'UTF8')::jsonb AS body
), a AS MATERIALIZED (
  SELECT c.o_run, c.ordinality AS claim_ord, x.*
    FROM c CROSS JOIN LATERAL {s}.acquire(c.o_run, %s::text, %s::text, %s::float8, NULL::bigint,
                                         c.o_run || '/cancel-request') WITH ORDINALITY x
   WHERE %s::boolean
), quiet AS MATERIALIZED (
  SELECT set_config('synchronous_commit', 'off', true)
   WHERE %s::boolean AND NOT EXISTS (SELECT 1 FROM c WHERE c.o_takeover)
)
SELECT 'c'::text, c.o_run, c.o_queue, c.o_workflow, c.o_claim, c.o_deadline, c.o_attempts, c.o_takeover, c.o_meta,
       (n.body ->> 'lapses')::integer, (n.body -> 'workers')::text, NULL::text, NULL::text, NULL::bigint,
       NULL::float8, NULL::float8, NULL::float8, NULL::bigint, NULL::text, NULL::bytea, c.ordinality, 0::bigint
  FROM c LEFT JOIN counted n ON n.key = c.o_run || '/queue-lapses'
 WHERE (SELECT count(*) FROM quiet) >= 0
UNION ALL
SELECT 'a'::text, a.o_run, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, a.o_outcome, a.o_owner, a.o_epoch,
       a.o_expires, a.o_ttl, a.o_now, a.o_seq, a.o_text, a.o_data, a.claim_ord, a.ordinality
  FROM a
UNION ALL
SELECT 'w'::text, f.run, NULL, NULL, NULL, NULL, NULL, f.finished, NULL, NULL, NULL, f.answer, NULL, NULL,
       NULL, NULL, NULL, NULL, NULL, NULL, f.i, 0::bigint
  FROM f
 ORDER BY 1 DESC, 21, 22
""".replace("OLD", "convert_from(b.data, 'UTF8')::jsonb").replace("NEW", "convert_from(EXCLUDED.data, 'UTF8')::jsonb")

# Enqueueing a dead-lettered run again puts it back in a queue (a new claim id: its streak of lapses is over).
# A live lease does not stop it: the dead-letterer may not have released its lease yet, and a `tether resume`
# driving the run keeps workers away until it lets go, as every claim checks.
_REVIVE = """
WITH r AS (
  UPDATE {s}.queue c SET state = 'queued', queue = %s, priority = %s, deadline_s = %s, claim_id = c.claim_id + 1,
         claimed_by = NULL, claimed_until = NULL, error = NULL, enqueued_at = extract(epoch FROM clock_timestamp())
   WHERE c.run_id = %s AND c.state = 'dead'
  RETURNING c.run_id, c.queue
), m AS (
  UPDATE {s}.meta SET status = 'queued', json = %s WHERE run_id IN (SELECT run_id FROM r)
)
SELECT pg_notify({channel}, 'q:' || r.queue) FROM r
"""


def queue_statements(schema: str) -> dict[str, str]:
    """The statements this module adds to the store's own (`postgres_sql.statements`), by name."""
    literals = {"{s}": f'"{schema}"', "{channel}": f"'{notify_channel(schema)}'"}
    out = {"claim_counted": _COUNTED_CLAIM, "revive": _REVIVE}
    for name, text in out.items():
        for token, value in literals.items():
            text = text.replace(token, value)
        out[name] = text
    return out


_ALONE = "alone"
"""What a parked write is told when no claim will carry it: write it on its own."""


@dataclass(eq=False)
class _Parked:
    """A finished segment's last journal write, waiting for its worker's next claim (`ClaimRiding`)."""

    rows: list[tuple[int, str]]
    lease: Lease
    claim_id: int
    done: asyncio.Future[str]
    """The store's answer to the write ('ok', 'head:<seq>', 'fence:<lease>'), or `_ALONE`."""


def _answer(parked: _Parked, answer: str | BaseException) -> None:
    if parked.done.done():  # its writer was cancelled meanwhile
        return
    if isinstance(answer, str):
        parked.done.set_result(answer)
    else:
        parked.done.set_exception(answer)


class Subscription:
    """Wake-ups for some topics; `wait` returns True once one of them was notified since `clear`."""

    def __init__(self, listener: Listener, topics: Sequence[str]) -> None:
        self._listener = listener
        self.topics = frozenset(topics)
        self._event = asyncio.Event()

    def notify(self) -> None:
        self._event.set()

    def clear(self) -> None:
        self._event.clear()

    async def wait(self, timeout_s: float) -> bool:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._event.wait(), timeout_s)
        return self._event.is_set()

    def close(self) -> None:
        self._listener.drop(self)


class Listener:
    """One LISTEN connection per store, reconnecting with backoff; wakes the subscriptions a payload names.

    While it is disconnected nothing is lost for good: callers wait with a timeout and poll, and a
    reconnect wakes every subscription so they look again at once.
    """

    def __init__(self, conninfo: str, channel: str) -> None:
        self._conninfo = conninfo
        self._channel = channel
        self._subs: set[Subscription] = set()
        self._listening = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def subscribe(self, topics: Sequence[str], ready_s: float = 2.0) -> Subscription:
        sub = Subscription(self, topics)
        self._subs.add(sub)
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._listen())
        with contextlib.suppress(TimeoutError):  # not listening yet: the caller's polling covers it
            await asyncio.wait_for(self._listening.wait(), ready_s)
        return sub

    def drop(self, sub: Subscription) -> None:
        self._subs.discard(sub)

    def _dispatch(self, payload: str) -> None:
        for sub in list(self._subs):
            if payload in sub.topics:
                sub.notify()

    async def _listen(self) -> None:
        import psycopg

        backoff, reconnect = _RECONNECT_S[0], False
        while True:
            try:
                conn = await psycopg.AsyncConnection.connect(self._conninfo, autocommit=True, connect_timeout=5)
                async with conn:
                    await conn.execute(f'LISTEN "{self._channel}"')
                    self._listening.set()
                    backoff = _RECONNECT_S[0]
                    if reconnect:
                        for sub in list(self._subs):
                            sub.notify()  # anything sent while we were away: look again
                    reconnect = True
                    async for note in conn.notifies():
                        self._dispatch(note.payload)
            except (psycopg.Error, OSError):
                pass
            self._listening.clear()
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, _RECONNECT_S[1])

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(BaseException):
                await self._task
            self._task = None


class PostgresQueue(PostgresBudgets, PostgresSchedules, PostgresSessions):
    """The `QueueStore` half of `PostgresStore` (which supplies the connection and fencing helpers), with the
    budgets across runs and the schedules that live beside the queue."""

    conninfo: str
    channel: str
    schema: str
    _sql: dict[str, str]

    def __init__(self) -> None:
        self._sql.update(queue_statements(self.schema))  # the store set its schema and statements first
        self._sql.update(budget_statements(self.schema))
        self._sql.update(schedule_statements(self.schema))
        self._sql.update(session_statements(self.schema))
        self._listener: Listener | None = None
        self._claimed: dict[str, int] = {}
        """Run id -> claim id of the claims this store handed out and nobody finished yet."""
        self._releases: dict[str, int] = {}
        """Run id -> the lease epoch whose release rides along with that run's finish."""
        self._wake: Callable[[], None] | None = None
        """Set while a worker rides its claims (`ride_claims`): called when a run's last write parks."""
        self._parked: dict[str, _Parked] = {}
        """Run id -> its segment's last write, waiting for the next claim."""
        self._carried: dict[str, tuple[int, int]] = {}
        """Run id -> (claim id, lease epoch) a claim reported and released with the run's last write: the
        worker's own report of that claim and the driver's release of that lease have nothing left to send."""

    async def _fetch(self, name: str, params: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        raise NotImplementedError

    def _reject(self, run_id: str, lease: Lease, row: tuple[Any, ...] | str, action: str = "append") -> NoReturn:
        raise NotImplementedError

    def _fence_args(self, lease: Lease | None) -> tuple[int | None, str | None]:
        raise NotImplementedError

    def _owner_json(self, owner: LeaseOwner) -> str:
        raise NotImplementedError

    def _took_at_claim(self, run_id: str, owner: LeaseOwner, rows: list[tuple[Any, ...]]) -> None:
        """Keep the lease (and the reads) a claim took for this process's driver of `run_id`."""

    def _untaken(self, run_id: str) -> int | None:
        """The epoch of a lease a claim took for `run_id` that no driver used (released with the finish)."""
        return None

    def _meta_to_carry(self, run_id: str, lease: Lease) -> RunMeta | None:
        """The meta (`MetaRiding`) that rides `run_id`'s next write under `lease`, taken off for that write."""
        return None

    def _wrote(self, run_id: str, rows: list[tuple[int, str]]) -> None:
        """`rows` of `run_id` are durable (the store's view of the head moves past them)."""

    async def append_rows(self, run_id: str, rows: list[tuple[int, str]], lease: Lease | None = None) -> list[int]:
        raise NotImplementedError

    # -- ClaimRiding: a run's last write rides its worker's next claim -------------------------------------
    def ride_claims(self, wake: Callable[[], None] | None) -> None:
        """`ClaimRiding`: park the last write of the runs claimed here for the next claim, calling `wake` when one
        parks; None: stop, and tell what is parked (not yet sent) to write on its own."""
        self._wake = wake
        if wake is None:
            parked, self._parked = self._parked, {}
            for p in parked.values():
                _answer(p, _ALONE)

    def parked(self) -> int:
        return len(self._parked)

    async def append_last_rows(
        self, run_id: str, rows: list[tuple[int, str]], lease: Lease | None = None
    ) -> list[int]:
        """`ClaimRiding`: a segment's last write, carried by its worker's next claim when the worker claimed the
        run here and rides its claims; else (or once the worker stops riding) written as `append_rows` does."""
        claim_id = self._claimed.get(run_id)
        if self._wake is None or lease is None or not rows or claim_id is None or run_id in self._parked:
            return await self.append_rows(run_id, rows, lease)
        check_rows(run_id, rows[0][0] - 1, rows)
        parked = self._parked[run_id] = _Parked(rows, lease, claim_id, asyncio.get_running_loop().create_future())
        self._wake()
        try:
            answer = await parked.done
        finally:
            if self._parked.get(run_id) is parked:  # (cancelled before any claim took it)
                del self._parked[run_id]
        if answer == _ALONE:
            return await self.append_rows(run_id, rows, lease)
        if answer.startswith("fence:"):
            self._reject(run_id, lease, answer)
        if answer.startswith("head:"):
            check_rows(run_id, int(answer[5:]), rows)  # raises JournalOrderViolation: nothing was written
            raise StoreUnavailableError(f"journal write for run {run_id!r} answered {answer!r}", run_id=run_id)
        self._wrote(run_id, rows)
        return [seq for seq, _ in rows]

    def _carry(self) -> tuple[list[tuple[str, _Parked]], tuple[list[Any], ...]]:
        """Take every parked write for the claim about to be sent: them, and the claim statement's first arguments."""
        carrying, self._parked = list(self._parked.items()), {}
        cols: tuple[list[Any], ...] = tuple([] for _ in range(12))
        for i, (run_id, p) in enumerate(carrying, start=1):
            meta = self._meta_to_carry(run_id, p.lease)
            state = None if meta is None else ("suspended" if meta.status == "suspended" else "done")
            row = (run_id, p.rows[0][0] - 1, p.lease.epoch, self._owner_json(p.lease.owner),
                   None if meta is None else meta.created_at, None if meta is None else meta.status,
                   None if meta is None else meta.model_dump_json(), p.claim_id, state)
            for col, value in zip(cols, row, strict=False):
                col.append(value)
            for seq, text in p.rows:
                cols[9].append(i)
                cols[10].append(seq)
                cols[11].append(text)
        return carrying, cols

    def _carried_by_claim(self, carrying: list[tuple[str, _Parked]], answers: dict[str, tuple[str, bool]]) -> None:
        """Hand each carried write its answer; a reported claim is no longer held here, its lease released."""
        for run_id, p in carrying:
            answer, finished = answers.get(run_id, ("", False))
            if finished:
                if self._claimed.get(run_id) == p.claim_id:
                    del self._claimed[run_id]
                if len(self._carried) >= 1024:
                    self._carried.clear()
                self._carried[run_id] = (p.claim_id, p.lease.epoch)
            _answer(p, answer or StoreUnavailableError(
                f"the claim that carried run {run_id!r}'s last journal write did not answer for it; nothing "
                f"is known to be written. Resume the run.", run_id=run_id))

    def _reported_by_carry(self, claim: Claim) -> bool:
        """`claim` was reported with its run's last write (nothing left to send)."""
        carried = self._carried.get(claim.run_id)
        return carried is not None and carried[0] == claim.claim_id

    def _released_by_carry(self, lease: Lease) -> bool:
        """`lease` was released with its run's last write (nothing left to send)."""
        carried = self._carried.get(lease.run_id)
        return carried is not None and carried[1] == lease.epoch

    async def enqueue(self, run: QueuedRun, meta: RunMeta, genesis: JournalEntry | None) -> bool:
        text = None if genesis is None else number_entries(run.run_id, 0, [genesis])[0][1]
        params = (
            run.run_id, run.queue, run.priority, run.workflow, run.deadline_s, meta.created_at,
            meta.model_dump_json(), text, None if not run.budgets else json.dumps(run.budgets), run.reserve_usd,
        )
        ((outcome,),) = await self._fetch("enqueue", params)
        if outcome == "exists":
            revive = (run.queue, run.priority, run.deadline_s, run.run_id, meta.model_dump_json())
            if await self._fetch("revive", revive):
                return True
        if outcome == "held":
            raise LeaseHeldError(
                f"run '{run.run_id}' is being driven right now (its lease is live), so it was not queued; "
                f"enqueue it once that driver has settled it, or let that driver finish.",
                run_id=run.run_id,
            )
        if outcome == "raced":
            raise LeaseHeldError(
                f"run '{run.run_id}' was started elsewhere while it was being queued; nothing was queued. "
                f"Enqueue it again to queue the run as it now stands.",
                run_id=run.run_id,
            )
        return bool(outcome == "queued")

    # A driver of a claimed run releases its lease just before the worker finishes the claim, so that
    # release is sent with the finish (one round trip, one transaction: a handed-back run is claimable
    # the moment it is queued again). A worker that dies in between leaves the lease to expire.
    def _release_at_finish(self, lease: Lease) -> bool:
        """Leave the release of `lease` to its run's finish if this store holds the run's claim (True also when the
        claim that carried the run's last write released it already)."""
        if self._released_by_carry(lease):
            return True
        if lease.run_id not in self._claimed:
            return False
        self._releases[lease.run_id] = lease.epoch
        return True

    async def _flush_release(self, run_id: str) -> None:
        """Send a release that waits for a finish now (this store is about to look at or take the lease)."""
        epoch = self._releases.pop(run_id, None)
        if epoch is not None:
            await self._fetch("release", (run_id, epoch))

    def _letting_go(self, claim: Claim) -> int | None:
        """Forget `claim` as held here; the lease epoch whose release goes with its finish, if any."""
        if self._claimed.get(claim.run_id) == claim.claim_id:
            del self._claimed[claim.run_id]
        untaken = self._untaken(claim.run_id)
        released = self._releases.pop(claim.run_id, None)
        return released if released is not None else untaken

    def _held_again(self, claim: Claim, epoch: int | None) -> None:
        """A finish that failed: the claim is still held here, and the release still waits for it."""
        self._claimed.setdefault(claim.run_id, claim.claim_id)
        if epoch is not None:
            self._releases.setdefault(claim.run_id, epoch)

    async def claim(self, request: ClaimRequest) -> list[Claim]:
        caps = [request.limits.get(q) for q in request.queues]
        done = [(f, self._letting_go(f.claim)) for f in request.finished if not self._reported_by_carry(f.claim)]
        params = (
            request.worker, request.queues, caps, request.workflows, request.limit, request.ttl_s,
            [f.claim.run_id for f, _ in done], [f.claim.claim_id for f, _ in done], [f.state for f, _ in done],
            [f.error for f, _ in done], [epoch for _, epoch in done],
        )
        owner = current_owner()
        carrying, carried = self._carry()
        try:
            answer = await self._fetch("claim_counted", (*carried, *params, self._owner_json(owner), owner.owner_id,
                                                         request.ttl_s, request.drives, not carrying and not done))
        except BaseException as exc:
            for f, epoch in done:
                self._held_again(f.claim, epoch)
            failed = exc if isinstance(exc, Exception) else StoreUnavailableError(
                f"the claim that carried the last journal writes of {len(carrying)} run(s) was abandoned; they may "
                f"or may not be written. Resume the runs.")
            for _, p in carrying:
                _answer(p, failed)
            raise
        claims = []
        taken: dict[str, list[tuple[Any, ...]]] = {}
        answers: dict[str, tuple[str, bool]] = {}
        for row in answer:
            if row[0] == "w":
                answers[row[1]] = (row[11], bool(row[7]))
                continue
            if row[0] == "a":
                taken.setdefault(row[1], []).append(row[11:20])
                continue
            run_id, queue, workflow, claim_id, deadline, attempts, takeover, meta, lapsed, by = row[1:11]
            args = RunMeta.model_validate_json(meta).args if meta is not None else None
            claims.append(
                Claim(
                    run_id=run_id, queue=queue, workflow=workflow, claim_id=claim_id,
                    args=args if isinstance(args, dict) else {}, deadline_s=deadline, attempts=attempts,
                    takeover=takeover, lapsed=lapsed or 0,
                    lapsed_by=[str(w) for w in json.loads(by) if w is not None] if by is not None else [],
                )
            )
            self._claimed[run_id] = claim_id
            self._carried.pop(run_id, None)  # claimed again: what a claim carried for an earlier one is over
        self._carried_by_claim(carrying, answers)
        for run_id, rows in taken.items():
            self._took_at_claim(run_id, owner, rows)
        return claims

    async def finish(self, claim: Claim, state: FinishState, error: str | None = None) -> bool:
        if self._reported_by_carry(claim):
            return True
        epoch = self._letting_go(claim)
        try:
            ((done,),) = await self._fetch("finish", (claim.run_id, claim.claim_id, state, error, epoch))
        except BaseException:
            self._held_again(claim, epoch)
            raise
        return bool(done)

    async def requeue(self, lease: Lease) -> bool:
        ((outcome, *lease_row),) = await self._fetch(
            "requeue", (lease.run_id, *self._fence_args(lease))
        )
        if outcome == "fence":
            self._reject(lease.run_id, lease, tuple(lease_row), "re-queue")
        return bool(outcome == "ok")

    async def queue_entry(self, run_id: str) -> QueueEntry | None:
        rows = await self._fetch("queue_get", (run_id,))
        if not rows:
            return None
        names = ("run_id", "queue", "workflow", "priority", "state", "enqueued_at", "claim_id", "claimed_by",
                 "attempts", "error", "waiting")
        return QueueEntry.model_validate(dict(zip(names, rows[0], strict=True)))

    async def subscribe(self, topics: Sequence[str]) -> Subscription:
        if self._listener is None:
            self._listener = Listener(self.conninfo, self.channel)
        return await self._listener.subscribe(topics)

    async def _close_listener(self) -> None:
        if self._listener is not None:
            await self._listener.close()
            self._listener = None
