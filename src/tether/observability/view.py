"""`RunView`: what the live view knows about a run, folded from its typed events, and the forecast.

Pure state (no terminal): the progress view renders it, and tests can fold events into it directly.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from tether.contracts.events import (
    AgentEnd,
    AgentStart,
    AgentStream,
    BudgetDraw,
    BudgetFigures,
    BudgetRefused,
    BudgetUpdate,
    Event,
    ModelEnd,
    RunEnd,
    RunStart,
    RunWarning,
    SpawnRefused,
)

DRAW_WINDOW = 6
"""Turns the per-turn rate is averaged over."""
RATE_WINDOW_S = 10.0
"""Seconds of live debits the time-to-exhaustion rate is measured over."""


@dataclass
class AgentRow:
    """One agent as the view shows it; tokens and USD grow while it streams."""

    agent_id: int
    label: str
    depth: int
    parent: int | None
    started: float
    status: str = "working"
    tokens: int = 0
    usd: float = 0.0
    ended: float | None = None
    replayed: bool = False
    note: str | None = None
    """Why it did not settle `ok` (an error kind, a stop reason)."""
    settled_tokens: int = 0
    """Tokens of its provider calls that ended (a reply that did not stream text still counts)."""


@dataclass(frozen=True)
class Refusal:
    """Work the run was refused: a spawn at a containment cap, or an invocation at a budget ceiling."""

    parent: int | None
    """The agent that asked (None: the workflow)."""
    cap: str
    """`agents`, `depth`, `budget` (spawn caps) or `usd` (admission at the USD ceiling)."""
    what: str
    """The refused child's goal, or what admission refused."""


@dataclass(frozen=True)
class Forecast:
    """When the nearest ceiling runs out at the recent draw rate (None where it cannot be told yet)."""

    turns_left: int | None
    seconds_left: float | None
    reached: bool = False

    def text(self) -> str:
        if self.reached:
            return "ceiling reached"
        parts = []
        if self.turns_left is not None:
            parts.append(f"~{self.turns_left} turn{'s' if self.turns_left != 1 else ''} left at this rate")
        if self.seconds_left is not None:
            parts.append(f"{'' if self.seconds_left < 1 else '~'}{_duration(self.seconds_left)} to exhaustion")
        return ", ".join(parts) if parts else "measuring the draw rate"


@dataclass
class RunView:
    """A run's live state: agents, refusals, spend against each ceiling, recent draws, final status."""

    run_id: str = ""
    workflow: str = ""
    status: str = "running"
    started: float | None = None
    ended: float | None = None
    resumed: bool = False
    restored_usd: float = 0.0
    spent_usd: float = 0.0
    ceiling_usd: float | None = None
    spent_tokens: int = 0
    ceiling_tokens: int | None = None
    cost_usd: float | None = None
    agents: dict[int, AgentRow] = field(default_factory=dict)
    refusals: list[Refusal] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    draws: deque[tuple[float, float, int]] = field(default_factory=lambda: deque(maxlen=DRAW_WINDOW))
    samples: deque[tuple[float, float, int]] = field(default_factory=deque)

    def apply(self, event: Event) -> None:
        """Fold one event."""
        if isinstance(event, RunStart):
            self.run_id, self.workflow, self.started = event.run_id, event.workflow, event.ts
            self.resumed, self.restored_usd = event.resumed, event.spent_usd
            self._figures(event)
        elif isinstance(event, RunEnd):
            self.status, self.ended, self.cost_usd = event.status, event.ts, event.cost_usd
            self._figures(event)
        elif isinstance(event, BudgetUpdate):
            self._figures(event)
            self.samples.append((event.ts, event.spent_usd, event.spent_tokens))
            while self.samples and event.ts - self.samples[0][0] > RATE_WINDOW_S:
                self.samples.popleft()
            agent = self.agents.get(event.agent_id or 0)
            if agent is not None and agent.ended is None:
                agent.usd += event.usd
        elif isinstance(event, BudgetDraw):
            if not event.replayed:
                self.draws.append((event.ts, event.usd or 0.0, event.tokens or 0))
        elif isinstance(event, BudgetRefused):
            self._figures(event)
            self.refusals.append(Refusal(event.agent_id, "usd", event.what))
        elif isinstance(event, SpawnRefused):
            self.refusals.append(Refusal(event.agent_id, event.detail or "agents", event.goal))
        elif isinstance(event, RunWarning):
            self.warnings.append(event.message)
        elif isinstance(event, AgentStart | AgentStream | AgentEnd | ModelEnd):
            self._agent(event)

    def _agent(self, event: AgentStart | AgentStream | AgentEnd | ModelEnd) -> None:
        if event.agent_id is None:
            return
        agent = self.agents.get(event.agent_id)
        if agent is None:
            parent = event.parent_agent_id if isinstance(event, AgentStart | AgentEnd) else None
            agent = self.agents[event.agent_id] = AgentRow(
                event.agent_id, event.label or f"agent {event.agent_id}", max(1, event.depth), parent, event.ts,
                replayed=event.replayed,
            )
        if isinstance(event, AgentStream):
            agent.tokens = max(agent.tokens, event.usage.total_tokens)
            agent.usd = max(agent.usd, event.cost_usd)
        elif isinstance(event, ModelEnd):
            if not event.replayed and agent.ended is None:
                agent.settled_tokens += event.usage.total_tokens
                agent.tokens = max(agent.tokens, agent.settled_tokens)
        elif isinstance(event, AgentEnd):
            agent.status, agent.ended = event.status, event.ts
            agent.tokens, agent.usd = event.usage.total_tokens, event.cost_usd  # the journaled figures
            agent.note = event.error.kind if event.error is not None else (
                event.reason if event.status != "ok" else None)

    def _figures(self, event: BudgetFigures) -> None:
        self.spent_usd, self.ceiling_usd = event.spent_usd, event.ceiling_usd
        self.spent_tokens, self.ceiling_tokens = event.spent_tokens, event.ceiling_tokens

    # -- reading -----------------------------------------------------------------------------
    def children(self, parent: int | None) -> list[AgentRow]:
        return [a for a in self.agents.values() if a.parent == parent]

    def ceilings(self) -> list[tuple[str, float, float]]:
        """(unit, spent, ceiling) for every ceiling the run has."""
        out: list[tuple[str, float, float]] = []
        if self.ceiling_usd is not None:
            out.append(("USD", self.spent_usd, self.ceiling_usd))
        if self.ceiling_tokens is not None:
            out.append(("tokens", float(self.spent_tokens), float(self.ceiling_tokens)))
        return out

    def forecast(self, now: float) -> Forecast | None:
        """Turns and time left under the nearest ceiling at the recent rate; None without a ceiling."""
        ceilings = self.ceilings()
        if not ceilings or self.status != "running":
            return None
        if any(spent >= ceiling - 1e-12 for _, spent, ceiling in ceilings):
            return Forecast(None, None, reached=True)
        turns = [left / per for left, per in self._per_turn() if per > 0]
        seconds = [left / rate for left, rate in self._per_second(now) if rate > 0]
        return Forecast(int(min(turns)) if turns else None, min(seconds) if seconds else None)

    def _per_turn(self) -> list[tuple[float, float]]:
        """(left, mean draw per turn) for each ceiling, over the last turns."""
        if not self.draws:
            return []
        n = len(self.draws)
        out = []
        if self.ceiling_usd is not None:
            out.append((self.ceiling_usd - self.spent_usd, sum(d[1] for d in self.draws) / n))
        if self.ceiling_tokens is not None:
            out.append((float(self.ceiling_tokens - self.spent_tokens), sum(d[2] for d in self.draws) / n))
        return out

    def _per_second(self, now: float) -> list[tuple[float, float]]:
        """(left, spend per second) for each ceiling, over the last seconds of live debits."""
        if len(self.samples) < 2:
            return []
        t0, usd0, tok0 = self.samples[0]
        elapsed = max(now, self.samples[-1][0]) - t0
        if elapsed <= 0:
            return []
        out = []
        if self.ceiling_usd is not None:
            out.append((self.ceiling_usd - self.spent_usd, (self.spent_usd - usd0) / elapsed))
        if self.ceiling_tokens is not None:
            out.append((float(self.ceiling_tokens - self.spent_tokens), (self.spent_tokens - tok0) / elapsed))
        return out


def _duration(seconds: float) -> str:
    if seconds < 1:
        return "<1s"
    if seconds < 60:
        return f"{seconds:.0f}s"
    if seconds < 3600:
        return f"{seconds / 60:.0f}m"
    return f"{seconds / 3600:.1f}h"
