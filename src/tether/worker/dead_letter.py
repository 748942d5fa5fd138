"""Dead-lettering: a run whose workers keep dying is settled `error`, listed `dead`, and never claimed again.

The store counts the claims of a run that lapsed in a row (their workers died, or lost the store,
before reporting; `Claim.lapsed`). A worker that claims a run after `max_attempts` such claims does
not drive it, so whatever kills workers cannot kill another one: under the run's lease it journals a
settle `error` naming the attempts and what to do, reports the claim `dead`, then lists the run `dead`
(in that order, so whoever sees the run dead can enqueue it again at once).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tether.contracts.entries import SETTLED_STATUSES, JournalEntry, RunMeta
from tether.contracts.errors import ConfigError
from tether.contracts.protocols import LeasableStore, QueueStore
from tether.contracts.queue import Claim, FinishState
from tether.engine.lease import LeaseKeeper
from tether.engine.suspensions import suspension_key
from tether.journal.chain import chained
from tether.journal.keys import SETTLE_KEY
from tether.journal.matching import JournalIndex

if TYPE_CHECKING:
    from tether.engine.engine import Engine


def dead_letter_reason(claim: Claim, max_attempts: int) -> str:
    """What the settle says: how many attempts, held by whom, and what to do now."""
    by = f" (workers {', '.join(claim.lapsed_by)})" if claim.lapsed_by else ""
    return (
        f"dead-lettered: {claim.lapsed} attempts in a row to drive run '{claim.run_id}' ended with their worker "
        f"dying (or losing the store) before the run settled{by}; the cap is {max_attempts} (tether worker "
        f"--max-attempts), so it is settled error and no worker claims it again. Fix what kills the worker (its "
        f"log and the system log say how it ended: a crash in native code, an out-of-memory kill, an exit from "
        f"the workflow), then run `tether resume {claim.run_id} --app MODULE:ENGINE` to drive it from its journal, "
        f"or enqueue it again to hand it back to the workers."
    )


async def dead_letter(engine: Engine, store: QueueStore, claim: Claim, max_attempts: int) -> FinishState | None:
    """Settle `claim`'s run `error`, report its claim `dead` and list it `dead`; None once done.

    A run whose journal already ends with a settle (it settled, and only its worker's report was lost)
    is left as it is: the state to report its claim in is returned.
    """
    if not isinstance(store, LeasableStore):
        raise ConfigError(f"dead-lettering run {claim.run_id!r} needs a store with leases; use PostgreSQL")
    run_id, now = claim.run_id, engine.clock()
    async with LeaseKeeper(store, run_id, engine.limits.lease_ttl_s) as lease:
        entries = await store.load(run_id)
        index = JournalIndex.build(entries)
        last = index.last_settle()
        meta = await store.get_meta(run_id)
        if last is not None and last.seq == entries[-1].seq and isinstance(last.value, dict):
            status = str(last.value.get("status"))
            if meta is not None and meta.status != status and status in SETTLED_STATUSES:
                await store.put_meta(meta.model_copy(update={"status": status, "updated_at": now}), lease)
            return "suspended" if status == "suspended" else "done"
        reason = dead_letter_reason(claim, max_attempts)
        error: dict[str, Any] = {
            "type": "DeadLetter", "code": "dead-letter", "message": reason, "attempts": claim.lapsed,
            "workers": claim.lapsed_by,
        }
        pending = [k for k in (suspension_key(e) for e in index.open_suspensions()) if k]
        await store.append(run_id, chained(entries, JournalEntry(
            seq=len(entries) + 1, kind="decision", key=SETTLE_KEY, ordinal=index.next_ordinal("", SETTLE_KEY),
            label="settle", started_at=now,
            value={"decision": "settle", "status": "error", "value": None, "error": error, "pending": pending},
        )), lease)
        await store.finish(claim, "dead", reason)
        if meta is None:
            meta = RunMeta(run_id=run_id, workflow=claim.workflow, created_at=now, updated_at=now)
        await store.put_meta(meta.model_copy(update={"status": "dead", "updated_at": now}), lease)
    return None
