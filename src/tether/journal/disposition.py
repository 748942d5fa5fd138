"""The one replay predicate: what to do with a matched journal entry on resume (SPEC §3)."""

from __future__ import annotations

from typing import Literal

from tether.contracts.entries import JournalEntry

Disposition = Literal["replay", "rerun", "redispatch", "skip"]

# Error kinds that say nothing about the task itself: the call is worth making again.
TRANSPORT_CLASS = frozenset({"transport", "rate-limit", "budget"})


def disposition(dispatch: JournalEntry, terminal: JournalEntry | None, *, abandoned: bool = False) -> Disposition:
    """Decide replay / rerun / redispatch / skip for a matched entry and its terminal (if any)."""
    if abandoned:
        return "skip"
    if dispatch.status != "running":
        # Single-phase facts (rand, decision, suspensions) are replayed as they are.
        return "replay"
    if terminal is None:
        return "redispatch"
    status = terminal.status
    if status == "ok":
        return "replay"
    if status == "exhausted":
        return "replay" if terminal.memoized else "rerun"  # a child that returned despite its ceiling
    if status == "cancelled":
        return "rerun"
    if status in ("limit", "error"):
        kind = (terminal.error or {}).get("kind")
        if kind in TRANSPORT_CLASS:
            return "rerun"
        return "replay" if terminal.memoized else "rerun"
    return "rerun"
