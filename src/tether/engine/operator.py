"""What an operator does to a run from outside its segment: cancel it, close a suspension (resolve or abandon),
settle the calls a crash cut off. `Engine.cancel`, `resolve_external`, `abandon` and `settle_orphans` delegate here.

Each one writes under the run's lease when the store has leases, so a live driver and an operator never
append to one journal at once.
"""

from __future__ import annotations

import contextlib
from typing import Any, Literal

from tether.contracts import money
from tether.contracts.entries import JournalEntry, Lease
from tether.contracts.errors import ConfigError, JournalSealedError, LeaseHeldError, RunNotFoundError
from tether.contracts.protocols import JournalStore, LeasableStore
from tether.engine import queue as run_queue
from tether.engine.budget_suspension import budget_need, raise_of
from tether.engine.lease import LeaseKeeper, request_cancel
from tether.engine.raises import raise_ceiling
from tether.engine.runner import operator_decision
from tether.engine.seam import EngineSeam
from tether.engine.suspensions import pending_keys, suspension_key
from tether.journal.chain import chained
from tether.journal.cost import ORPHANS_SETTLED, CostReport, fold_cost
from tether.journal.keys import SETTLE_KEY
from tether.journal.matching import JournalIndex

CLOSE_PATIENCE_S = 5.0
"""How long `resolve_external` / `abandon` wait for the lease of a run whose driver is letting it go."""
CancelResult = Literal["cancelled", "requested"]
"""`engine.cancel`: settled `cancelled` now, or a request the driving process honours at its next renewal."""


async def cancel(engine: EngineSeam, run_id: str, reason: str) -> CancelResult:
    """`Engine.cancel`: settle a run nothing drives, or request the cancel of one another process drives."""
    store = await engine.store()
    await engine.inspect(run_id)  # an unknown run is refused before any lease is taken for it
    if not isinstance(store, LeasableStore):
        return await _settle_cancelled(engine, store, run_id, reason, None)
    try:
        async with LeaseKeeper(store, run_id, engine.limits.lease_ttl_s) as lease:
            return await _settle_cancelled(engine, store, run_id, reason, lease)
    except LeaseHeldError:
        await request_cancel(store, run_id, reason, engine.clock())
        return "requested"


async def _settle_cancelled(
    engine: EngineSeam, store: JournalStore, run_id: str, reason: str, lease: Lease | None
) -> CancelResult:
    entries = await engine.inspect(run_id)
    index = JournalIndex.build(entries)
    last = index.last_settle()
    status = last.value.get("status") if last is not None and isinstance(last.value, dict) else None
    if status == "cancelled":
        return "cancelled"
    if status in ("ok", "error", "exhausted"):
        raise JournalSealedError(
            f"run {run_id!r} already finished {status}; there is nothing to cancel", run_id=run_id, status=status
        )
    pending = pending_keys(index)
    await store.append(run_id, chained(entries, JournalEntry(
        seq=len(entries) + 1, kind="decision", key=SETTLE_KEY, ordinal=index.next_ordinal("", SETTLE_KEY),
        label="settle", started_at=engine.clock(),
        value={"decision": "settle", "status": "cancelled", "value": None,
               "error": {"type": "Cancelled", "message": reason}, "pending": pending},
    )), lease)
    meta = await store.get_meta(run_id)
    if meta is not None:
        await store.put_meta(meta.model_copy(update={"status": "cancelled", "updated_at": engine.clock()}), lease)
    return "cancelled"


def _keeper(store: JournalStore, run_id: str, ttl_s: float) -> LeaseKeeper | None:
    # A run that just settled may still be handing its lease back (a worker releases it with its next
    # claim): wait a few seconds for it rather than refusing at once.
    return (LeaseKeeper(store, run_id, ttl_s, patience_s=CLOSE_PATIENCE_S)
            if isinstance(store, LeasableStore) else None)


async def resolve(engine: EngineSeam, run_id: str, key: str, value: Any) -> bool:
    """Resolve a suspension; a `budget` one is resolved by a raise (its value is the new USD ceiling)."""
    target = find_target(JournalIndex.build(await engine.inspect(run_id)), key)
    need = budget_need(target) if target is not None else None
    if need is not None:
        usd, reason = raise_of(value, need, run_id)
        await raise_budget(engine, run_id, usd, reason, None)
        return True
    return await close(engine, run_id, "resolution", key, value)


async def raise_budget(engine: EngineSeam, run_id: str, usd: float, reason: str, by: str | None) -> CostReport:
    """Raise `run_id`'s USD ceiling to `usd` between segments, without driving it: a `budget-raised` decision
    (who, when, why, the old and the new ceiling; never lowered), which also resolves the run's open `budget`
    suspension. The next segment, in any process, runs under it and continues the agents the ceiling stopped from
    their checkpoints (docs/budgets.md). Returns the cost report as it now stands."""
    if isinstance(usd, bool) or not isinstance(usd, int | float) or not usd > 0:
        raise ConfigError(f"usd must be the new USD ceiling (> 0), got {usd!r}")
    await engine.inspect(run_id)  # an unknown run is refused before any lease is taken for it
    store = await engine.store()
    keeper = _keeper(store, run_id, engine.limits.lease_ttl_s)
    async with keeper if keeper is not None else contextlib.nullcontext():
        return await raise_ceiling(store, run_id, float(usd), reason, by=by, now=engine.clock(),
                                   lease=keeper.lease if keeper is not None else None)


async def close(
    engine: EngineSeam, run_id: str, kind: Literal["resolution", "abandon"], target_ref: str | int, value: Any
) -> bool:
    """Journal a resolution or an abandon of `target_ref` (a suspension key, or an entry's seq); False when the
    suspension was already closed (the first valid closer won)."""
    store = await engine.store()
    keeper = _keeper(store, run_id, engine.limits.lease_ttl_s)
    async with keeper if keeper is not None else contextlib.nullcontext():
        entries = await store.load(run_id)  # read under the lease: this is the head we append after
        if not entries:
            raise RunNotFoundError(f"no run {run_id!r} in this store; check the run id and the store URL",
                                   run_id=run_id)
        index = JournalIndex.build(entries)
        target = find_target(index, target_ref)
        if target is None:
            if kind == "resolution" and any(suspension_key(e) == target_ref for e in index.suspensions()):
                return False  # already closed: the first valid closer won
            if isinstance(target_ref, int) and target_ref in index.by_seq and kind == "abandon":
                target = index.by_seq[target_ref]
            else:
                raise ConfigError(f"run {run_id!r} has no open suspension or entry {target_ref!r}")
        if kind == "resolution" and target.kind not in ("external", "approval"):
            raise JournalSealedError(f"seq {target.seq} is a {target.kind} entry, not a suspension")
        if kind == "resolution":  # against the schema stored in the entry: nothing is written if invalid
            from tether.engine.external import check_resolution

            value = check_resolution(target, value, None, run_id=run_id)
        await run_queue.requeue_before_close(store, keeper.lease if keeper is not None else None)
        closer = chained(entries, JournalEntry(
            seq=len(entries) + 1, kind=kind, ref=target.seq, scope=target.scope, key=target.key, value=value,
            started_at=engine.clock(),
        ))
        await store.append(run_id, closer, keeper.lease if keeper is not None else None)
    return True


async def settle_orphans(engine: EngineSeam, run_id: str, usd: float, reason: str, by: str | None) -> CostReport:
    """`Engine.settle_orphans`: journal what the provider billed for the calls a crash cut off."""
    if isinstance(usd, bool) or not isinstance(usd, int | float) or usd < 0:
        raise ConfigError(f"usd must be the USD the provider billed for the cut calls (>= 0), got {usd!r}")
    store = await engine.store()
    keeper = _keeper(store, run_id, engine.limits.lease_ttl_s)
    async with keeper if keeper is not None else contextlib.nullcontext():
        entries = await engine.inspect(run_id)
        before = fold_cost(entries)
        if before.orphaned_calls == 0:
            raise ConfigError(
                f"run {run_id!r} has no calls a crash cut off (orphaned_usd is {money.usd(before.orphaned_usd)}); "
                f"there is nothing to settle. `tether cost {run_id}` shows its figures.",
                run_id=run_id,
            )
        decision = operator_decision(engine.clock(), ORPHANS_SETTLED, usd=float(usd), old_usd=before.orphaned_usd,
                                     calls=before.orphaned_calls, reason=reason)
        if by is not None:
            decision.value["by"] = by
        decision.seq = max((e.seq or 0 for e in entries), default=0) + 1
        chained(entries, decision)
        await store.append(run_id, decision, keeper.lease if keeper is not None else None)
    return fold_cost([*entries, decision])


def find_target(index: JournalIndex, ref: str | int) -> JournalEntry | None:
    """The open suspension `ref` names (by key), or the entry (by seq) that is not a closed suspension."""
    if isinstance(ref, int) or (isinstance(ref, str) and ref.isdigit()):
        e = index.by_seq.get(int(ref))
        if e is not None and (e.kind not in ("external", "approval") or e.seq not in index.closer_of):
            return e
        return None
    for e in index.open_suspensions():
        if suspension_key(e) == ref:
            return e
    return None
