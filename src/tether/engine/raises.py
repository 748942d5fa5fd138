"""An operator's raise of a run's USD ceiling outside a segment (`engine.raise_budget`, the API, `tether resolve`
of a `budget` suspension): journaled now, honoured by the next segment in whatever process drives it."""

from __future__ import annotations

from tether.contracts.entries import Lease
from tether.contracts.errors import BudgetExhaustedError
from tether.contracts.money import usd as usd_text
from tether.contracts.protocols import JournalStore
from tether.contracts.stops import StopReason
from tether.engine import queue as run_queue
from tether.engine.options import SegmentOptions, durable_options, genesis_of
from tether.engine.runner import raise_entries
from tether.engine.sessions import turn_raise_room
from tether.engine.turns import turn_of
from tether.journal.chain import chained
from tether.journal.cost import CostReport, fold_cost
from tether.journal.matching import JournalIndex


async def raise_ceiling(
    store: JournalStore, run_id: str, usd: float, reason: str, *, by: str | None, now: float, lease: Lease | None,
) -> CostReport:
    """Journal `budget-raised` (and the resolutions of the run's open budget suspensions) after the run's head, put
    the new ceiling in its meta, and return the cost report as it now stands. A suspended queued run goes back
    to its queue first, so a worker continues it."""
    entries = await store.load(run_id)
    turn = turn_of(entries)
    room = await turn_raise_room(store, run_id, turn) if turn is not None else None
    if turn is not None and room is not None and usd > room + 1e-12:
        raise BudgetExhaustedError(
            f"run {run_id!r} is turn {turn['turn']} of session {turn['session']!r}, whose ceiling leaves "
            f"{usd_text(room)} USD for it after its other turns; {usd_text(usd)} would pass the session's ceiling. "
            f"Raise the session first (tether session raise {turn['session']} USD), then this turn.",
            reason=StopReason.SESSION_CEILING, run_id=run_id, session=turn["session"], room_usd=room)
    index = JournalIndex.build(entries)
    genesis = genesis_of(entries)
    ceiling = durable_options(run_id, SegmentOptions(), genesis, index.decision_entries).ceiling
    new = raise_entries(now, run_id, genesis, ceiling, usd, reason, index, by)
    if len(new) > 1:
        await run_queue.requeue_before_close(store, lease)
    written = list(entries)
    for entry in new:
        entry.seq = (written[-1].seq or 0) + 1 if written else 1
        written.append(chained(written, entry))
    await store.append_many(run_id, new, lease)
    meta = await store.get_meta(run_id)
    if meta is not None:
        await store.put_meta(meta.model_copy(update={"budget_usd": usd, "updated_at": now}), lease)
    return fold_cost(written)
