"""The agent tree of a run: containment caps, per-depth queues, the shared token ceiling, the audit."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, Literal

from tether.budget.accounts import Account, Hold
from tether.contracts.entries import JournalEntry
from tether.contracts.errors import AdmissionRejectedError, BudgetExhaustedError, TetherError
from tether.contracts.events import AgentEvent, BudgetDraw
from tether.contracts.stops import StopReason
from tether.contracts.usage import Usage
from tether.engine.events import EventStream
from tether.engine.journal_writer import JournalWriter
from tether.engine.options import Containment

__all__ = ["CapLabel", "Containment", "Refusal", "Tree", "draw_row", "refusal_error", "tokens_from_terminals"]

CapLabel = Literal["agents", "depth", "budget"]


class Refusal(Exception):
    """A spawn the containment boundary refused, with its cap label."""

    def __init__(self, label: CapLabel, reason: str) -> None:
        super().__init__(reason)
        self.label = label
        self.reason = reason


def refusal_error(refusal: Refusal) -> TetherError:
    """A refusal as the typed error `ctx.agent` raises: money-like caps exhaust, the others reject."""
    message = f"spawn refused ({refusal.label}): {refusal.reason}"
    if refusal.label == "budget":
        return BudgetExhaustedError(message, label=refusal.label, reason=StopReason.TOKEN_CEILING,
                                    detail=refusal.reason)
    return AdmissionRejectedError(message, label=refusal.label, detail=refusal.reason)


class Tree:
    """Live tree state of one segment, restored from the journal (agents, tokens) at its start."""

    def __init__(
        self, journal: JournalWriter, events: EventStream, root: Account, clock: Callable[[], float],
        containment: Containment | None, concurrency: int,
    ) -> None:
        self.journal = journal
        self.events = events
        self.root = root
        self.clock = clock
        self.containment = containment
        per_level = concurrency if containment is None else min(concurrency, containment.max_concurrent)
        self.per_level = per_level
        self._slots: dict[int, asyncio.Semaphore] = {}
        spend_entries = journal.index.spend_entries
        self.agents = sum(1 for e in spend_entries if e.kind == "agent" and e.status == "running")
        ceiling = None if containment is None else containment.max_tokens
        self.tokens = Account(None if ceiling is None else float(ceiling), name="tree tokens",
                              stop_reason=StopReason.TOKEN_CEILING)
        self.tokens.restore(float(tokens_from_terminals(spend_entries)))
        self.turn_of: dict[int, int] = {}
        self.working: dict[int, int] = {}
        self.peak: dict[int, int] = {}

    def slots(self, depth: int) -> asyncio.Semaphore:
        """The FIFO queue of one depth level: waits only run downward, so parents never deadlock."""
        if depth not in self._slots:
            self._slots[depth] = asyncio.Semaphore(self.per_level)
        return self._slots[depth]

    def check(self, depth: int) -> None:
        """Refuse past the agent or depth cap or with no tokens left; an admitted agent is counted."""
        c = self.containment
        if c is not None:
            if self.agents >= c.max_agents:
                raise Refusal("agents", f"agent cap reached ({c.max_agents} agents)")
            if depth > c.max_depth:
                raise Refusal("depth", f"depth cap reached (max depth {c.max_depth})")
            if self.tokens.at_ceiling() or self.tokens.signal.aborted:
                raise Refusal("budget", f"tree token ceiling reached ({c.max_tokens} tokens)")
        self.agents += 1

    def hold(self, est_tokens: int) -> Hold | None:
        """Hold min(the invocation's token estimate, what the tree has left) until it settles."""
        room = self.tokens.room()
        if room is None:
            return None
        return self.tokens.hold(min(float(est_tokens), room))

    def started(self, depth: int) -> None:
        self.working[depth] = self.working.get(depth, 0) + 1
        self.peak[depth] = max(self.peak.get(depth, 0), self.working[depth])

    def stopped(self, depth: int) -> None:
        self.working[depth] -= 1

    def remaining_tokens(self) -> int | None:
        if self.tokens.ceiling is None:
            return None
        return max(0, int(self.tokens.ceiling - self.tokens.spent))

    def event(self, scope: str = "", key: str = "", **fields: object) -> JournalEntry:
        """A `tree` fact for the audit (journaled, folded by `engine.agent_events`)."""
        ev = AgentEvent.model_validate(fields)
        return JournalEntry(kind="tree", scope=scope, key=key, label=ev.kind, value=ev.model_dump(exclude_none=True),
                            started_at=self.clock())

    def draw(
        self, agent_id: int | None, step: int, tokens: int, costs: dict[str, float], calls: tuple[int, int],
        input_overhead: dict[str, int] | None = None, usage: Usage | None = None, *, settle: bool = False,
    ) -> bool:
        """Journal one `budget_draw` (True when one was written): what a model turn drew and what the tree
        has left after it.

        The envelope carries the turn's USD per model and the dispatches it settles (`from_call` ..
        `through`), so the cost fold can tell a crashed invocation's paid turns from its cut-off ones, and the input
        overhead the run has learned so far (`budget.calibration`), so a resume keeps it, and the turn's usage (so
        an agent parked on an approval, with no terminal yet, counts its tokens in every view). It is staged:
        durable with the next append (the next dispatch record, the terminal) or checkpoint; a crash
        before that charges the turn at its dispatch record's worst case instead. `settle` writes it even when
        nothing was drawn: a failed attempt's dispatch is then settled at 0 (its hold may be reused).
        """
        usd = sum(costs.values())
        if agent_id is None or (not tokens and not usd and not settle):
            return False
        row = draw_row(agent_id, step, tokens, self.remaining_tokens(), usd, self.root.remaining())
        # The row's fields, then the envelope's extras (in this order: the stored bytes are as before).
        self.journal.stage(JournalEntry(
            kind="tree", label="budget_draw", value=row,
            started_at=self.clock(), agent_id=agent_id, costs=costs or None, from_call=calls[0],
            through=calls[1], input_overhead=input_overhead or None,
            usage=None if usage is None or usage.is_empty() else usage,
        ))
        self.events.emit(BudgetDraw(
            agent_id=agent_id, step=step, tokens=tokens, remaining=row.get("remaining"), usd=row["usd"],
            remaining_usd=row.get("remaining_usd"),
        ))
        return True


def draw_row(
    agent_id: int, step: int, tokens: int, remaining: int | None, usd: float, remaining_usd: float | None
) -> dict[str, Any]:
    """A `budget_draw` `AgentEvent` as its journaled dict (`model_dump(exclude_none=True)`: the same keys in
    the same order), built directly: one is written per model turn."""
    row: dict[str, Any] = {"agent_id": agent_id, "step": step, "kind": "budget_draw", "tokens": tokens}
    if remaining is not None:
        row["remaining"] = remaining
    row["usd"] = round(float(usd), 10)
    if remaining_usd is not None:
        row["remaining_usd"] = float(remaining_usd)
    return row


def tokens_from_terminals(entries: list[JournalEntry]) -> int:
    """Tree tokens drawn so far, folded from terminal entries only (like USD spend)."""
    return sum(e.usage.input_tokens + e.usage.output_tokens for e in entries
               if e.kind == "agent" and e.ref is not None and e.usage is not None)
