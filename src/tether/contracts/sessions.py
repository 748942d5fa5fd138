"""Sessions and workspace memory as stored data, and the store seam that holds them.

A session is a tree of turns (each turn one run) with a head that moves by compare-and-swap on the
session's `version`; a note is one durable fact of a workspace. `tether.engine.sessions` and
`tether.engine.memory` are the services over this seam; every shipped store implements it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Protocol, TypedDict, runtime_checkable

from tether.contracts.errors import TetherError

DEFAULT_NOTE_CAP = 1_000
"""Notes a workspace keeps; past it the least recently written unpinned notes are evicted."""


class TurnOf(TypedDict):
    """What a turn's genesis says of it (the `session` run option, set by `Session.send`)."""

    session: str
    turn: int
    parent: str | None
    """The parent turn's run id (None: the session's first turn)."""
    workspace: str
    prompt_sha256: str
    """The sha256 of the user's message of this turn. The text is the run's args (which archive and redact may
    remove); later turns' history shows it when it still matches this digest."""


@dataclass(frozen=True, slots=True)
class SessionRecord:
    """A session as stored: its head turn (a run id), the USD ceiling across its turns, and a CAS version."""

    session_id: str
    workspace: str = "default"
    head: str | None = None
    budget_usd: float | None = None
    version: int = 0
    """Grows by one on every change; `session_swap` lands only on the version it read."""
    created_at: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, value: dict[str, Any]) -> SessionRecord:
        return cls(**value)


@dataclass(frozen=True, slots=True)
class TurnRecord:
    """One turn of a session: its run, its parent turn, its place, and the USD the session granted it."""

    session_id: str
    index: int
    """1 for the first turn, then one more than the number of turns the session held when it was claimed."""
    run_id: str
    parent: str | None
    grant_usd: float | None = None
    """The most the turn's run may spend (its own ceiling, at most what the session had left); None: no ceiling."""
    session_capped: bool = False
    """The grant is what the session had left (below the turn's own ceiling): a stop at it is `SESSION_CEILING`."""
    created_at: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, value: dict[str, Any]) -> TurnRecord:
        return cls(**value)


@dataclass(frozen=True, slots=True)
class Note:
    """A durable note of a workspace, naming the run (and session turn) that wrote it."""

    workspace: str
    key: str
    value: str
    pinned: bool = False
    run_id: str | None = None
    session: str | None = None
    turn: int | None = None
    """The session and turn (its index) that wrote it, when written inside a session."""
    written_at: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, value: dict[str, Any]) -> Note:
        return cls(**value)


def evicted(notes: list[Note], cap: int) -> list[Note]:
    """The notes to evict so at most `cap` remain: least recently written first, pinned never (the one rule)."""
    over = len(notes) - cap
    if over <= 0:
        return []
    unpinned = sorted((n for n in notes if not n.pinned), key=lambda n: (n.written_at, n.key))
    return unpinned[:over]


@runtime_checkable
class SessionStore(Protocol):
    """A store that holds sessions (their turn trees and heads) and workspace notes."""

    async def session_create(self, session: SessionRecord) -> SessionRecord:
        """Store `session` unless one with its id exists; return the stored one either way."""

    async def session_get(self, session_id: str) -> SessionRecord | None: ...

    async def session_list(self, limit: int = 100) -> list[SessionRecord]:
        """Sessions newest first."""

    async def session_swap(self, session: SessionRecord, expected_version: int, turn: TurnRecord | None = None) -> bool:
        """Atomically: if the stored version is `expected_version`, store `session` (its version one more) and
        add `turn`; else change nothing and return False."""

    async def session_turns(self, session_id: str) -> list[TurnRecord]:
        """Every turn of the session (all lines), by index."""

    async def note_put(self, note: Note, cap: int = DEFAULT_NOTE_CAP) -> list[str]:
        """Add or replace the note of (workspace, key), then evict (`evicted`); the keys evicted."""

    async def note_list(self, workspace: str) -> list[Note]:
        """Every note of `workspace`, least recently written first."""

    async def note_delete(self, workspace: str, key: str) -> bool: ...


class SessionConflictError(TetherError):
    """Another send moved the session's head first (or its head turn has not settled); nothing ran."""

    code = "session-conflict"
    retryable = True


class SessionNotFoundError(TetherError):
    """No such session (or turn of it) in this store."""

    code = "session-not-found"
