"""The JSONL event log: one JSON object per event per line, appended and flushed per event."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import IO

from pydantic import ValidationError

from tether.contracts.events import EVENT_ADAPTER, EVENT_TYPES, Event, EventLogError


class EventLog:
    """An event sink writing `path` (`{run_id}` in the path gives each run its own file).

    Every event is one line, flushed as it is written, so a crash loses at most the line being
    written; `read_events` ignores such a torn last line. Replayed events carry `"replayed": true`.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.fspath(path)
        self._files: dict[str, IO[str]] = {}

    def file_for(self, run_id: str) -> str:
        return self.path.replace("{run_id}", run_id)

    def emit(self, event: Event) -> None:
        out = self._files.get(event.run_id)
        if out is None:
            target = Path(self.file_for(event.run_id))
            target.parent.mkdir(parents=True, exist_ok=True)
            out = self._files[event.run_id] = target.open("a", encoding="utf-8")
        out.write(event.model_dump_json() + "\n")
        out.flush()

    def close_run(self, run_id: str) -> None:
        out = self._files.pop(run_id, None)
        if out is not None:
            out.close()


def read_events(path: str | os.PathLike[str]) -> list[Event]:
    """Read an event log back into the typed models, in file order.

    A torn last line (a crash mid-write) is ignored; any other unreadable line is an `EventLogError`.
    Fields and event types this version does not know are dropped, so a newer tether's log still reads.
    """
    text = Path(path).read_text(encoding="utf-8")
    lines = text.split("\n")
    torn_tail = not text.endswith("\n")
    events: list[Event] = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            event = _parse(line)
        except (ValueError, ValidationError) as exc:
            if torn_tail and number == len(lines):
                break
            raise EventLogError(
                f"event log {os.fspath(path)!r}, line {number}: not an event ({exc.__class__.__name__}: "
                f"{str(exc).splitlines()[0]}). The file is damaged there; earlier lines are intact.",
                path=os.fspath(path), line=number,
            ) from None
        if event is not None:
            events.append(event)
    return events


def _parse(line: str) -> Event | None:
    """One line as its typed event; None for an event type this version does not know."""
    data = json.loads(line)
    if not isinstance(data, dict) or not isinstance(data.get("type"), str):
        raise ValueError("a line must hold one JSON object with a string `type`")
    model = EVENT_TYPES.get(data["type"])
    if model is None:
        return None
    known = {k: v for k, v in data.items() if k in model.field_infos()}
    return EVENT_ADAPTER.validate_python(known)
