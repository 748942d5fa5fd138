"""`Replay`: one segment's matching of calls against the journal it loaded, with the replay stats.

Every ctx effect asks `lookup` (or `replayed`, for host steps) before it runs: the one replay
predicate (`journal.disposition`) says replay, re-run, re-dispatch or skip, and a replay-strict (dry)
run stops at the first call that would run live.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tether.contracts.entries import JournalEntry
from tether.contracts.errors import JournalMissError
from tether.engine.outcome import ReplayStats
from tether.journal.disposition import Disposition, disposition
from tether.journal.matching import JournalIndex, Match


class Abandoned(BaseException):
    """The matched call was abandoned: its branch derives `skipped` with zero spend.

    A `BaseException`, like `asyncio.CancelledError`: it unwinds the branch, and a workflow's `except
    Exception:` must not swallow it (the engine catches it where the branch ends)."""

    def __init__(self, scope: str, seq: int | None) -> None:
        super().__init__(f"abandoned work at scope {scope!r} (seq {seq})")
        self.scope = scope
        self.seq = seq


class PreviewStopped(JournalMissError):
    """A fork preview reached a host step the journal does not hold: it never runs one, so it stops there."""

    code = "preview-stopped"


@dataclass(slots=True)
class Counts:
    """The replay stats as the segment counts them (a plain record: one increment per call); the outcome's
    public `ReplayStats` is built from it once (`stats()`)."""

    hits: int = 0
    misses: int = 0
    reruns: int = 0
    skipped: int = 0


@dataclass(slots=True)
class Lookup:
    """The result of matching one call: what to do and with which journaled entries."""

    action: Disposition | None  # None = a miss
    match: Match | None

    @property
    def running(self) -> JournalEntry | None:
        return self.match.entry if self.match and self.action == "redispatch" else None




@dataclass(eq=False)
class Replay:
    """Matches one segment's calls; counts hits, misses, re-runs and skips in `counts`."""

    run_id: str
    index: JournalIndex
    dry_run: bool = False
    counts: Counts = field(default_factory=Counts)
    counters: dict[tuple[str, str], int] = field(default_factory=dict)
    """Per (scope, name): how many sites of that name this segment has entered (parallel, child workflows)."""
    money_reset_seq: int = 0
    """The seq of the last raise or orphan settlement (or past a fork's copied prefix): refusals and ceiling
    stops journaled before it are decided again; later ones are read back."""

    def lookup(self, scope: str, key: str) -> Lookup:
        """Match a call and decide with the one replay predicate; update the replay stats."""
        m = self.index.match(scope, key)
        if m is None:
            self.counts.misses += 1
            return Lookup(None, None)
        m = self._continued(m)
        return self._decided(scope, m, disposition(m.entry, m.terminal, abandoned=m.abandoned,
                                                   money_reset_seq=self.money_reset_seq))

    def _continued(self, m: Match) -> Match:
        """The last invocation of the chain that continues `m`'s agent (each ran on after a raise from where the
        one before stopped): that one is the call's journaled state, the ones before it are history."""
        index = self.index
        nxt = index.successor(m.entry.seq)
        while nxt is not None and index.withdraw(nxt):
            m = Match(nxt, index.terminal_of.get(nxt.seq or 0), m.abandoned or index.is_abandoned(nxt))
            nxt = index.successor(nxt.seq)
        return m

    def replayed(self, scope: str, key: str) -> JournalEntry | Lookup:
        """`lookup`, but a call that replays a terminal gets that terminal itself (no `Match`, no `Lookup`:
        this runs once per replayed host step); any other outcome is the `Lookup` `lookup` returns."""
        taken = self.index.take_settled(scope, key)
        if taken is None:
            self.counts.misses += 1
            return Lookup(None, None)
        if not isinstance(taken, tuple):  # a settled call: `disposition` replays it
            self.counts.hits += 1
            return taken
        entry, terminal, abandoned = taken
        action = disposition(entry, terminal, abandoned=abandoned, money_reset_seq=self.money_reset_seq)
        if action == "replay" and terminal is not None:
            self.counts.hits += 1
            return terminal
        return self._decided(scope, Match(entry, terminal, abandoned), action)

    def _decided(self, scope: str, m: Match, action: Disposition) -> Lookup:
        if action == "replay":
            self.counts.hits += 1
        elif action == "skip":
            self.counts.skipped += 1
            raise Abandoned(scope, m.entry.seq)
        else:
            self.counts.reruns += 1
        return Lookup(action, m)

    def stats(self, orphaned: list[str] | None = None) -> ReplayStats:
        """The public replay report of this segment (with the effects a crash left unknown)."""
        c = self.counts
        return ReplayStats(hits=c.hits, misses=c.misses, reruns=c.reruns, skipped=c.skipped, orphaned=orphaned or [])

    def skipped(self, scope: str, seq: int | None) -> Abandoned:
        """Count an abandoned call found some other way (a suspension closed by `abandon`)."""
        self.counts.skipped += 1
        return Abandoned(scope, seq)

    def require_live(self, what: str, scope: str) -> None:
        """Replay-strict runs stop at the first would-be-live call."""
        if self.dry_run:
            raise JournalMissError(
                f"dry run of {self.run_id!r}: {what} at scope {scope!r} is not in the journal "
                f"(it would run live). The workflow changed since the journal was written.",
                scope=scope,
            )

    def next_counter(self, scope: str, name: str) -> int:
        k = (scope, name)
        n = self.counters.get(k, 0)
        self.counters[k] = n + 1
        return n
