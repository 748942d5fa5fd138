"""Where the blobs a journal references live: an agent's checkpoint head and the transcript chunks it lists.

The engine writes them (`tether.engine.checkpoint`); the audit bundle reads them back by these keys and checks
them against the digests the chain records (`blob_digest`, `head_links`, `chunk_link_error`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Awaitable, Callable, Collection, Sequence

from tether.contracts.entries import JournalEntry


def checkpoint_key(run_id: str, agent_seq: int) -> str:
    """Where an agent invocation's checkpoint head lives (its terminal's `checkpoint_ref` names it too)."""
    return f"{run_id}/checkpoints/{agent_seq}"


def chunk_key(key: str, index: int) -> str:
    """Where chunk `index` of the transcript of the checkpoint head at `key` lives."""
    return f"{key}/m/{index}"


def blob_digest(data: bytes) -> str:
    """The sha256 (hex) of a checkpoint blob's stored bytes: what a chunk records of the one before it, a head
    of the last chunk, and a terminal of its head."""
    return hashlib.sha256(data).hexdigest()


BLOB_LINKS = ("layout", "lineage", "index", "start", "chunks", "tip", "prev")
"""A checkpoint blob's members that link it to the others: a redacted blob keeps them, and its digest."""


def redacted_blob(data: bytes, decision_seq: int) -> bytes:
    """A checkpoint blob with its content removed (archive, redact): its linking members, the sha256 of the bytes
    it replaces (what the chain recorded of them) and the seq of the decision that removed them."""
    try:
        doc = json.loads(data)
    except (ValueError, RecursionError):
        doc = None
    links = {k: doc[k] for k in BLOB_LINKS if k in doc} if isinstance(doc, dict) else {}
    return json.dumps({**links, "redacted": decision_seq, "sha256": blob_digest(data)},
                      separators=(",", ":")).encode()


def redaction_of(data: bytes) -> tuple[int, str] | None:
    """(the decision seq, the sha256 of the removed bytes) of a redacted blob; None for any other blob."""
    if b'"redacted":' not in data:
        return None
    try:
        doc = json.loads(data)
    except (ValueError, RecursionError):
        return None
    if not isinstance(doc, dict) or type(doc.get("redacted")) is not int or not isinstance(doc.get("sha256"), str):
        return None
    return doc["redacted"], doc["sha256"]


def is_redacted_blob(data: bytes) -> bool:
    """Whether `data` is a blob whose content archive or redact removed."""
    return redaction_of(data) is not None


def vouched_digest(data: bytes) -> str:
    """The sha256 the chain records of a stored blob: its own, or for a redacted one the bytes it replaced."""
    mark = redaction_of(data)
    return blob_digest(data) if mark is None else mark[1]


def head_links(data: bytes) -> tuple[int, str | None]:
    """How many chunks a stored head names, and the sha256 of the last one (None: an older, unlinked head)."""
    try:
        head = json.loads(data)
    except (ValueError, RecursionError):
        return 0, None
    if not isinstance(head, dict):
        return 0, None
    chunks, tip = head.get("chunks", 0), head.get("tip")
    return (chunks if type(chunks) is int and chunks >= 0 else 0), (tip if isinstance(tip, str) else None)


def chunk_link_error(tip: str, raws: Sequence[bytes | None]) -> str | None:
    """Why the chunks `raws` (stored bytes, in order) are not the linked chain a head with `tip` names; None
    when they are."""
    before = ""
    for i, raw in enumerate(raws):
        if raw is None:
            return f"its chunk {i} is missing"
        try:
            linked = json.loads(raw).get("prev")
        except (ValueError, AttributeError, RecursionError):
            linked = None
        if linked != before:
            return f"its chunk {i} does not link to the chunk before it (edited, or from another transcript)"
        before = vouched_digest(raw)
    if before != tip:
        return "its last chunk is not the one its head names (a chunk was edited, added or removed)"
    return None


def blob_prefix(run_id: str) -> str:
    """The prefix of every blob key a run owns (its checkpoints, transcript chunks and cancel request): run ids hold
    no '/', so no other run's keys share it."""
    return f"{run_id}/"


def blob_owner(key: str) -> str:
    """The run id a blob key belongs to (the part before its first '/')."""
    return key.partition("/")[0]


GetBlob = Callable[[str], Awaitable[bytes | None]]


async def _with_chunks(key: str, get_blob: GetBlob, probe: bool) -> list[str]:
    """`key` and the chunk keys of the head stored there (`probe`: and any chunk after them, written before a
    head that never landed); nothing when no head is stored at `key`."""
    data = await get_blob(key)
    if data is None:
        return []
    count, i = head_links(data)[0], 0
    out = [key]
    while i < count or (probe and await get_blob(chunk_key(key, i)) is not None):
        out.append(chunk_key(key, i))
        i += 1
    return out


async def run_blob_keys(run_id: str, entries: Sequence[JournalEntry], get_blob: GetBlob) -> list[str]:
    """Every checkpoint blob key of `run_id` its journal leads to: each agent's head and the chunks it lists."""
    heads = {checkpoint_key(run_id, e.seq) for e in entries if e.kind == "agent" and e.ref is None and e.seq}
    heads |= {e.checkpoint_ref for e in entries if e.checkpoint_ref and blob_owner(e.checkpoint_ref) == run_id}
    return [k for head in sorted(heads) for k in await _with_chunks(head, get_blob, probe=True)]


async def vouched_blob_keys(entries: Sequence[JournalEntry], owners: Collection[str], get_blob: GetBlob) -> set[str]:
    """The blobs of runs `owners` that `entries` (another run's journal: a fork's copies) reference by their
    terminals' `checkpoint_ref`: the heads and the chunks they list."""
    heads = {e.checkpoint_ref for e in entries if e.checkpoint_ref and blob_owner(e.checkpoint_ref) in owners}
    return {k for head in heads for k in await _with_chunks(head, get_blob, probe=False)}
