"""Scoped forward matching over a loaded journal, plus the closer and abandon folds it needs.

Matching is O(1) per lookup: each (scope, key) keeps its unconsumed candidates (a match always takes
the first unconsumed one, so a match pops it off a list kept in reverse journal order), and entries
this segment appends are never candidates at all. `examined` counts the
candidate entries looked at, so a test can bound the work by counting rather than timing.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from itertools import compress, repeat
from operator import attrgetter, eq, is_not, or_

from tether.contracts.entries import SUPPORTED_HASH_VERSIONS, TWO_PHASE_KINDS, JournalEntry
from tether.journal.scope import is_under

REF_KINDS = frozenset({"resolution", "abandon"})
SUSPENSION_KINDS = frozenset({"external", "approval"})
_DECISION_KINDS = frozenset({"decision", "tree"})
_SEQ, _KIND, _AGENT_ID, _HASH_VERSION = (attrgetter(n) for n in ("seq", "kind", "agent_id", "hash_version"))
_MATCHED_BY = attrgetter("key", "ref", "scope", "ordinal")


@dataclass(slots=True)
class Match:
    """A matched dispatch entry with its first terminal (None when it never settled)."""

    entry: JournalEntry
    terminal: JournalEntry | None
    abandoned: bool


@dataclass
class JournalIndex:
    """An in-memory view of one run's journal for a segment: what is matched, closed and abandoned.

    One pass over the journal builds it, and keeps on the side the few entries the other folds of a
    resume read (spend, calibration, suspensions), so none of them walks the whole journal again.
    """

    entries: list[JournalEntry]
    invalidated: frozenset[int] = frozenset()
    by_seq: dict[int, JournalEntry] = field(default_factory=dict)
    terminal_of: dict[int, JournalEntry] = field(default_factory=dict)
    closer_of: dict[int, JournalEntry] = field(default_factory=dict)
    examined: int = 0
    """Candidate entries the matcher has looked at (a work counter: linear in the journal, never quadratic)."""
    spend_entries: list[JournalEntry] = field(default_factory=list)
    """Agent entries and entries an agent wrote (its draws and dispatch records): all `journal.cost` folds."""
    decision_entries: list[JournalEntry] = field(default_factory=list)
    """Decision and tree entries (dispatch records and turn draws: what `InputCalibration` learns from)."""
    unsupported: JournalEntry | None = None
    """The first entry written with a `hash_version` this tether does not read, if any."""
    _suspensions: list[JournalEntry] = field(default_factory=list)
    _candidates: dict[tuple[str, str], JournalEntry | list[JournalEntry]] = field(default_factory=dict)
    """Per (scope, key), its one unconsumed candidate, or several in reverse journal order."""
    _max_ordinal: dict[tuple[str, str], int] = field(default_factory=dict)
    _abandon_roots: list[tuple[int, str | None]] = field(default_factory=list)

    def __post_init__(self) -> None:
        # This runs over every journal entry on every resume: what can be a C loop over a column is one
        # (seqs, kinds, the side lists, the hash-version check), and the one Python loop left binds
        # everything locally and reads each entry's attributes once.
        entries = self.entries
        seqs = list(map(_SEQ, entries))
        assert None not in seqs
        self.by_seq.update(zip(seqs, entries, strict=True))
        if not set(map(_HASH_VERSION, entries)) <= SUPPORTED_HASH_VERSIONS:
            self.unsupported = next(e for e in entries if e.hash_version not in SUPPORTED_HASH_VERSIONS)
        kinds = list(map(_KIND, entries))
        agents = map(or_, map(eq, kinds, repeat("agent")), map(is_not, map(_AGENT_ID, entries), repeat(None)))
        self.spend_entries.extend(compress(entries, agents))
        self.decision_entries.extend(compress(entries, map(_DECISION_KINDS.__contains__, kinds)))
        self._suspensions.extend(compress(entries, map(SUSPENSION_KINDS.__contains__, kinds)))
        terminal_of, invalidated = self.terminal_of, self.invalidated
        candidates, max_ordinal = self._candidates, self._max_ordinal
        repeated: list[list[JournalEntry]] = []
        for e, seq, kind, (key, ref, scope, ordinal) in zip(
            entries, seqs, kinds, map(_MATCHED_BY, entries), strict=True
        ):
            if key:
                k = (scope, key)
                if ordinal > max_ordinal.get(k, -1):
                    max_ordinal[k] = ordinal
            if kind in REF_KINDS:
                self._add_closer(e)
            elif ref is not None:  # a terminal of a two-phase entry
                if ref not in terminal_of and ref not in invalidated:
                    terminal_of[ref] = e
            elif key and seq not in invalidated:  # unkeyed facts are never matched
                found = candidates.get(k)
                if found is None:
                    candidates[k] = e  # most keys have one candidate: no list for them
                elif isinstance(found, list):
                    found.append(e)
                else:
                    several = [found, e]
                    candidates[k] = several
                    repeated.append(several)
        deque(map(list.reverse, repeated), maxlen=0)  # `match` pops the first from the end

    @classmethod
    def build(cls, entries: Iterable[JournalEntry], invalidate: Iterable[int] = ()) -> JournalIndex:
        return cls(list(entries), frozenset(invalidate))

    # -- building ----------------------------------------------------------------------------
    def add(self, e: JournalEntry) -> None:
        """Record an entry this segment appended (never a matching candidate)."""
        self.entries.append(e)
        seq, key, kind = e.seq, e.key, e.kind
        assert seq is not None
        self.by_seq[seq] = e
        if kind == "agent" or e.agent_id is not None:
            self.spend_entries.append(e)
        if kind == "decision" or kind == "tree":
            self.decision_entries.append(e)
        elif kind in SUSPENSION_KINDS:
            self._suspensions.append(e)
        k = (e.scope, key)
        if key and e.ordinal > self._max_ordinal.get(k, -1):
            self._max_ordinal[k] = e.ordinal
        if kind in REF_KINDS:
            self._add_closer(e)
        elif e.ref is not None and e.ref not in self.terminal_of and e.ref not in self.invalidated:
            self.terminal_of[e.ref] = e

    def _add_closer(self, e: JournalEntry) -> None:
        target = self.by_seq.get(e.ref) if e.ref is not None else None
        if target is None:
            return
        if e.kind == "abandon":
            self._abandon_roots.append((target.seq or 0, self.inner_scope(target)))
        if target.kind in SUSPENSION_KINDS and target.seq not in self.closer_of:
            # First valid closer in journal order wins; later ones are no-ops.
            self.closer_of[target.seq or 0] = e

    # -- queries -------------------------------------------------------------------------------
    @staticmethod
    def inner_scope(entry: JournalEntry) -> str | None:
        """The scope of the work an entry encloses (child workflow, agent), if any."""
        if isinstance(entry.value, dict) and entry.status == "running":
            inner = entry.value.get("inner_scope")
            if isinstance(inner, str):
                return inner
        if entry.kind == "agent" and entry.seq is not None:
            return f"{entry.scope}/agent:{entry.seq}" if entry.scope else f"agent:{entry.seq}"
        return None

    def is_abandoned(self, entry: JournalEntry) -> bool:
        for seq, inner in self._abandon_roots:
            if entry.seq == seq:
                return True
            if inner is not None and is_under(entry.scope, inner):
                return True
        return False

    def scope_abandoned(self, scope: str) -> bool:
        return any(inner is not None and is_under(scope, inner) for _, inner in self._abandon_roots)

    def match(self, scope: str, key: str) -> Match | None:
        """Take the first unconsumed entry with this key in this scope (a miss consumes nothing).

        Each (scope, key) keeps its one candidate, or several in reverse journal order, and a match takes
        it (pops the last):
        candidates are consumed only here, in order, so what is left is exactly the unconsumed ones
        (appended entries are never candidates).
        """
        k = (scope, key)
        found = self._candidates.get(k)
        if found is None:
            return None
        if isinstance(found, list):
            if not found:
                return None
            e = found.pop()
        else:
            e = found
            del self._candidates[k]
        self.examined += 1
        terminal = self.terminal_of.get(e.seq) if e.kind in TWO_PHASE_KINDS else None  # type: ignore[arg-type]
        return Match(e, terminal, bool(self._abandon_roots) and self.is_abandoned(e))

    def next_ordinal(self, scope: str, key: str) -> int:
        """Ordinals continue after the highest one seen for (scope, key)."""
        k = (scope, key)
        n = self._max_ordinal.get(k, -1) + 1
        self._max_ordinal[k] = n
        return n

    def closer(self, seq: int) -> JournalEntry | None:
        return self.closer_of.get(seq)

    def suspensions(self) -> list[JournalEntry]:
        return list(self._suspensions)

    def open_suspensions(self) -> list[JournalEntry]:
        return [e for e in self.suspensions() if e.seq not in self.closer_of]

    def last_settle(self) -> JournalEntry | None:
        for e in reversed(self.entries):
            if e.kind == "decision" and isinstance(e.value, dict) and e.value.get("decision") == "settle":
                return e
        return None
