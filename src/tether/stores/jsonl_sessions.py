"""Sessions and workspace notes in a JSONL store's directory: one JSON file per session and per workspace.

Every change rewrites its file atomically (write, rename) under one `flock` of `sessions/.lock`, so the
compare-and-swap of a session's head holds across processes sharing the directory.
"""

from __future__ import annotations

import dataclasses
import fcntl
import json
import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import quote

from tether.contracts.sessions import DEFAULT_NOTE_CAP, Note, SessionRecord, TurnRecord, evicted


def _write(path: Path, value: Any, fsync: bool) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")
    with open(tmp, "w") as f:
        json.dump(value, f)
        if fsync:
            f.flush()
            os.fsync(f.fileno())
    os.replace(tmp, path)


class JsonlSessions:
    """The `SessionStore` half of `JsonlStore` (which sets `dir` and `_fsync`)."""

    dir: Path
    _fsync: bool

    @contextmanager
    def _sessions_locked(self) -> Iterator[Path]:
        root = self.dir / "sessions"
        root.mkdir(exist_ok=True)
        fd = os.open(root / ".lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield root
        finally:
            os.close(fd)

    def _read(self, path: Path, empty: Any) -> Any:
        try:
            return json.loads(path.read_text())
        except FileNotFoundError:
            return empty

    def _session_file(self, root: Path, session_id: str) -> Path:
        return root / f"s-{quote(session_id, safe='')}.json"

    def _notes_file(self, root: Path, workspace: str) -> Path:
        return root / f"w-{quote(workspace, safe='')}.json"

    async def session_create(self, session: SessionRecord) -> SessionRecord:
        with self._sessions_locked() as root:
            path = self._session_file(root, session.session_id)
            held = self._read(path, None)
            if held is not None:
                return SessionRecord.from_json(held["session"])
            _write(path, {"session": session.to_json(), "turns": []}, self._fsync)
            return session

    async def session_get(self, session_id: str) -> SessionRecord | None:
        with self._sessions_locked() as root:
            held = self._read(self._session_file(root, session_id), None)
        return None if held is None else SessionRecord.from_json(held["session"])

    async def session_list(self, limit: int = 100) -> list[SessionRecord]:
        with self._sessions_locked() as root:
            found = [SessionRecord.from_json(self._read(p, {})["session"]) for p in root.glob("s-*.json")]
        return sorted(found, key=lambda s: (-s.created_at, s.session_id))[:limit]

    async def session_swap(self, session: SessionRecord, expected_version: int, turn: TurnRecord | None = None) -> bool:
        with self._sessions_locked() as root:
            path = self._session_file(root, session.session_id)
            held = self._read(path, None)
            if held is None or held["session"]["version"] != expected_version:
                return False
            turns = [*held["turns"], *([turn.to_json()] if turn is not None else [])]
            stored = dataclasses.replace(session, version=expected_version + 1)
            _write(path, {"session": stored.to_json(), "turns": turns}, self._fsync)
            return True

    async def session_turns(self, session_id: str) -> list[TurnRecord]:
        with self._sessions_locked() as root:
            held = self._read(self._session_file(root, session_id), {"turns": []})
        return sorted((TurnRecord.from_json(t) for t in held["turns"]), key=lambda t: t.index)

    async def note_put(self, note: Note, cap: int = DEFAULT_NOTE_CAP) -> list[str]:
        with self._sessions_locked() as root:
            path = self._notes_file(root, note.workspace)
            notes = {n["key"]: Note.from_json(n) for n in self._read(path, [])}
            notes[note.key] = note
            gone = [n.key for n in evicted(list(notes.values()), cap)]
            for key in gone:
                del notes[key]
            _write(path, [n.to_json() for n in notes.values()], self._fsync)
            return gone

    async def note_list(self, workspace: str) -> list[Note]:
        with self._sessions_locked() as root:
            notes = [Note.from_json(n) for n in self._read(self._notes_file(root, workspace), [])]
        return sorted(notes, key=lambda n: (n.written_at, n.key))

    async def note_delete(self, workspace: str, key: str) -> bool:
        with self._sessions_locked() as root:
            path = self._notes_file(root, workspace)
            notes = [n for n in self._read(path, []) if n["key"] != key]
            if len(notes) == len(self._read(path, [])):
                return False
            _write(path, notes, self._fsync)
            return True
