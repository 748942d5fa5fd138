"""Where the blobs a journal references live: an agent's checkpoint head and the transcript chunks it lists.

The engine writes them (`tether.engine.checkpoint`); the audit bundle reads them back by these keys and checks
them against the digests the chain records (`blob_digest`, `head_links`, `chunk_link_error`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence


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
        before = blob_digest(raw)
    if before != tip:
        return "its last chunk is not the one its head names (a chunk was edited, added or removed)"
    return None
