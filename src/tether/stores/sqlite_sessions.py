"""Sessions and workspace notes in the SQLite store: three tables, the head moved by a versioned UPDATE."""

from __future__ import annotations

import dataclasses
import json
import sqlite3
from collections.abc import Iterator
from contextlib import AbstractContextManager
from typing import Any

from tether.contracts.sessions import DEFAULT_NOTE_CAP, Note, SessionRecord, TurnRecord, evicted

SESSION_SCHEMA = """
CREATE TABLE IF NOT EXISTS sessions (
    session_id TEXT PRIMARY KEY, version INTEGER NOT NULL, created_at REAL NOT NULL, json TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS turns (
    session_id TEXT NOT NULL, idx INTEGER NOT NULL, json TEXT NOT NULL, PRIMARY KEY (session_id, idx)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS notes (
    workspace TEXT NOT NULL, key TEXT NOT NULL, written_at REAL NOT NULL, json TEXT NOT NULL,
    PRIMARY KEY (workspace, key)
) WITHOUT ROWID;
"""
"""Added in schema version 2 (`CREATE ... IF NOT EXISTS`: a version-1 file gains them when opened)."""


class SqliteSessions:
    """The `SessionStore` half of `SqliteStore` (which supplies `_tx` and `_read`)."""

    def _tx(self) -> AbstractContextManager[sqlite3.Connection]:
        raise NotImplementedError

    def _read(self) -> AbstractContextManager[sqlite3.Connection]:
        raise NotImplementedError

    async def session_create(self, session: SessionRecord) -> SessionRecord:
        with self._tx() as c:
            c.execute("INSERT OR IGNORE INTO sessions (session_id, version, created_at, json) VALUES (?, ?, ?, ?)",
                      (session.session_id, session.version, session.created_at, json.dumps(session.to_json())))
            (text,) = c.execute("SELECT json FROM sessions WHERE session_id = ?", (session.session_id,)).fetchone()
        return SessionRecord.from_json(json.loads(text))

    async def session_get(self, session_id: str) -> SessionRecord | None:
        with self._read() as c:
            row = c.execute("SELECT json FROM sessions WHERE session_id = ?", (session_id,)).fetchone()
        return None if row is None else SessionRecord.from_json(json.loads(row[0]))

    async def session_list(self, limit: int = 100) -> list[SessionRecord]:
        with self._read() as c:
            rows = c.execute("SELECT json FROM sessions ORDER BY created_at DESC, session_id LIMIT ?", (limit,))
            return [SessionRecord.from_json(json.loads(r[0])) for r in rows.fetchall()]

    async def session_swap(self, session: SessionRecord, expected_version: int, turn: TurnRecord | None = None) -> bool:
        stored = dataclasses.replace(session, version=expected_version + 1)
        with self._tx() as c:
            moved = c.execute("UPDATE sessions SET version = ?, json = ? WHERE session_id = ? AND version = ?",
                              (stored.version, json.dumps(stored.to_json()), session.session_id, expected_version))
            if moved.rowcount != 1:
                return False
            if turn is not None:
                c.execute("INSERT INTO turns (session_id, idx, json) VALUES (?, ?, ?)",
                          (turn.session_id, turn.index, json.dumps(turn.to_json())))
        return True

    async def session_turns(self, session_id: str) -> list[TurnRecord]:
        with self._read() as c:
            rows = c.execute("SELECT json FROM turns WHERE session_id = ? ORDER BY idx", (session_id,)).fetchall()
        return [TurnRecord.from_json(json.loads(r[0])) for r in rows]

    async def note_put(self, note: Note, cap: int = DEFAULT_NOTE_CAP) -> list[str]:
        with self._tx() as c:
            c.execute("INSERT OR REPLACE INTO notes (workspace, key, written_at, json) VALUES (?, ?, ?, ?)",
                      (note.workspace, note.key, note.written_at, json.dumps(note.to_json())))
            gone = [n.key for n in evicted(list(_notes(c, note.workspace)), cap)]
            c.executemany("DELETE FROM notes WHERE workspace = ? AND key = ?", [(note.workspace, k) for k in gone])
        return gone

    async def note_list(self, workspace: str) -> list[Note]:
        with self._read() as c:
            return list(_notes(c, workspace))

    async def note_delete(self, workspace: str, key: str) -> bool:
        with self._tx() as c:
            return c.execute("DELETE FROM notes WHERE workspace = ? AND key = ?", (workspace, key)).rowcount == 1


def _notes(c: sqlite3.Connection, workspace: str) -> Iterator[Note]:
    rows: list[Any] = c.execute("SELECT json FROM notes WHERE workspace = ? ORDER BY written_at, key",
                                (workspace,)).fetchall()
    return (Note.from_json(json.loads(r[0])) for r in rows)
