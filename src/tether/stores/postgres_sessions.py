"""Sessions and workspace notes on PostgreSQL: the head moved by one versioned UPDATE that also adds the turn.

The swap is one statement (a data-modifying CTE), so the head, the version and the new turn change together
or not at all; under READ COMMITTED a second swap on the same version waits for the first, re-reads the row
and finds the version moved.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from tether.contracts.sessions import DEFAULT_NOTE_CAP, Note, SessionRecord, TurnRecord, evicted

SESSION_TABLES = """
CREATE TABLE IF NOT EXISTS {s}.sessions (
    session_id text PRIMARY KEY, version bigint NOT NULL, created_at double precision NOT NULL, json text NOT NULL);
CREATE TABLE IF NOT EXISTS {s}.turns (
    session_id text NOT NULL, idx bigint NOT NULL, json text NOT NULL, PRIMARY KEY (session_id, idx));
CREATE TABLE IF NOT EXISTS {s}.notes (
    workspace text NOT NULL, key text NOT NULL, written_at double precision NOT NULL, json text NOT NULL,
    PRIMARY KEY (workspace, key))
"""


def session_statements(schema: str) -> dict[str, str]:
    s = f'"{schema}"'
    return {
        "session_create": f"WITH ins AS (INSERT INTO {s}.sessions (session_id, version, created_at, json)"
        f" VALUES (%s, %s, %s, %s) ON CONFLICT (session_id) DO NOTHING RETURNING json)"
        f" SELECT json FROM ins UNION ALL SELECT json FROM {s}.sessions WHERE session_id = %s LIMIT 1",
        "session_get": f"SELECT json FROM {s}.sessions WHERE session_id = %s",
        "session_list": f"SELECT json FROM {s}.sessions ORDER BY created_at DESC, session_id LIMIT %s",
        "session_swap": f"WITH moved AS (UPDATE {s}.sessions SET version = %s, json = %s"
        f" WHERE session_id = %s AND version = %s RETURNING session_id),"
        f" added AS (INSERT INTO {s}.turns (session_id, idx, json) SELECT session_id, %s, %s FROM moved"
        f" WHERE %s::text IS NOT NULL RETURNING 1) SELECT count(*) FROM moved",
        "session_turns": f"SELECT json FROM {s}.turns WHERE session_id = %s ORDER BY idx",
        "note_put": f"INSERT INTO {s}.notes (workspace, key, written_at, json) VALUES (%s, %s, %s, %s)"
        f" ON CONFLICT (workspace, key) DO UPDATE SET written_at = EXCLUDED.written_at, json = EXCLUDED.json",
        "note_list": f"SELECT json FROM {s}.notes WHERE workspace = %s ORDER BY written_at, key",
        "note_delete": f"DELETE FROM {s}.notes WHERE workspace = %s AND key = %s RETURNING key",
        "note_evict": f"DELETE FROM {s}.notes WHERE workspace = %s AND key = ANY (%s::text[])",
    }


class PostgresSessions:
    """The `SessionStore` half of `PostgresStore`."""

    async def _fetch(self, name: str, params: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        raise NotImplementedError

    async def session_create(self, session: SessionRecord) -> SessionRecord:
        text = json.dumps(session.to_json())
        rows = await self._fetch("session_create", (session.session_id, session.version, session.created_at, text,
                                                    session.session_id))
        return SessionRecord.from_json(json.loads(rows[0][0]))

    async def session_get(self, session_id: str) -> SessionRecord | None:
        rows = await self._fetch("session_get", (session_id,))
        return SessionRecord.from_json(json.loads(rows[0][0])) if rows else None

    async def session_list(self, limit: int = 100) -> list[SessionRecord]:
        return [SessionRecord.from_json(json.loads(r[0])) for r in await self._fetch("session_list", (limit,))]

    async def session_swap(self, session: SessionRecord, expected_version: int, turn: TurnRecord | None = None) -> bool:
        stored = dataclasses.replace(session, version=expected_version + 1)
        turn_json = None if turn is None else json.dumps(turn.to_json())
        ((moved,),) = await self._fetch("session_swap", (
            stored.version, json.dumps(stored.to_json()), session.session_id, expected_version,
            turn.index if turn is not None else 0, turn_json, turn_json))
        return bool(moved)

    async def session_turns(self, session_id: str) -> list[TurnRecord]:
        return [TurnRecord.from_json(json.loads(r[0])) for r in await self._fetch("session_turns", (session_id,))]

    async def note_put(self, note: Note, cap: int = DEFAULT_NOTE_CAP) -> list[str]:
        # Two statements: a racing writer may evict one note more or fewer than `cap` asks for a moment;
        # the next write of the workspace evicts again by the same rule.
        await self._fetch("note_put", (note.workspace, note.key, note.written_at, json.dumps(note.to_json())))
        gone = [n.key for n in evicted(await self.note_list(note.workspace), cap)]
        if gone:
            await self._fetch("note_evict", (note.workspace, gone))
        return gone

    async def note_list(self, workspace: str) -> list[Note]:
        return [Note.from_json(json.loads(r[0])) for r in await self._fetch("note_list", (workspace,))]

    async def note_delete(self, workspace: str, key: str) -> bool:
        return bool(await self._fetch("note_delete", (workspace, key)))
