"""What a store reports about itself and the operations retention asks of it (docs/retention.md).

A store that implements `RetentionStore` deletes several runs in one call (one transaction where it has them),
counts what it holds, and compacts itself. Every store shipped with tether implements it.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any, Protocol, runtime_checkable

from pydantic import BaseModel, Field

ACTIVE_STATUSES = frozenset({"running", "queued", "suspended"})
"""Statuses of runs that may still move or resume: retention leaves them alone unless forced."""


class RunSize(BaseModel):
    """One run's share of a store: its journal entries and the bytes of its rows (entries, meta, effects)."""

    run_id: str
    entries: int
    bytes: int


class StoreStats(BaseModel):
    """What a store holds (`tether store stats`): runs, journal entries, bytes, the largest runs and blobs."""

    store: str
    """The backend (`sqlite`, `postgresql`, `jsonl`, `memory`)."""
    runs: int
    entries: int
    bytes: int
    """Bytes of stored records: journal entries, metas, effect rows and blobs (not the backend's overhead)."""
    blobs: int
    blob_bytes: int
    effects: int = 0
    largest: list[RunSize] = Field(default_factory=list)
    """The runs with the most bytes, largest first."""
    on_disk_bytes: int | None = None
    """What the backend takes on disk (the file, the tables with their indexes, the directory); None in memory."""
    reclaimable_bytes: int | None = None
    """Free space `tether store compact` may give back (SQLite's free pages); None when the backend cannot say."""


class CompactResult(BaseModel):
    """What `tether store compact` did: the backend's step, and its size before and after (None: unknown)."""

    store: str
    action: str
    """What ran (`VACUUM`, `VACUUM ANALYZE`), or `nothing to do` and why."""
    before_bytes: int | None = None
    after_bytes: int | None = None


@runtime_checkable
class RetentionStore(Protocol):
    """A store retention can delete runs from, count and compact."""

    async def delete_runs(self, run_ids: Sequence[str], *, keep_blobs: Collection[str] = ()) -> dict[str, int]:
        """Delete every row of `run_ids` (journal, meta, effects, lease, queue and budget rows, and every blob under
        `<run_id>/` but those in `keep_blobs`) at once: one transaction where the backend has them. Lease epochs
        stay (a later acquire must still get a higher one). Returns the rows deleted, by table."""
        ...

    async def store_stats(self, *, largest: int = 5) -> StoreStats: ...

    async def compact(self) -> CompactResult: ...


class RunRewrite(BaseModel):
    """What archive or redact writes back for one run, at once: entries re-stored by seq (their payloads removed,
    their chain forms untouched), blobs replaced, the meta and the effect rows rewritten, and the decision entries
    appended after the journal's end."""

    run_id: str
    entries: dict[int, str] = Field(default_factory=dict)
    """Stored texts by seq (`tether.stores.codec.entry_json`)."""
    blobs: dict[str, bytes] = Field(default_factory=dict)
    meta_json: str | None = None
    """The run's meta as JSON (None: left as it is)."""
    effects: list[dict[str, Any]] | None = None
    """Every effect row of the run, in order (None: left as they are)."""
    append: list[tuple[int, str]] = Field(default_factory=list)
    """(seq, stored text) rows that continue the journal right after its last entry."""


@runtime_checkable
class RewritingStore(Protocol):
    """A store archive and redact can rewrite a run's payloads in (one transaction where it has them), leaving no
    copy of the old bytes it can reach (SQLite: secure_delete and a truncated WAL)."""

    async def rewrite_run(self, rewrite: RunRewrite) -> None: ...
