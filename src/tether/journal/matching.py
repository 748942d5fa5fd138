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
from operator import attrgetter, eq, gt, is_not, or_, truth

from tether.contracts.entries import SUPPORTED_HASH_VERSIONS, TWO_PHASE_KINDS, JournalEntry
from tether.journal.scope import is_under

REF_KINDS = frozenset({"resolution", "abandon"})
SUSPENSION_KINDS = frozenset({"external", "approval"})
_DECISION_KINDS = frozenset({"decision", "tree"})
_SEQ, _KIND, _AGENT_ID, _HASH_VERSION, _REF, _KEY = (
    attrgetter(n) for n in ("seq", "kind", "agent_id", "hash_version", "ref", "key")
)
_SCOPE = attrgetter("scope")
Taken = tuple[JournalEntry, JournalEntry | None, bool]
"""A taken match: the dispatch entry, its first terminal (None when it never settled), whether it is abandoned."""
CONTINUES = "continues"
"""The member of an agent's `running` value naming the ceiling-stopped invocation it continues after a raise."""


def continued_seq(entry: JournalEntry) -> int | None:
    """The seq of the invocation `entry` continues (a ceiling-stopped agent run on after a raise), if any."""
    if entry.kind != "agent" or entry.ref is not None or not isinstance(entry.value, dict):
        return None
    seq = entry.value.get(CONTINUES)
    return seq if isinstance(seq, int) and not isinstance(seq, bool) else None


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
    _candidates: dict[str, dict[str, JournalEntry | list[JournalEntry]]] = field(default_factory=dict)
    """Per scope, per key: its one unconsumed candidate, or several in reverse journal order (a scope none is
    left in is dropped)."""
    _by_seq: dict[int, JournalEntry] | None = None
    _head: JournalEntry | None = None
    _max_ordinal: dict[tuple[str, str], int] | None = None
    """Per (scope, key), the highest ordinal journaled: folded from `entries` on first use."""
    _abandon_roots: list[tuple[int, str | None]] = field(default_factory=list)
    _successors: dict[int, JournalEntry] | None = None
    """Per agent seq, the loaded invocation that continues it: folded from `spend_entries` on first use."""

    def __post_init__(self) -> None:
        # This runs over every journal entry on every resume, so each fold is a C loop over a column
        # (seqs, kinds, refs, keys; the side lists; the hash-version check; the first terminal of each
        # dispatch; the candidates, when they share one scope) and only the rare entries (closers, keys
        # with several candidates, several scopes) take a Python loop. A fold whose kinds the journal does
        # not hold is skipped, and what a resume that only replays never reads (`by_seq`, ordinals) is
        # folded on first use.
        entries = self.entries
        if entries:
            top = max(map(_SEQ, entries))  # (a seq left None among numbered ones fails here: entries are numbered)
            assert top is not None
            last = entries[-1]
            self._head = last if last.seq == top else next(e for e in entries if e.seq == top)
        if not set(map(_HASH_VERSION, entries)) <= SUPPORTED_HASH_VERSIONS:
            self.unsupported = next(e for e in entries if e.hash_version not in SUPPORTED_HASH_VERSIONS)
        kinds = list(map(_KIND, entries))
        present = set(kinds)
        if "agent" in present or set(map(_AGENT_ID, entries)) != {None}:
            agents = map(or_, map(eq, kinds, repeat("agent")), map(is_not, map(_AGENT_ID, entries), repeat(None)))
            self.spend_entries.extend(compress(entries, agents))
        if present & _DECISION_KINDS:
            self.decision_entries.extend(compress(entries, map(_DECISION_KINDS.__contains__, kinds)))
        if present & SUSPENSION_KINDS:
            self._suspensions.extend(compress(entries, map(SUSPENSION_KINDS.__contains__, kinds)))
        refs = list(map(_REF, entries))
        has_ref = list(map(is_not, refs, repeat(None)))
        keyed = list(map(truth, map(_KEY, entries)))
        if present & REF_KINDS:
            closing = list(map(REF_KINDS.__contains__, kinds))
            for e in compress(entries, closing):
                self._add_closer(e)
            has_ref = list(map(gt, has_ref, closing))  # a terminal: has a ref and is not a closer
            keyed = list(map(gt, keyed, closing))
        # -- the first terminal of each dispatch (a terminal of an invalidated one is none) ----------
        first = dict(zip(reversed(list(compress(refs, has_ref))), reversed(list(compress(entries, has_ref))),
                         strict=True))  # the last one set: the first
        if self.invalidated:
            deque(map(first.pop, self.invalidated, repeat(None)), maxlen=0)
        if self.terminal_of:
            first.update(self.terminal_of)  # ones given already win, as they would in journal order
        self.terminal_of = first
        # -- candidates: keyed dispatches and facts, never invalidated ones (unkeyed facts never match) --
        candidate = map(gt, keyed, has_ref)  # keyed and not a terminal
        if self.invalidated:
            candidate = map(gt, candidate, map(self.invalidated.__contains__, map(_SEQ, entries)))
        found = list(compress(entries, candidate))
        candidates = self._candidates
        if not candidates and found:
            scopes = set(map(_SCOPE, found))
            if len(scopes) == 1:
                keys = list(map(_KEY, found))
                one = dict(zip(keys, found, strict=True))
                if len(one) == len(found):
                    candidates[scopes.pop()] = one
                    return  # one scope, one candidate per key: the journal of most runs
        repeated: list[list[JournalEntry]] = []
        for e in found:
            in_scope = candidates.get(e.scope)
            if in_scope is None:
                in_scope = candidates[e.scope] = {}
            had = in_scope.get(e.key)
            if had is None:
                in_scope[e.key] = e  # most keys have one candidate: no list for them
            elif isinstance(had, list):
                had.append(e)
            else:
                several = [had, e]
                in_scope[e.key] = several
                repeated.append(several)
        deque(map(list.reverse, repeated), maxlen=0)  # `match` pops the first from the end

    @property
    def by_seq(self) -> dict[int, JournalEntry]:
        """Every entry by its seq (folded on first use: a resume that only replays reads the head alone)."""
        found = self._by_seq
        if found is None:
            found = self._by_seq = dict(zip(map(_SEQ, self.entries), self.entries, strict=True))
        return found

    @property
    def head(self) -> JournalEntry | None:
        """The entry with the highest seq (None for an empty journal)."""
        return self._head

    @classmethod
    def build(cls, entries: Iterable[JournalEntry], invalidate: Iterable[int] = ()) -> JournalIndex:
        return cls(list(entries), frozenset(invalidate))

    # -- building ----------------------------------------------------------------------------
    def add(self, e: JournalEntry) -> None:
        """Record an entry this segment appended (never a matching candidate)."""
        self.entries.append(e)
        seq, key, kind = e.seq, e.key, e.kind
        assert seq is not None
        if self._by_seq is not None:
            self._by_seq[seq] = e
        if self._head is None or seq > (self._head.seq or 0):
            self._head = e
        if kind == "agent" or e.agent_id is not None:
            self.spend_entries.append(e)
        if kind == "decision" or kind == "tree":
            self.decision_entries.append(e)
        elif kind in SUSPENSION_KINDS:
            self._suspensions.append(e)
        ordinals = self._max_ordinal
        if key and ordinals is not None:  # (not folded yet: the fold will read this entry too)
            k = (e.scope, key)
            if e.ordinal > ordinals.get(k, -1):
                ordinals[k] = e.ordinal
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

    def replaying(self) -> bool:
        """Whether any loaded entry is left to match (False: every lookup misses, so its key need not be made)."""
        return bool(self._candidates)

    def match(self, scope: str, key: str) -> Match | None:
        """Take the first unconsumed entry with this key in this scope (a miss consumes nothing).

        Each (scope, key) keeps its one candidate, or several in reverse journal order, and a match takes
        it (pops the last):
        candidates are consumed only here, in order, so what is left is exactly the unconsumed ones
        (appended entries are never candidates).
        """
        taken = self.take(scope, key)
        return None if taken is None else Match(*taken)

    def _pop(self, scope: str, key: str) -> JournalEntry | None:
        """Take the first unconsumed candidate of (scope, key) out of the candidates, if any."""
        in_scope = self._candidates.get(scope)
        if in_scope is None:
            return None
        found = in_scope.pop(key, None)  # (one dict operation for the single candidate, the common case)
        if found is None:
            return None
        if isinstance(found, list):
            in_scope[key] = found  # several: the list stays, and gives up its first unconsumed one
            if not found:
                return None
            e = found.pop()
        else:
            e = found
            if not in_scope:
                del self._candidates[scope]
        self.examined += 1
        return e

    def take(self, scope: str, key: str) -> Taken | None:
        """`match`, as the (entry, terminal, abandoned) it would hold: for a caller that needs no `Match`."""
        e = self._pop(scope, key)
        if e is None:
            return None
        terminal = self.terminal_of.get(e.seq) if e.kind in TWO_PHASE_KINDS else None  # type: ignore[arg-type]
        return e, terminal, bool(self._abandon_roots) and self.is_abandoned(e)

    def take_settled(self, scope: str, key: str) -> JournalEntry | Taken | None:
        """`take`, but a match whose call settled (a running dispatch, its first terminal `ok`, not abandoned: what
        `disposition` replays) comes back as that terminal alone: the one lookup of a replayed host step."""
        e = self._pop(scope, key)
        if e is None:
            return None
        if e.kind in TWO_PHASE_KINDS:
            terminal = self.terminal_of.get(e.seq)  # type: ignore[arg-type]
            if terminal is not None and terminal.status == "ok" and e.status == "running" and not (
                    self._abandon_roots and self.is_abandoned(e)):
                return terminal
        else:
            terminal = None
        return e, terminal, bool(self._abandon_roots) and self.is_abandoned(e)

    def successor(self, seq: int | None) -> JournalEntry | None:
        """The loaded invocation that continues agent `seq` (it ran on after a raise), if any."""
        found = self._successors
        if found is None:
            found = self._successors = {}
            for e in self.spend_entries:
                before = continued_seq(e)
                if before is not None:
                    found.setdefault(before, e)
        return found.get(seq) if seq is not None else None

    def withdraw(self, entry: JournalEntry) -> bool:
        """Take `entry` itself out of the unconsumed candidates (a continuation, matched through the invocation
        it continues); False when it is not one."""
        in_scope = self._candidates.get(entry.scope)
        if in_scope is None:
            return False
        found = in_scope.get(entry.key)
        if found is entry:
            del in_scope[entry.key]
            if not in_scope:
                del self._candidates[entry.scope]
            return True
        if isinstance(found, list):
            for i, e in enumerate(found):
                if e is entry:
                    del found[i]
                    return True
        return False

    def unconsumed(self) -> list[JournalEntry]:
        """The loaded candidates no lookup has taken yet, in journal order (what the code did not reach)."""
        left: list[JournalEntry] = []
        for in_scope in self._candidates.values():
            for found in in_scope.values():
                left.extend(found if isinstance(found, list) else (found,))
        return sorted(left, key=_SEQ)

    def next_ordinal(self, scope: str, key: str) -> int:
        """Ordinals continue after the highest one seen for (scope, key)."""
        ordinals = self._max_ordinal
        if ordinals is None:
            ordinals = self._max_ordinal = {}
            for e in self.entries:
                if e.key:
                    seen = (e.scope, e.key)
                    if e.ordinal > ordinals.get(seen, -1):
                        ordinals[seen] = e.ordinal
        k = (scope, key)
        n = ordinals.get(k, -1) + 1
        ordinals[k] = n
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
