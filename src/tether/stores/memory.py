"""`MemoryStore`: a journal store that lives and dies with this process (tests, demos)."""

from __future__ import annotations

import dataclasses
import json
import logging
import time
import warnings
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

from tether.contracts.entries import JournalEntry, Lease, LeaseOwner, RunMeta
from tether.contracts.retention import CompactResult, RunRewrite, RunSize, StoreStats
from tether.contracts.sessions import DEFAULT_NOTE_CAP, Note, SessionRecord, TurnRecord, evicted
from tether.journal.blobs import blob_owner
from tether.stores.codec import check_rows, decode_meta, decode_rows, effect_json, number_entries
from tether.stores.leases import (
    check_acquire,
    check_fence,
    new_lease,
    releases,
    renewed,
)
from tether.stores.run_ids import check_run_id


class MemoryStore:
    """Every store feature, in dicts; entries are kept as JSON text so callers cannot alias them."""

    def __init__(self, *, clock: Callable[[], float] = time.time) -> None:
        message = (
            "tether MemoryStore: journals live in this process only, so a run cannot be resumed "
            "after a crash or from another process. Use store='sqlite:///.tether/tether.db' "
            "(the default) for durable runs."
        )
        warnings.warn(message, UserWarning, stacklevel=2)
        logging.getLogger("tether").warning(message)  # warnings reach the tether logger, not only stderr
        self._clock = clock
        self._entries: dict[str, list[str]] = {}
        self._meta: dict[str, RunMeta] = {}
        self._blobs: dict[str, bytes] = {}
        self._effects: dict[str, list[str]] = {}
        self._leases: dict[str, Lease] = {}
        self._epochs: dict[str, int] = {}
        self._sessions: dict[str, SessionRecord] = {}
        self._turns: dict[str, list[TurnRecord]] = {}
        self._notes: dict[str, dict[str, Note]] = {}

    async def append(self, run_id: str, entry: JournalEntry, lease: Lease | None = None) -> int:
        return (await self.append_many(run_id, [entry], lease))[0]

    async def append_many(
        self, run_id: str, entries: list[JournalEntry], lease: Lease | None = None
    ) -> list[int]:
        check_run_id(run_id)
        self._fenced(run_id, lease)
        if not entries:
            return []
        log = self._entries.setdefault(run_id, [])
        rows = number_entries(run_id, len(log), entries)
        log.extend(text for _, text in rows)
        return [seq for seq, _ in rows]

    async def append_rows(
        self, run_id: str, rows: list[tuple[int, str]], lease: Lease | None = None
    ) -> list[int]:
        """Append rows already encoded by `codec.encode_entry` (the segment's group commits)."""
        return self.append_rows_now(run_id, rows, lease)

    def append_rows_now(self, run_id: str, rows: list[tuple[int, str]], lease: Lease | None = None) -> list[int]:
        """`append_rows` in the calling thread: it never waits, so a segment may commit without a task."""
        check_run_id(run_id)
        self._fenced(run_id, lease)
        log = self._entries.setdefault(run_id, [])
        check_rows(run_id, len(log), rows)
        log.extend(text for _, text in rows)
        return [seq for seq, _ in rows]

    def _fenced(self, run_id: str, lease: Lease | None) -> None:
        if lease is not None:
            check_fence(run_id, lease, self._leases.get(run_id), self._clock())

    async def load(self, run_id: str) -> list[JournalEntry]:
        rows = list(enumerate(self._entries.get(run_id, []), start=1))
        return decode_rows(run_id, rows, "the memory store")

    async def put_meta(self, meta: RunMeta, lease: Lease | None = None) -> None:
        check_run_id(meta.run_id)
        self._fenced(meta.run_id, lease)
        self._meta[meta.run_id] = meta.model_copy(deep=True)

    async def get_meta(self, run_id: str) -> RunMeta | None:
        meta = self._meta.get(run_id)
        return None if meta is None else meta.model_copy(deep=True)

    async def list_runs(self, *, limit: int = 100) -> list[RunMeta]:
        metas = sorted(self._meta.values(), key=lambda m: (-m.created_at, m.run_id))
        return [m.model_copy(deep=True) for m in metas[:limit]]

    async def delete(self, run_id: str) -> None:
        for table in (self._entries, self._meta, self._effects, self._leases):
            table.pop(run_id, None)

    async def delete_runs(self, run_ids: Sequence[str], *, keep_blobs: Collection[str] = ()) -> dict[str, int]:
        """`RetentionStore.delete_runs`: every row of `run_ids` (their epochs stay)."""
        ids, keep = set(run_ids), set(keep_blobs)
        counts = {"entries": sum(len(self._entries.get(r, [])) for r in ids),
                  "meta": sum(r in self._meta for r in ids), "effects": sum(len(self._effects.get(r, [])) for r in ids),
                  "leases": sum(r in self._leases for r in ids)}
        for r in ids:
            for table in (self._entries, self._meta, self._effects, self._leases):
                table.pop(r, None)
        gone = [k for k in self._blobs if blob_owner(k) in ids and k not in keep]
        for k in gone:
            del self._blobs[k]
        return {**counts, "blobs": len(gone)}

    async def rewrite_run(self, rewrite: RunRewrite) -> None:
        """`RewritingStore.rewrite_run`: every change at once (nothing else runs between them)."""
        run_id = rewrite.run_id
        log = self._entries.setdefault(run_id, [])
        check_rows(run_id, len(log), rewrite.append)
        for seq, text in rewrite.entries.items():
            log[seq - 1] = text
        log.extend(text for _, text in rewrite.append)
        self._blobs.update(rewrite.blobs)
        if rewrite.meta_json is not None:
            self._meta[run_id] = decode_meta(rewrite.meta_json)
        if rewrite.effects is not None:
            self._effects[run_id] = [effect_json(run_id, row) for row in rewrite.effects]

    async def store_stats(self, *, largest: int = 5) -> StoreStats:
        sizes = [RunSize(run_id=r, entries=len(self._entries.get(r, [])),
                         bytes=sum(len(t.encode()) for t in [*self._entries.get(r, []), *self._effects.get(r, [])])
                         + (len(m.model_dump_json()) if (m := self._meta.get(r)) is not None else 0))
                 for r in set(self._entries) | set(self._meta)]
        blob_bytes = sum(len(b) for b in self._blobs.values())
        return StoreStats(store="memory", runs=len(sizes), entries=sum(s.entries for s in sizes),
                          bytes=sum(s.bytes for s in sizes) + blob_bytes, blobs=len(self._blobs), blob_bytes=blob_bytes,
                          effects=sum(len(v) for v in self._effects.values()),
                          largest=sorted(sizes, key=lambda s: (-s.bytes, s.run_id))[:largest])

    async def compact(self) -> CompactResult:
        return CompactResult(store="memory", action="nothing to do: a memory store frees a deleted run's rows at once")

    async def put_blob(self, key: str, data: bytes, lease: Lease | None = None) -> None:
        if lease is not None:
            self._fenced(lease.run_id, lease)
        self._blobs[key] = bytes(data)

    async def get_blob(self, key: str) -> bytes | None:
        return self._blobs.get(key)

    async def append_effect(self, run_id: str, row: Mapping[str, Any]) -> None:
        check_run_id(run_id)
        self._effects.setdefault(run_id, []).append(effect_json(run_id, row))

    async def load_effects(self, run_id: str) -> list[dict[str, Any]]:
        return [json.loads(t) for t in self._effects.get(run_id, [])]

    async def acquire(self, run_id: str, owner: LeaseOwner, ttl_s: float) -> Lease:
        check_run_id(run_id)
        now = self._clock()
        check_acquire(run_id, self._leases.get(run_id), owner, ttl_s, now)
        lease = new_lease(run_id, owner, self._epochs.get(run_id, 0), ttl_s, now)
        self._epochs[run_id] = lease.epoch
        self._leases[run_id] = lease
        return lease

    async def renew(self, lease: Lease) -> Lease:
        fresh = renewed(lease, self._leases.get(lease.run_id), self._clock())
        self._leases[lease.run_id] = fresh
        return fresh

    async def release(self, lease: Lease) -> None:
        if releases(lease, self._leases.get(lease.run_id)):
            del self._leases[lease.run_id]

    # -- sessions and notes (`SessionStore`) ---------------------------------------------------------
    async def session_create(self, session: SessionRecord) -> SessionRecord:
        return self._sessions.setdefault(session.session_id, session)

    async def session_get(self, session_id: str) -> SessionRecord | None:
        return self._sessions.get(session_id)

    async def session_list(self, limit: int = 100) -> list[SessionRecord]:
        return sorted(self._sessions.values(), key=lambda s: (-s.created_at, s.session_id))[:limit]

    async def session_swap(self, session: SessionRecord, expected_version: int, turn: TurnRecord | None = None) -> bool:
        held = self._sessions.get(session.session_id)
        if held is None or held.version != expected_version:
            return False
        self._sessions[session.session_id] = dataclasses.replace(session, version=expected_version + 1)
        if turn is not None:
            self._turns.setdefault(session.session_id, []).append(turn)
        return True

    async def session_turns(self, session_id: str) -> list[TurnRecord]:
        return sorted(self._turns.get(session_id, []), key=lambda t: t.index)

    async def note_put(self, note: Note, cap: int = DEFAULT_NOTE_CAP) -> list[str]:
        notes = self._notes.setdefault(note.workspace, {})
        notes[note.key] = note
        gone = [n.key for n in evicted(list(notes.values()), cap)]
        for key in gone:
            del notes[key]
        return gone

    async def note_list(self, workspace: str) -> list[Note]:
        return sorted(self._notes.get(workspace, {}).values(), key=lambda n: (n.written_at, n.key))

    async def note_delete(self, workspace: str, key: str) -> bool:
        return self._notes.get(workspace, {}).pop(key, None) is not None

    async def close(self) -> None:
        return None
