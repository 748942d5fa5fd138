"""The one replay predicate: what to do with a matched journal entry on resume (SPEC §3)."""

from __future__ import annotations

from typing import Literal

from tether.contracts.entries import JournalEntry
from tether.journal.stops import error_stop_reason

Disposition = Literal["replay", "rerun", "redispatch", "skip"]

# Error kinds that say nothing about the task itself: the call is worth making again.
TRANSPORT_CLASS = frozenset({"transport", "rate-limit", "budget"})


def ceiling_stopped(terminal: JournalEntry) -> bool:
    """Whether a ceiling ended this call (its typed `StopReason`; not the exposure cap, nor a stream cut with no
    ceiling fired)."""
    if terminal.status not in ("limit", "error", "cancelled"):
        return False
    reason = error_stop_reason(terminal.error)
    return reason is not None and reason.is_ceiling


def brake_stopped(terminal: JournalEntry) -> bool:
    """Whether a runaway brake ended this call (`StopReason.is_brake`): it replays on every resume, raise or not."""
    if terminal.status not in ("limit", "error", "cancelled") or not terminal.error:
        return False
    reason = error_stop_reason(terminal.error)
    return reason is not None and reason.is_brake


def continues_on_rerun(terminal: JournalEntry) -> bool:
    """Whether an agent run again over this terminal goes on from its last checkpoint rather than its prompt: a
    ceiling stopped it, it was cancelled, or a transport-class failure ended it (a 5xx or timeout past its
    retries). Each turn it completed was paid once; the next attempt must not send it again. (A terminal the
    model's own answer ended, a schema mismatch say, starts over: that conversation is what failed.)"""
    if ceiling_stopped(terminal) or terminal.status == "cancelled":
        return True
    return terminal.status in ("limit", "error") and (terminal.error or {}).get("kind") in TRANSPORT_CLASS


def disposition(
    dispatch: JournalEntry, terminal: JournalEntry | None, *, abandoned: bool = False,
    money_reset_seq: int | None = None,
) -> Disposition:
    """Decide replay / rerun / redispatch / skip for a matched entry and its terminal (if any).

    `money_reset_seq` is what a resume knows of the money: the seq of the last raise or orphan settlement
    (0: none; past a fork's copied prefix: a fork's money is its own). A call a ceiling stopped after it
    replays its stop, since the same money decides the same way; one stopped before it runs again, like
    the admission refusals journaled before that decision. None (nothing known) reruns every budget stop.
    """
    if abandoned:
        return "skip"
    if dispatch.status != "running":
        # Single-phase facts (rand, decision, suspensions) are replayed as they are.
        return "replay"
    if terminal is None:
        return "redispatch"
    status = terminal.status
    if status == "ok" or brake_stopped(terminal):
        return "replay"
    if money_reset_seq is not None and ceiling_stopped(terminal):
        return "rerun" if (terminal.seq or 0) < money_reset_seq else "replay"
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
