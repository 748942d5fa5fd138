"""`ctx.memory`: durable notes of a workspace (remember, recall, forget), and the same three as agent tools.

From the workflow each call is a journaled step, so a replay sees the notes its live run recalled even after
one was forgotten; as tools (`ctx.memory.tools()`) the results live in the agent's transcript, which replays the
same way. Recall ranks notes by the query words they contain, then by recency (docs/sessions.md, *Memory*).
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from tether.contracts.errors import ConfigError
from tether.contracts.protocols import JournalStore
from tether.contracts.sessions import DEFAULT_NOTE_CAP, Note, SessionStore
from tether.tools.definition import Tool, tool

Step = Callable[..., Awaitable[Any]]
_WORD = re.compile(r"\w+")


def rank(notes: Sequence[Note], query: str, k: int) -> list[Note]:
    """The `k` notes that best match `query`: most query words in key or value, then pinned, then newest."""
    words = {w.lower() for w in _WORD.findall(query)}

    def score(n: Note) -> int:
        return len(words & {w.lower() for w in _WORD.findall(f"{n.key} {n.value}")})

    scored = [(score(n), n) for n in notes]
    hits = [(s, n) for s, n in scored if s > 0 or not words]
    hits.sort(key=lambda sn: (-sn[0], not sn[1].pinned, -sn[1].written_at, sn[1].key))
    return [n for _, n in hits[:max(0, k)]]


class Memory:
    """The notes of one workspace as a run reads and writes them; every note names the run (and turn) that wrote it."""

    def __init__(self, step: Step, store: JournalStore, workspace: str, run_id: str, *, session: str | None = None,
                 turn: int | None = None, clock: Callable[[], float], cap: int = DEFAULT_NOTE_CAP) -> None:
        if not isinstance(store, SessionStore):
            raise ConfigError(f"ctx.memory needs a store that holds notes; {type(store).__name__} does not. Use a "
                              f"shipped store (sqlite, postgresql, jsonl, memory).")
        self.workspace, self._store, self._step, self._clock, self._cap = workspace, store, step, clock, cap
        self._writer: dict[str, Any] = {"run_id": run_id, "session": session, "turn": turn}

    async def remember(self, key: str, value: str, pinned: bool = False) -> list[str]:
        """Store `value` under `key` (replacing it); the keys the size cap evicted to make room."""
        return list(await self._step("memory.remember", lambda: self._put(key, value, pinned),
                                     deps=[self.workspace, key, value, pinned]))

    async def recall(self, query: str, k: int = 5) -> list[Note]:
        """The `k` notes that best match `query` (journaled: a replay sees these same notes)."""
        rows = await self._step("memory.recall", lambda: self._recall(query, k), deps=[self.workspace, query, k])
        return [Note.from_json(r) for r in rows]

    async def forget(self, key: str) -> bool:
        """Remove the note under `key` (False: there was none)."""
        return bool(await self._step("memory.forget", lambda: self._store.note_delete(self.workspace, key),
                                     deps=[self.workspace, key]))

    async def _put(self, key: str, value: str, pinned: bool) -> list[str]:
        note = Note(workspace=self.workspace, key=key, value=value, pinned=pinned, written_at=self._clock(),
                    **self._writer)
        return await self._store.note_put(note, self._cap)

    async def _recall(self, query: str, k: int) -> list[dict[str, Any]]:
        return [n.to_json() for n in rank(await self._store.note_list(self.workspace), query, k)]

    def tools(self) -> list[Tool]:
        """`remember`, `recall` and `forget` as tools an agent may call (opt in: `tools=[*ctx.memory.tools()]`)."""

        async def remember(key: str, value: str, pinned: bool = False) -> str:
            """Remember a fact for later conversations under a short key (pinned notes are never evicted)."""
            gone = await self._put(key, value, pinned)
            return f"remembered {key!r}" + (f"; evicted {', '.join(gone)}" if gone else "")

        async def recall(query: str, k: int = 5) -> list[dict[str, Any]]:
            """Recall up to k remembered notes that match the query words."""
            return [{"key": n["key"], "value": n["value"]} for n in await self._recall(query, k)]

        async def forget(key: str) -> str:
            """Forget the note under key."""
            return f"forgot {key!r}" if await self._store.note_delete(self.workspace, key) else f"no note {key!r}"

        return [tool(idempotent=True)(remember), tool(idempotent=True)(recall), tool(idempotent=True)(forget)]
