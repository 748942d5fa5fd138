"""Whether a run's payloads were removed (archive, redact: `tether.engine.redaction`), and the refusal to drive it."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from tether.contracts.entries import JournalEntry
from tether.contracts.errors import RunRetainedError

RETENTION_DECISIONS = frozenset({"archive", "redact"})
"""The decisions that remove payloads: a run holding one does not resume."""


def retention_mark(entries: Iterable[JournalEntry]) -> JournalEntry | None:
    """The first archive or redact decision among `entries` (None: the run holds every payload it wrote)."""
    for e in entries:
        if e.kind == "decision" and isinstance(e.value, dict) and e.value.get("decision") in RETENTION_DECISIONS:
            return e
    return None


def refuse_retained(run_id: str, entries: Iterable[JournalEntry]) -> None:
    """Refuse to drive a run whose payloads were removed: a replay would hand back nothing where outputs were."""
    mark = retention_mark(entries)
    if mark is None:
        return
    value: dict[str, Any] = mark.value
    name = value.get("decision")
    raise RunRetainedError(
        f"run {run_id!r} was {'archived' if name == 'archive' else 'redacted'} at seq {mark.seq} by "
        f"{value.get('by')} ({value.get('why') or 'no reason given'}): its journal no longer holds the payloads a "
        f"replay returns, so it cannot resume or be forked. Its record still verifies (tether verify); start a new "
        f"run for new work.", run_id=run_id, seq=mark.seq, decision=name, by=value.get("by"), why=value.get("why"))
