"""The one codec for stored entries and ledger rows: numbering, checksums, and decoding with typed errors.

Every entry is stored as compact JSON whose last member is `"checksum"`: the first 32 hex digits of
the sha256 of the entry's serialized bytes without that member. Loads verify it before parsing, so a
flipped byte anywhere in an entry (its output, its `cost_usd`) is a `JournalCorruptError` naming the
run, the seq and where the entry lives; nothing is rewritten. Entries written before checksums
existed still load, but once a run's journal holds a checksummed entry, every later one must carry
one too (stripping the member is corruption as well).
"""

from __future__ import annotations

import hashlib
import json
import operator
from collections.abc import Mapping, Sequence
from typing import Any

import msgspec
from pydantic import ValidationError
from pydantic_core import PydanticSerializationError

from tether.contracts.entries import (
    DIGEST_MEMBER,
    ENTRY,
    JournalEntry,
    RunMeta,
    entry_from_dict,
    entry_parts,
    sealed_parts,
)
from tether.contracts.errors import JournalCorruptError, JournalOrderViolation, NonSerializableValueError
from tether.journal.chain import (
    GENESIS,
    body_of,
    broken_link,
    chain_part,
    digest,
    genesis_link,
    sealed,
    without_checksum,
)

CHECKSUM_DIGITS = 32
_MEMBER = b',"checksum":"'
_MEMBER_LEN = len(_MEMBER)
_SUFFIX_LEN = _MEMBER_LEN + CHECKSUM_DIGITS + 2  # ,"checksum":"<digits>"}


def checksum(body: bytes) -> str:
    """The checksum of an entry's serialized bytes (without its checksum member)."""
    return hashlib.sha256(body).hexdigest()[:CHECKSUM_DIGITS]


def entry_json(entry: JournalEntry, seq: int) -> str:
    """The stored text of an entry: compact JSON with `seq` filled in and the checksum member last."""
    return linked_json(entry, seq)[0]


def linked_json(entry: JournalEntry, seq: int, *, seal: bool = False) -> tuple[str, str]:
    """(the stored text of an entry at `seq`, the link to it: the `prev` of the entry after it).

    One sha256 of the bytes the chain hashes gives both the checksum (its first digits) and the link; a sealed
    entry's payload is hashed once more, into its `payload_sha256` (`seal`: seal a fresh entry in place first)."""
    entry = without_checksum(entry)
    try:
        parts = sealed_parts(entry, seq) if seal else None  # one serialization seals and writes a fresh entry
        if parts is None:
            parts = entry_parts(entry, seq, sealed(entry) if seal else None)  # numbered in the bytes only
        chain, body = parts
    except (PydanticSerializationError, ValueError, TypeError) as exc:
        raise NonSerializableValueError(
            f"journal entry (kind {entry.kind!r}, key {entry.key!r}) is not JSON-serializable "
            f"({exc}); nothing was appended. Journal plain JSON data or pydantic models.",
            kind=entry.kind,
        ) from None
    link = digest(chain)
    return f'{body[:-1].decode()},"checksum":"{link[:CHECKSUM_DIGITS]}"}}', link


def encode_entry(run_id: str, seq: int, entry: JournalEntry) -> str:
    """The stored text of `entry` at `seq`, after checking it may sit there (its seq, its ref)."""
    return encode_linked(run_id, seq, entry)[0]


def encode_linked(run_id: str, seq: int, entry: JournalEntry, *, seal: bool = False) -> tuple[str, str]:
    """`encode_entry`, and the link to the entry (`linked_json`; `seal`: seal the fresh entry in place)."""
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
    return linked_json(entry, seq, seal=seal)


def number_entries(
    run_id: str, last_seq: int, entries: Sequence[JournalEntry]
) -> list[tuple[int, str]]:
    """(seq, json) rows for a batch after `last_seq`; one entry out of order fails the batch."""
    return [(last_seq + 1 + i, encode_entry(run_id, last_seq + 1 + i, entry)) for i, entry in enumerate(entries)]


def check_rows(run_id: str, last_seq: int, rows: Sequence[tuple[int, str]]) -> None:
    """Refuse pre-encoded rows (`encode_entry`) that do not continue the journal right after `last_seq`."""
    for i, (seq, _) in enumerate(rows):
        if seq != last_seq + 1 + i:
            raise JournalOrderViolation(
                f"journal order: run '{run_id}' expects seq {last_seq + 1 + i} next but the entry carries "
                f"seq {seq}; nothing from this batch was appended. Another writer appended first: "
                f"reload the journal and resume the run.",
                run_id=run_id,
                expected=last_seq + 1 + i,
                got=seq,
            )


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


def _split_checksum(raw: bytes) -> tuple[bytes, bytes | None]:
    """(the entry's bytes without its checksum member, the stored digits or None if it has none)."""
    if len(raw) > _SUFFIX_LEN and raw.endswith(b'"}'):
        at = len(raw) - _SUFFIX_LEN
        if raw[at : at + len(_MEMBER)] == _MEMBER:
            return raw[:at] + b"}", raw[at + len(_MEMBER) : -2]
    return raw, None


def _verified_body(raw: bytes) -> bytes | None:
    """The entry's bytes without its checksum member, if it has one and it matches; else None."""
    n = len(raw)
    at = n - _SUFFIX_LEN
    if at <= 0 or raw[n - 2 :] != b'"}' or raw[at : at + _MEMBER_LEN] != _MEMBER:
        return None
    body = raw[:at] + b"}"
    return body if checksum(chain_part(body)[0]).encode() == raw[at + _MEMBER_LEN : n - 2] else None


def payload_error(body: bytes) -> str | None:
    """Why a sealed entry's payload is not the one its digest commits (None: it is, or it has none)."""
    _, recorded, payload = chain_part(body)
    if recorded is None or payload is None or hashlib.sha256(payload).hexdigest().encode() == recorded:
        return None
    return ("its payload checksum (payload_sha256) does not match its payload (the payload was changed after it "
            "was written)")


def _verified_entries(raws: Sequence[bytes | str]) -> tuple[list[JournalEntry], list[str]] | None:
    """Every entry decoded and its link (`chain.digest`), if each has a checksum and it matches, a sealed one's
    payload is the one its digest commits, and each validates with no member this version does not know; else
    None.

    `_verified_body` for a whole journal, inlined (one Python loop: this runs for every entry of every load), then
    each entry decoded on its own by `ENTRY` in one C loop (`map`), rather than the whole journal joined into one
    more copy and decoded at once: the entries are still built one after another (what the folds of a resume walk
    next), and no journal-sized buffer is made.
    """
    sha256, member, suffix_len, digits = hashlib.sha256, _MEMBER.decode(), _SUFFIX_LEN, CHECKSUM_DIGITS
    sealed_at, redacted_at = DIGEST_MEMBER, b',"redacted":'
    digest_at = len(DIGEST_MEMBER)
    digest_end = digest_at + 64
    decode = ENTRY.decode
    bodies: list[bytes] = []
    links: list[str] = []
    append, link = bodies.append, links.append
    for raw in raws:
        if type(raw) is not bytes:
            raw = raw.encode() if isinstance(raw, str) else bytes(raw)
        at = len(raw) - suffix_len
        if at <= 0:
            return None
        body = raw[:at] + b"}"
        sealed = body.find(sealed_at)
        if sealed < 0:
            full = sha256(body).hexdigest()
        else:  # a sealed entry: the chain hashes its form without the payload, and the payload its digest
            end = sealed + digest_end  # the digest's closing quote
            if not body.startswith(redacted_at, end + 1) and not body.startswith(
                    sha256(b"{" + body[end + 2:]).hexdigest().encode(), sealed + digest_at):
                return None
            full = sha256(body[:end + 1] + b"}").hexdigest()
        if raw[at:] != f'{member}{full[:digits]}"}}'.encode():  # the member, its digits, the closing brace: one compare
            return None
        append(body)
        link(full)
    try:
        entries = list(map(decode, bodies))
    except (msgspec.DecodeError, RecursionError):  # (a value nested past the parser's limit: entry by entry)
        return None
    # A stored member that bears `unknown`'s decoder name is an unknown member: the per-entry path keeps it so.
    return None if any(map(_UNKNOWN, entries)) else (entries, links)


def decode_batch(raws: Sequence[bytes | str], first_seq: int = 1) -> list[JournalEntry] | None:
    """Entries `first_seq`, `first_seq + 1`, ... decoded in one pass, when every one of them carries a
    matching checksum, validates, sits at its seq and holds its link of the chain; None otherwise (then
    decode entry by entry with `EntryDecoder`, which names what is wrong and where)."""
    verified = _verified_entries(raws)
    if verified is None:
        return None
    entries, links = verified
    if list(map(_SEQ, entries)) != list(range(first_seq, first_seq + len(entries))):
        return None
    return entries if _chain_holds(entries, links, first_seq == 1) else None


def _chain_holds(entries: list[JournalEntry], links: list[str], from_genesis: bool) -> bool:
    """Whether every chained entry links to its predecessor's bytes (an unchained one is not checked here:
    a raw `store.append` writes one, and `tether verify` reports it)."""
    if not entries:
        return True
    prevs = list(map(_PREV, entries))
    expected = [GENESIS if from_genesis else prevs[0], *links[:-1]]  # (mid-journal: the first is unchecked)
    if prevs == expected:  # every entry chained: one comparison in C
        return True
    return all(p is None or p == x for p, x in zip(prevs, expected, strict=True))


_SEQ = operator.attrgetter("seq")
_PREV = operator.attrgetter("prev")
_UNKNOWN = operator.attrgetter("unknown")


class EntryDecoder:
    """Decodes one run's stored entries in seq order, verifying checksums (and that none was stripped)."""

    def __init__(self, run_id: str | None = None) -> None:
        self.run_id = run_id
        self._checksummed = False
        self._last: tuple[JournalEntry, bytes] | None = None
        """The entry parsed before this one and its body: what the next entry's link must hash."""

    def parse(self, text: str | bytes, where: str) -> JournalEntry:
        """One stored entry; failure is `JournalCorruptError` (data `unparsable` if not JSON)."""
        raw = text.encode() if isinstance(text, str) else bytes(text)
        body, stored = _split_checksum(raw.strip())
        if stored is not None:
            if checksum(chain_part(body)[0]).encode() != stored:
                raise self._corrupt(
                    where, "its checksum does not match its bytes (the entry was changed after it was written)",
                    part="checksum",
                )
            bad_payload = payload_error(body)
            if bad_payload is not None:
                raise self._corrupt(where, bad_payload, part="checksum")
            self._checksummed = True
        elif self._checksummed and body.strip():
            try:
                json.loads(body)
            except ValueError:
                pass  # not JSON at all: reported below as unparsable (a torn JSONL tail stays torn)
            else:
                raise self._corrupt(where, "it has no checksum although earlier entries of this run do",
                                    part="checksum")
        entry = self._validated(body, where)
        self._check_link(entry, body, where)
        return entry

    def _check_link(self, entry: JournalEntry, body: bytes, where: str) -> None:
        """Refuse an entry whose link (`prev`) does not hash its predecessor, or that drops a chain."""
        last, self._last = self._last, (entry, body)
        seq = entry.seq or 0
        if entry.prev is None:
            return  # unchained: written before chaining, or by a raw `store.append` (`tether verify` reports it)
        if last is None:
            if seq == 1 and entry.prev != GENESIS:
                raise genesis_link(self.run_id, where)
            return  # decoding from mid-journal: nothing to check this first link against
        before, before_body = last
        # The writer linked to its predecessor as this version encodes it; for entries this version
        # wrote that is their stored bytes, for an older one's it may not be, so both are accepted.
        if entry.prev != digest(chain_part(before_body.strip())[0]) and entry.prev != digest(body_of(before)):
            raise broken_link(self.run_id, before.seq or 0, seq, where)

    def _validated(self, body: bytes, where: str) -> JournalEntry:
        try:
            entry = ENTRY.decode(body)
        except (msgspec.DecodeError, RecursionError):
            return self._general(body, where)  # the stdlib parser reads it, then the same rules decide
        # A stored member bearing `unknown`'s decoder name is an unknown member: the general path keeps it so.
        return self._general(body, where) if entry.unknown is not None else entry

    def _general(self, body: bytes, where: str) -> JournalEntry:
        """An entry parsed by the standard library's JSON parser, then validated by `ENTRY`'s rules
        (`entry_from_dict`): one with members this version does not know (kept in `unknown`), a number
        msgspec's parser does not read (past a float's range, an int past 64 bits), one nested past its
        parser's limit, or one that is not valid at all (the error names what and where).

        Values are refused past `canonical.MAX_DEPTH` when they are journaled, but a journal written
        before that check (or an entry the engine built itself) may nest deeper, up to the ~255 levels
        the serializer writes: whatever a store accepted, it reads back.
        """
        try:
            data = json.loads(body)
        except RecursionError:
            raise self._corrupt(where, "it is nested too deeply to parse") from None
        except ValueError as exc:  # not JSON: a torn JSONL tail, say (reported as unparsable)
            raise JournalCorruptError(
                f"journal corrupt: {where} is not a valid journal entry (Invalid JSON: {exc}). Restore "
                f"the store from a backup, or delete the run and start it again.",
                where=where,
                run_id=self.run_id,
                unparsable=True,
            ) from None
        try:
            msgspec.json.encode(data)  # a lone surrogate (`"\\ud800"`) parses here and is no text: refused
            return entry_from_dict(data)
        except (msgspec.ValidationError, UnicodeEncodeError) as exc:
            raise self._corrupt(where, f"it is not a valid journal entry ({exc})") from None

    def _corrupt(self, where: str, why: str, *, part: str = "entry") -> JournalCorruptError:
        """The error for an entry that does not read back; `part` (data `why`) is what failed: its `checksum`
        (missing or not matching its bytes) or the `entry` itself (not JSON, not a valid entry)."""
        return JournalCorruptError(
            f"journal corrupt: {where}: {why}. Nothing was rewritten; restore the store from a "
            f"backup, or delete the run and start it again.",
            where=where,
            run_id=self.run_id,
            why=part,
        )

    def at(self, text: str | bytes, seq: int, where: str) -> JournalEntry:
        """Parse one stored entry and check it sits at `seq`; anything else is `JournalCorruptError`."""
        entry = self.parse(text, where)
        if entry.seq != seq:
            raise JournalCorruptError(
                f"journal corrupt: {where} holds seq {entry.seq} where seq {seq} belongs; the "
                f"journal was edited or mixed with another run's. Restore it from a backup.",
                where=where,
                run_id=self.run_id,
                seq=seq,
                found=entry.seq,
            )
        return entry


def decode_meta(text: str | bytes) -> RunMeta:
    """A stored `RunMeta`; metadata nested past pydantic's JSON parser's limit takes the stdlib's."""
    try:
        return RunMeta.model_validate_json(text)
    except ValidationError as exc:
        err = exc.errors()[0]
        if not (err["type"] == "json_invalid" and "recursion limit" in err["msg"]):
            raise
    return RunMeta.model_validate(json.loads(text))


def parse_entry(text: str | bytes, where: str) -> JournalEntry:
    """Parse one stored entry on its own (checksum verified when present)."""
    return EntryDecoder().parse(text, where)


def decode_rows(run_id: str, rows: Sequence[tuple[int, str | bytes]], location: str) -> list[JournalEntry]:
    """Decode a run's stored rows (seq order) and refuse a journal with gaps, naming where it lives."""
    fast = decode_batch(list(map(operator.itemgetter(1), rows))) if rows else []
    if fast is not None and (not fast or fast[-1].seq == rows[-1][0]):
        return fast
    decoder = EntryDecoder(run_id)  # the checked path: it names what is wrong, and where
    out = [decoder.at(text, seq, f"seq {seq} of run '{run_id}' in {location}") for seq, text in rows]
    if out and out[-1].seq != len(out):
        raise JournalCorruptError(
            f"journal corrupt: run '{run_id}' in {location} has gaps (last seq {out[-1].seq}, "
            f"{len(out)} entries). Restore it from a backup.",
            run_id=run_id,
        )
    return out
