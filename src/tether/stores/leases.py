"""Fencing shared by every store: who may append (lease liveness, epochs) and what (the next seq).

Invariant 13 rejects stale writers by seq *and* by lease epoch; both checks, and the one codec for
stored entries, live here so every backend applies the same rules inside its own transaction.
"""

from __future__ import annotations

import json
import math
import os
import socket
import time
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import ValidationError
from pydantic_core import PydanticSerializationError

from tether.contracts.entries import JournalEntry, Lease, LeaseOwner
from tether.contracts.errors import (
    ConfigError,
    JournalCorruptError,
    JournalOrderViolation,
    LeaseHeldError,
    NonSerializableValueError,
)


def local_host() -> str:
    """The host name leases record; a dead owner is provable only on the same host."""
    return socket.gethostname()


def _proc_stat(pid: int) -> tuple[str, float] | None:
    """(state, start time in clock ticks since boot) from /proc/<pid>/stat, or None off Linux."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    # comm (field 2) may hold spaces and parentheses: the fields after it start past the last ')'.
    rest = data[data.rindex(b")") + 2 :].split()
    return rest[0].decode(), float(rest[19])  # field 3 is the state, field 22 the start time


def process_start_time(pid: int) -> float | None:
    """Boot-relative start time of `pid` (ticks), which tells a live process from a reused pid."""
    stat = _proc_stat(pid)
    return None if stat is None else stat[1]


def current_owner(owner_id: str | None = None) -> LeaseOwner:
    """A `LeaseOwner` for this process; `owner_id` defaults to a fresh unique id per call."""
    host, pid = local_host(), os.getpid()
    return LeaseOwner(
        owner_id=owner_id or f"{host}:{pid}:{uuid.uuid4().hex[:12]}",
        host=host,
        pid=pid,
        started_at=process_start_time(pid) or 0.0,
    )


def owner_is_provably_dead(owner: LeaseOwner) -> bool:
    """True only when the owner ran on this host and its process is gone (or its pid was reused)."""
    if owner.host != local_host():
        return False
    if owner.pid <= 0:
        return True  # no process has such a pid (and os.kill(0, ...) would signal our own group)
    try:
        os.kill(owner.pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        pass  # it exists, under another user
    except OSError:
        return False
    stat = _proc_stat(owner.pid)
    if stat is None:
        return False
    state, started = stat
    return state == "Z" or (owner.started_at != 0.0 and started != owner.started_at)


def _when(expires_at: float, now: float) -> str:
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(expires_at))
    left = expires_at - now
    return f"{stamp} ({left:.1f} s from now)" if left >= 0 else f"{stamp} ({-left:.1f} s ago)"


def check_acquire(
    run_id: str, held: Lease | None, owner: LeaseOwner, ttl_s: float, now: float
) -> None:
    """Raise `LeaseHeldError` if another live owner holds an unexpired lease on `run_id`."""
    if not (math.isfinite(ttl_s) and ttl_s > 0):
        raise ConfigError(f"lease ttl_s must be a positive number of seconds, got {ttl_s!r}.")
    if held is None or held.owner.owner_id == owner.owner_id or now > held.expires_at:
        return
    if owner_is_provably_dead(held.owner):
        return
    h = held.owner
    raise LeaseHeldError(
        f"lease held: run '{run_id}' is driven by pid {h.pid} on host '{h.host}' (owner "
        f"'{h.owner_id}', epoch {held.epoch}) until {_when(held.expires_at, now)}. Wait for that "
        f"driver to finish or its lease to expire; a holder that dies on this host is taken over "
        f"at once.",
        run_id=run_id,
        holder=h.model_dump(),
        epoch=held.epoch,
        expires_at=held.expires_at,
    )


def new_lease(run_id: str, owner: LeaseOwner, prev_epoch: int, ttl_s: float, now: float) -> Lease:
    """The lease an acquire grants: the epoch after every one this run ever had."""
    return Lease(
        run_id=run_id, owner=owner, epoch=prev_epoch + 1, expires_at=now + ttl_s, ttl_s=ttl_s
    )


def _lost(run_id: str, lease: Lease, held: Lease | None, action: str) -> LeaseHeldError:
    if held is None:
        now_at = "has no lease (it was released, taken over and released, or the run was deleted)"
    else:
        h = held.owner
        now_at = f"is now at lease epoch {held.epoch}, held by pid {h.pid} on '{h.host}'"
    return LeaseHeldError(
        f"lease lost: run '{run_id}' {now_at}; this writer holds epoch {lease.epoch}, so the "
        f"{action} was rejected and nothing was written. Stop this segment; resume the run to "
        f"continue under a new lease.",
        run_id=run_id,
        epoch=lease.epoch,
        current_epoch=None if held is None else held.epoch,
    )


def check_fence(run_id: str, lease: Lease, held: Lease | None, now: float) -> None:
    """Raise `LeaseHeldError` unless `lease` is the run's current, unexpired lease."""
    if lease.run_id != run_id:
        raise LeaseHeldError(
            f"lease mismatch: a lease on run '{lease.run_id}' cannot fence appends to run "
            f"'{run_id}'; nothing was written. Acquire a lease on '{run_id}'.",
            run_id=run_id,
            lease_run_id=lease.run_id,
        )
    if held is None or held.epoch != lease.epoch or held.owner != lease.owner:
        raise _lost(run_id, lease, held, "append")
    if now > held.expires_at:
        raise LeaseHeldError(
            f"lease expired: run '{run_id}' epoch {lease.epoch} expired at "
            f"{_when(held.expires_at, now)}; the append was rejected and nothing was written. "
            f"Renew every ttl/3 (ttl {held.ttl_s:g} s), or renew now if no one else took over.",
            run_id=run_id,
            epoch=lease.epoch,
            expires_at=held.expires_at,
        )


def renewed(lease: Lease, held: Lease | None, now: float) -> Lease:
    """`lease` extended by its ttl, if it is still the run's current lease (expired or not)."""
    if held is None or held.epoch != lease.epoch or held.owner != lease.owner:
        raise _lost(lease.run_id, lease, held, "renew")
    return held.model_copy(update={"expires_at": now + held.ttl_s})


def releases(lease: Lease, held: Lease | None) -> bool:
    """Whether releasing `lease` clears `held` (a stale release is a silent no-op)."""
    return held is not None and held.epoch == lease.epoch


def entry_json(entry: JournalEntry, seq: int) -> str:
    """The stored text of an entry: its `to_json_dict()` with `seq` filled in, as compact JSON."""
    try:
        return entry.model_copy(update={"seq": seq}).model_dump_json(exclude_none=True)
    except (PydanticSerializationError, ValueError, TypeError) as exc:
        raise NonSerializableValueError(
            f"journal entry (kind {entry.kind!r}, key {entry.key!r}) is not JSON-serializable "
            f"({exc}); nothing was appended. Journal plain JSON data or pydantic models.",
            kind=entry.kind,
        ) from None


def number_entries(
    run_id: str, last_seq: int, entries: Sequence[JournalEntry]
) -> list[tuple[int, str]]:
    """(seq, json) rows for a batch after `last_seq`; one entry out of order fails the batch."""
    rows: list[tuple[int, str]] = []
    for i, entry in enumerate(entries):
        seq = last_seq + 1 + i
        if entry.seq is not None and entry.seq != seq:
            raise JournalOrderViolation(
                f"journal order: run '{run_id}' expects seq {seq} next but the entry carries seq "
                f"{entry.seq}; nothing from this batch was appended. Another writer appended "
                f"first: reload the journal, or leave seq unset so the store assigns it.",
                run_id=run_id,
                expected=seq,
                got=entry.seq,
            )
        if entry.ref is not None and not 0 < entry.ref < seq:
            raise JournalOrderViolation(
                f"journal order: the entry for seq {seq} of run '{run_id}' refs seq {entry.ref}, "
                f"which is not an earlier entry; nothing from this batch was appended. A ref "
                f"must name the seq the entry closes.",
                run_id=run_id,
                seq=seq,
                ref=entry.ref,
            )
        rows.append((seq, entry_json(entry, seq)))
    return rows


def effect_json(run_id: str, row: Mapping[str, Any]) -> str:
    """The stored text of an effect-ledger row (compact JSON); a non-JSON value is a typed error."""
    try:
        return json.dumps(dict(row), separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise NonSerializableValueError(
            f"effect-ledger row for run '{run_id}' is not JSON-serializable ({exc}); nothing was "
            f"written. Pass plain JSON data (e.g. ToolEffectRecord.model_dump(mode='json')).",
            run_id=run_id,
        ) from None


def parse_entry(text: str | bytes, where: str) -> JournalEntry:
    """Parse one stored entry; failure is `JournalCorruptError` (data `unparsable` if not JSON)."""
    try:
        return JournalEntry.model_validate_json(text)
    except ValidationError as exc:
        err = exc.errors()[0]
        problem = f"{err['msg']} at {'.'.join(map(str, err['loc'])) or 'top level'}"
        raise JournalCorruptError(
            f"journal corrupt: {where} is not a valid journal entry ({problem}). Restore the "
            f"store from a backup, or delete the run and start it again.",
            where=where,
            unparsable=err["type"] == "json_invalid",
        ) from None


def decode_rows(run_id: str, rows: Sequence[tuple[int, str | bytes]], location: str) -> list[JournalEntry]:
    """Decode a run's stored rows (seq order) and refuse a journal with gaps, naming where it lives."""
    out = [decode_entry(text, seq, f"seq {seq} of run '{run_id}' in {location}") for seq, text in rows]
    if out and out[-1].seq != len(out):
        raise JournalCorruptError(
            f"journal corrupt: run '{run_id}' in {location} has gaps (last seq {out[-1].seq}, "
            f"{len(out)} entries). Restore it from a backup.",
            run_id=run_id,
        )
    return out


def decode_entry(text: str | bytes, seq: int, where: str) -> JournalEntry:
    """Parse one stored entry and check it sits at `seq`; anything else is `JournalCorruptError`."""
    entry = parse_entry(text, where)
    if entry.seq != seq:
        raise JournalCorruptError(
            f"journal corrupt: {where} holds seq {entry.seq} where seq {seq} belongs; the "
            f"journal was edited or mixed with another run's. Restore it from a backup.",
            where=where,
            seq=seq,
            found=entry.seq,
        )
    return entry
