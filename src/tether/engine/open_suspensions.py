"""What an open suspension accepts, checked before a resolution is journaled (the CLI's and the server's rule).

A tool approval takes exactly `allow` or `deny`, no aliases: the engine reads anything but an allow as
a deny, so a typo (`alow`) would deny the tool without a word. An `await_external` whose schema is an
enum (or a const) takes those values; its schema is checked by the engine itself.

The CLI and the server both import this module (it needs nothing but the journal), so both surfaces
refuse the same values with the same words, and neither imports the other.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from tether.contracts.entries import JournalEntry
from tether.contracts.errors import ConfigError, InvalidResolutionError
from tether.engine.suspensions import suspension_key
from tether.journal.matching import JournalIndex

APPROVAL_VALUES: tuple[str, ...] = ("allow", "deny")
"""The only values that resolve a tool approval."""
HINT_VALUES = 6
"""Up to this many accepted values are spelled out in a printed `tether resolve` line."""


class SuspensionNotFoundError(ConfigError):
    """The key names no suspension of the run; `data["open"]` lists the keys that are open."""

    code = "suspension-not-found"


@dataclass(frozen=True)
class OpenSuspension:
    """A suspension waiting for a value: its key, its kind, and the values it accepts (None: any)."""

    key: str
    kind: Literal["external", "approval"]
    entry: JournalEntry
    accepts: tuple[Any, ...] | None


def accepted_values(entry: JournalEntry) -> tuple[Any, ...] | None:
    """`allow`/`deny` for an approval, a declared enum's (or const's) values, else None (any the schema takes)."""
    if entry.kind == "approval":
        return APPROVAL_VALUES
    schema = entry.value.get("schema") if isinstance(entry.value, dict) else None
    if not isinstance(schema, dict):
        return None
    if "const" in schema:
        return (schema["const"],)
    enum = schema.get("enum")
    return tuple(enum) if isinstance(enum, list) and enum else None


def open_suspensions(entries: Sequence[JournalEntry]) -> list[OpenSuspension]:
    """The run's open suspensions, in journal order."""
    out: list[OpenSuspension] = []
    for e in JournalIndex.build(entries).open_suspensions():
        key = suspension_key(e)
        if key is not None and e.seq is not None:
            out.append(OpenSuspension(key, "approval" if e.kind == "approval" else "external", e, accepted_values(e)))
    return out


def was_closed(entries: Sequence[JournalEntry], key: str) -> bool:
    """`key` named a suspension of the run that is closed now (the first closer won)."""
    return any(suspension_key(e) == key for e in JournalIndex.build(entries).suspensions())


def not_found(run_id: str, key: str, open_keys: Sequence[str]) -> SuspensionNotFoundError:
    listed = ", ".join(repr(k) for k in open_keys) if open_keys else "none (nothing is waiting)"
    return SuspensionNotFoundError(
        f"run {run_id!r} has no suspension {key!r}; open keys: {listed}. Check the key (the run's pending "
        f"lines print each one); nothing was written",
        run_id=run_id, key=key, open=list(open_keys),
    )


def find_open(entries: Sequence[JournalEntry], run_id: str, key: str) -> OpenSuspension | None:
    """The open suspension `key`; None when it was closed already; `SuspensionNotFoundError` naming the open
    keys when the run never had it (a mistyped key)."""
    found = open_suspensions(entries)
    for s in found:
        if s.key == key:
            return s
    if was_closed(entries, key):
        return None
    raise not_found(run_id, key, [s.key for s in found])


def check_value(suspension: OpenSuspension, value: Any, run_id: str) -> None:
    """Refuse a value an approval does not accept (`InvalidResolutionError`: nothing is journaled)."""
    if suspension.kind != "approval" or (isinstance(value, str) and value in APPROVAL_VALUES):
        return
    raise InvalidResolutionError(
        f"invalid value for approval {suspension.key!r} of run {run_id!r}: {_shown(value)} is neither "
        f"'allow' nor 'deny' (exactly those words; anything else is refused rather than read as a deny). "
        f"Nothing was journaled; resolve it again with allow or deny.",
        run_id=run_id, key=suspension.key, accepted=list(APPROVAL_VALUES),
        issues=[{"loc": [], "msg": "must be 'allow' or 'deny'", "type": "enum"}],
    )


def value_hint(suspension: OpenSuspension) -> str:
    """What to put for VALUE in a printed `tether resolve` line: `allow|deny`, an enum's words, else `VALUE`."""
    accepts = suspension.accepts
    if not accepts or len(accepts) > HINT_VALUES:
        return "VALUE"
    return "|".join(shlex.quote(_as_argument(v)) for v in accepts)


def value_hints(entries: Sequence[JournalEntry]) -> dict[str, str]:
    """`value_hint` of each open suspension, by key."""
    return {s.key: value_hint(s) for s in open_suspensions(entries)}


def _as_argument(value: Any) -> str:
    """The command-line text `tether resolve` reads back as `value` (plain words stay plain)."""
    if isinstance(value, str):
        try:
            json.loads(value)
        except json.JSONDecodeError:
            return value
    return json.dumps(value)


def _shown(value: Any) -> str:
    text = json.dumps(value, default=str)
    return text if len(text) <= 60 else text[:60] + "…"
