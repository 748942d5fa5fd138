"""Retention: delete a run with every row it owns, sweep old runs, count and compact the store (docs/retention.md).

A run owns its journal, meta, effect ledger, lease, queue and budget rows, its blobs (`<run_id>/...`) and its
child runs (runs whose meta names it as `parent_run_id` and that are not forks). A fork is a run of its own: it
stays whole when its source goes (the checkpoint blobs its copied entries vouch for are kept for it), unless
`with_forks`. Runs that may still move (running, queued, suspended) are refused unless forced; a sweep never
removes them and says so.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence

from pydantic import BaseModel, Field

from tether.contracts.entries import RunMeta
from tether.contracts.errors import ConfigError, RunActiveError, RunNotFoundError
from tether.contracts.protocols import JournalStore
from tether.contracts.retention import ACTIVE_STATUSES, CompactResult, RetentionStore, StoreStats
from tether.journal.blobs import vouched_blob_keys
from tether.journal.lineage import lineage_of

ALL_RUNS = 1 << 62
"""The `list_runs` limit that lists every run."""
SWEEP_BATCH = 500
"""Runs deleted per transaction by a sweep."""


class DeleteReport(BaseModel):
    """What `engine.delete` removed: the runs, the rows by table, and what it left for the forks kept."""

    run_id: str
    deleted: list[str]
    """Every run removed: the run, its child runs and (with forks) its forks, theirs too."""
    forks_kept: list[str] = Field(default_factory=list)
    """Forks of a deleted run left whole (`with_forks` deletes them too)."""
    kept_blobs: list[str] = Field(default_factory=list)
    """Blobs of a deleted run kept because a fork left whole vouches for them (its copied agent terminals)."""
    rows: dict[str, int] = Field(default_factory=dict)


class SkippedRun(BaseModel):
    run_id: str
    status: str
    reason: str


class SweepReport(BaseModel):
    """What `tether sweep` removed (or, in a dry run, would remove) and what it left, with why."""

    before: float
    statuses: list[str] | None
    dry_run: bool
    deleted: list[str] = Field(default_factory=list)
    skipped: list[SkippedRun] = Field(default_factory=list)
    kept_blobs: list[str] = Field(default_factory=list)
    rows: dict[str, int] = Field(default_factory=dict)


def retention_store(store: JournalStore) -> RetentionStore:
    if not isinstance(store, RetentionStore):
        raise ConfigError(f"the store {type(store).__name__} cannot delete, count or compact runs (it does not "
                          f"implement tether's RetentionStore); use a store tether ships (sqlite, postgresql, jsonl)")
    return store


class _Runs:
    """Every run's meta, with who forked or owns whom (a fork is told apart from a child run by its lineage)."""

    def __init__(self, store: JournalStore, metas: Sequence[RunMeta]) -> None:
        self.store, self.meta = store, {m.run_id: m for m in metas}
        self.under: dict[str, list[str]] = {}
        for m in metas:
            if m.parent_run_id is not None and m.parent_run_id != m.run_id:
                self.under.setdefault(m.parent_run_id, []).append(m.run_id)
        self._forks: dict[str, bool] = {}

    async def is_fork(self, run_id: str) -> bool:
        if run_id not in self._forks:
            extra = self.meta[run_id].model_extra or {}
            self._forks[run_id] = "fork_at" in extra or lineage_of((await self.store.load(run_id))[:1]) is not None
        return self._forks[run_id]

    async def tree(self, run_id: str, with_forks: bool) -> tuple[list[str], list[str]]:
        """`run_id` with the runs it owns (and its forks, `with_forks`), parents first; and the forks left out."""
        out, kept, todo = [run_id], [], [run_id]
        while todo:
            for child in sorted(self.under.get(todo.pop(), [])):
                if child in out:
                    continue
                if with_forks or not await self.is_fork(child):
                    out.append(child)
                    todo.append(child)
                else:
                    kept.append(child)
        return out, kept

    async def kept_blobs(self, gone: Collection[str]) -> set[str]:
        """The blobs of runs `gone` that a run staying behind vouches for: forks copy their source's agent
        terminals, whose `checkpoint_ref` names the source's blobs (a fork of a fork, the first source's)."""
        keep: set[str] = set()
        for run_id, meta in self.meta.items():
            if run_id in gone or not self._descends(meta, gone):
                continue
            keep |= await vouched_blob_keys(await self.store.load(run_id), gone, self.store.get_blob)
        return keep

    def _descends(self, meta: RunMeta, gone: Collection[str]) -> bool:
        seen: set[str] = set()
        parent = meta.parent_run_id
        while parent is not None and parent not in seen:
            if parent in gone:
                return True
            seen.add(parent)
            up = self.meta.get(parent)
            parent = up.parent_run_id if up is not None else None
        return False


def _refuse(runs: _Runs, ids: Iterable[str], root: str) -> None:
    for run_id in ids:
        meta = runs.meta.get(run_id)
        if meta is not None and meta.status in ACTIVE_STATUSES:
            whose = "it" if run_id == root else f"its run {run_id!r}"
            raise RunActiveError(
                f"run {root!r} was not deleted: {whose} is {meta.status} and may still "
                f"{'resume' if meta.status == 'suspended' else 'move'}. Let it settle (or tether cancel it), "
                f"or delete it anyway with --force (force=True).", run_id=run_id, status=meta.status)


async def delete(store: JournalStore, run_id: str, *, force: bool = False, with_forks: bool = False) -> DeleteReport:
    """`Engine.delete`: the run and every row and child run it owns, in one transaction (SQLite, PostgreSQL)."""
    target = retention_store(store)
    runs = _Runs(store, await store.list_runs(limit=ALL_RUNS))
    if run_id not in runs.meta:
        if not await store.load(run_id):
            raise RunNotFoundError(f"no run {run_id!r} in this store to delete; check the run id (tether runs lists "
                                   f"them) and the store URL", run_id=run_id)
        runs.meta[run_id] = RunMeta(run_id=run_id, workflow="?", status="error", created_at=0, updated_at=0)
    ids, forks = await runs.tree(run_id, with_forks)
    if not force:
        _refuse(runs, ids, run_id)
    keep = await runs.kept_blobs(set(ids))
    rows = await target.delete_runs(ids, keep_blobs=keep)
    return DeleteReport(run_id=run_id, deleted=ids, forks_kept=forks, kept_blobs=sorted(keep), rows=rows)


async def sweep(store: JournalStore, *, before: float, statuses: Collection[str] | None = None,
                dry_run: bool = False) -> SweepReport:
    """Delete every settled run last updated before `before` (with the runs it owns), `statuses` only if given;
    runs that may still move are skipped and named. Forks stay unless swept on their own dates."""
    target = retention_store(store)
    runs = _Runs(store, await store.list_runs(limit=ALL_RUNS))
    report = SweepReport(before=before, statuses=sorted(statuses) if statuses is not None else None, dry_run=dry_run)
    gone: dict[str, None] = {}  # ordered, and quick to look up
    for meta in sorted(runs.meta.values(), key=lambda m: (m.created_at, m.run_id)):
        if meta.updated_at >= before or (statuses is not None and meta.status not in statuses) or meta.run_id in gone:
            continue
        if meta.parent_run_id in runs.meta and not await runs.is_fork(meta.run_id):
            continue  # a child run goes with its parent
        ids, _ = await runs.tree(meta.run_id, with_forks=False)
        active = [runs.meta[r] for r in ids if r in runs.meta and runs.meta[r].status in ACTIVE_STATUSES]
        if active:
            why = (f"{active[0].status}: it may still {'resume' if active[0].status == 'suspended' else 'move'}"
                   + ("" if active[0].run_id == meta.run_id else f" (its run {active[0].run_id})")
                   + f"; tether delete {meta.run_id} --force removes it")
            report.skipped.append(SkippedRun(run_id=meta.run_id, status=meta.status, reason=why))
            continue
        gone.update(dict.fromkeys(ids))
    report.deleted = list(gone)
    if dry_run or not gone:
        return report
    keep = await runs.kept_blobs(set(gone))
    report.kept_blobs = sorted(keep)
    for i in range(0, len(gone), SWEEP_BATCH):
        for table, n in (await target.delete_runs(report.deleted[i:i + SWEEP_BATCH], keep_blobs=keep)).items():
            report.rows[table] = report.rows.get(table, 0) + n
    return report


async def store_stats(store: JournalStore, *, largest: int = 5) -> StoreStats:
    """What the store holds: runs, entries, bytes, the largest runs and the blobs (`tether store stats`)."""
    return await retention_store(store).store_stats(largest=largest)


async def compact(store: JournalStore) -> CompactResult:
    """Give the store's free space back (VACUUM on SQLite and PostgreSQL; nothing to do on JSONL)."""
    return await retention_store(store).compact()
