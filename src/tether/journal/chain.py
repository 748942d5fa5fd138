"""The hash chain: each entry carries the sha256 of its predecessor's stored bytes (`JournalEntry.prev`).

An entry's *body* is its stored text without the checksum member (what the checksum hashes), so the
digest a link needs is the very hash the checksum is cut from: chaining costs no extra hash on append
or load. Editing an entry (and recomputing its checksum), deleting, inserting or reordering entries
breaks the link after the change; the chain vouches for every entry but the newest, which an export
bundle's signed head (`tether.audit`) or a recorded head vouches for. Every tether writer chains its
entries; loads check every link an entry carries. An unchained entry (a journal written before entries
were chained, or a raw `store.append`) still loads, and `tether verify` refuses a run that holds one
after a chained entry: nothing vouches for the link into it.

A *sealed* entry (its `payload_sha256` set: every entry tether's writers append since payloads were committed by
digest) is chained by its *chain form* instead: its stored bytes up to and including that digest, the payload
(`value`, `error`) after it left out. The payload is checked against the digest when it is there; archive and
redact remove it (leaving `"redacted":<seq>`) and the link holds. An unsealed entry (written before) is chained by
its whole body, as before: both rules load and verify side by side.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from tether.contracts.entries import DIGEST_MEMBER, JournalEntry, entry_parts, payload_bytes
from tether.contracts.errors import JournalCorruptError

GENESIS = "0" * 64
"""The `prev` of a run's first entry: nothing precedes it."""


class JournalChainError(JournalCorruptError):
    """A run's hash chain does not hold: an entry was edited, or entries inserted, removed or reordered."""

    code = "journal-chain"


def digest(body: bytes) -> str:
    """The link to an entry: the sha256 hex of its body (its stored bytes without the checksum member)."""
    return hashlib.sha256(body).hexdigest()


def without_checksum(entry: JournalEntry) -> JournalEntry:
    """`entry` without a stored checksum member a path that kept unknown members read back (stale once the
    entry is written again): a copy when it has one, else the entry itself."""
    if entry.unknown and "checksum" in entry.unknown:
        kept = {k: v for k, v in entry.unknown.items() if k != "checksum"}
        return entry.replace(unknown=kept or None)
    return entry


def body_of(entry: JournalEntry) -> bytes:
    """The bytes of a loaded entry the chain hashes, as this version encodes it: its stored body, or a sealed
    entry's chain form (its stored bytes for anything it wrote itself)."""
    return entry_parts(without_checksum(entry))[0]


_DIGEST_AT = len(DIGEST_MEMBER)
_REDACTED = b',"redacted":'


def chain_part(body: bytes) -> tuple[bytes, bytes | None, bytes | None]:
    """(the bytes of a stored body the chain hashes, the payload digest it records, the payload bytes it holds).

    An unsealed body is hashed whole (no digest, no payload); a sealed one up to its digest; a redacted one holds
    no payload (None). The digest member is the first of its name (a nested member of that name in the chain
    form makes this split wrong, and the link fail, never pass: the checked path recomputes it)."""
    at = body.find(DIGEST_MEMBER)
    if at < 0:
        return body, None, None
    end = at + _DIGEST_AT + 64
    if body[end:end + 2] not in (b'",', b'"}'):
        return body, None, None
    sealed = body[:end + 1] + b"}"
    rest = body[end + 1:]
    if rest.startswith(_REDACTED) or rest == b"}":
        return sealed, body[at + _DIGEST_AT:end], None
    return sealed, body[at + _DIGEST_AT:end], b"{" + rest[1:]


def sealed(entry: JournalEntry, payload: bytes | None = None) -> bytes | None:
    """Seal `entry` in place (a fresh one a writer is about to append): set its `payload_sha256` when it has a
    payload and none yet. Returns its payload bytes (None: nothing to seal)."""
    if entry.payload_sha256 is not None or entry.redacted is not None:
        return None
    payload = payload_bytes(entry) if payload is None else payload
    if payload is not None:
        entry.payload_sha256 = hashlib.sha256(payload).hexdigest()
    return payload


def payload_holds(entry: JournalEntry) -> bool:
    """Whether a sealed entry's payload is the one its digest commits (a redacted or unsealed one: True)."""
    if entry.payload_sha256 is None or entry.redacted is not None:
        return True
    payload = payload_bytes(entry)
    return payload is not None and hashlib.sha256(payload).hexdigest() == entry.payload_sha256


def link_after(entries: Sequence[JournalEntry]) -> str:
    """The `prev` of the entry appended after `entries` (a run's journal, loaded, in seq order)."""
    return digest(body_of(entries[-1])) if entries else GENESIS


def chained(entries: Sequence[JournalEntry], entry: JournalEntry) -> JournalEntry:
    """`entry` linked to the end of `entries`, for a writer that appends it right after them (its seq set)."""
    entry.prev = link_after(entries)
    sealed(entry)
    return entry


def relinked(entries: Sequence[JournalEntry]) -> list[JournalEntry]:
    """Copies of `entries` (seq order, numbered) with every link recomputed: a journal rebuilt elsewhere."""
    out: list[JournalEntry] = []
    for entry in entries:
        copy = entry.replace(prev=link_after(out))
        sealed(copy)
        out.append(copy)
    return out


def broken_link(run_id: str | None, before: int, at: int, where: str) -> JournalChainError:
    """The error for a link that does not hold: seq `before` is the first entry the chain no longer vouches for."""
    return JournalChainError(
        f"journal chain broken at seq {before}: {where} records a digest of seq {before} that seq {before}'s "
        f"bytes do not have, so seq {before} was changed after seq {at} was written, or entries were inserted, "
        f"removed or reordered between them. Nothing was rewritten; restore the run from a backup or an export "
        f"bundle (tether verify FILE checks one).",
        run_id=run_id, seq=before, at=at, why="chain",
    )


def genesis_link(run_id: str | None, where: str) -> JournalChainError:
    """The error for a first entry whose link is not the genesis (entries before it were removed)."""
    return JournalChainError(
        f"journal chain broken at seq 1: {where} links to a predecessor, so the run's first entries were "
        f"removed and the rest renumbered. Restore the run from a backup or an export bundle.",
        run_id=run_id, seq=1, at=1, why="chain",
    )
