"""One live drive of a run: its journal writer, replay lookup and suspensions, its money and its tree."""

from __future__ import annotations

import logging
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from typing import Any

from tether.budget.accounts import Account
from tether.budget.brakes import SpendRate
from tether.budget.calibration import InputCalibration
from tether.budget.exposure import ExposureGate
from tether.contracts.errors import BudgetExhaustedError, TetherError
from tether.contracts.events import BudgetUpdate, Figures, RunWarning
from tether.contracts.signal import Signal
from tether.contracts.stops import StopReason
from tether.engine.events import EventStream
from tether.engine.frame import CURRENT_FRAME
from tether.engine.journal_writer import JournalWriter
from tether.engine.outcome import DroppedBranch
from tether.engine.replay import Replay
from tether.engine.services import RunServices
from tether.engine.suspensions import Suspensions
from tether.engine.tool_runner import ToolCalls
from tether.engine.tree import Tree
from tether.journal.matching import JournalIndex


@dataclass(eq=False)
class Segment:
    """One segment of a run. Everything durable goes through `journal`; matching through `replay`;
    parked branches through `waits`; `services` is all it uses of the engine."""

    run_id: str
    workflow: str
    services: RunServices
    index: JournalIndex
    events: EventStream
    journal: JournalWriter
    replay: Replay
    waits: Suspensions
    tree: Tree
    tools: ToolCalls
    root: Account
    cancel: Signal
    strict_pricing: bool = False
    allow_unpriced: bool = False
    exposure: ExposureGate | None = None
    hard_ceiling: bool = False
    """`overshoot="hard"`: every dispatch holds its worst case on the ceiling until it settles."""
    max_identical_tool_calls: int | None = None
    max_repeated_spawns: int | None = None
    spend_rate: SpendRate | None = None
    """The runaway brakes the run's options turned on (docs/budgets.md, *Runaway brakes*); None: off."""
    spawn_brakes: dict[int, dict[str, Any]] = field(default_factory=dict)
    """Orchestrators the repeated-spawn brake stopped (by agent id, with its evidence): their next turn stops."""
    dropped: list[DroppedBranch] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    handed_back: TetherError | None = None
    """Set by `hand_back`: the segment stops like a cancel but does not settle, and its lease is released."""
    resources: AsyncExitStack = field(default_factory=AsyncExitStack)
    """What the segment opened on first use (MCP servers); the runner closes it when the segment ends."""
    next_agent_id: int = field(init=False)
    calibration: InputCalibration = field(init=False)
    """Input tokens each model bills beyond the estimate, learned by this run (carried by its dispatch records)."""
    _warned: set[str] = field(default_factory=set)

    def __post_init__(self) -> None:
        # From the index's side lists (agents' entries, decisions), not another pass over the journal.
        ids = [e.agent_id for e in self.index.spend_entries if e.agent_id is not None]
        self.next_agent_id = max(ids, default=0) + 1
        self.calibration = InputCalibration.from_journal(self.index.decision_entries)

    @property
    def dry_run(self) -> bool:
        return self.journal.dry_run

    def hand_back(self, error: TetherError) -> None:
        """Stop the segment without settling the run (a worker shutting down): in-flight calls are cut and
        journal their terminals, then the lease is released so another driver resumes at once."""
        if self.handed_back is None:
            self.handed_back = error
            self.cancel.abort(error.message)

    def warn(self, key: str, message: str) -> None:
        """A warning once per `key`: on the outcome, as an event and on the `tether` logger."""
        if key in self._warned:
            return
        self._warned.add(key)
        self.warnings.append(message)
        logging.getLogger("tether").warning("run %s: %s", self.run_id, message)
        self.events.emit(RunWarning(message=message))

    def warn_unpriced(self, model: str) -> None:
        self.warn(
            f"unpriced:{model}",
            f"model {model!r} has no price row; allow_unpriced=True lets it run under the USD ceiling, "
            f"and its spend is not counted against it (its usage is itemized under cost.unpriced).",
        )

    def budget_update(self, model: str, usd: float) -> None:
        """Telemetry for every live debit: what was drawn, by which agent, and what the run has left."""
        if self.spend_rate is not None:
            self.spend_rate.add(usd)
        frame = CURRENT_FRAME.get(None)
        agent_id = frame.agent_id if frame is not None else None
        self.events.emit(BudgetUpdate(model=model, usd=usd, agent_id=agent_id, **self.figures()))

    def check_brakes(self) -> None:
        """Before an agent's turn: the spend-rate brake, and the repeated-spawn brake of that agent (typed
        `BudgetExhaustedError`s with their evidence)."""
        if self.spend_rate is not None:
            self.spend_rate.check()
        frame = CURRENT_FRAME.get(None)
        tripped = self.spawn_brakes.get(frame.agent_id or 0) if frame is not None and self.spawn_brakes else None
        if tripped is not None:
            raise BudgetExhaustedError(
                f"runaway brake: the orchestrator spawned the goal {tripped['goal'][:80]!r} again after it had "
                f"finished {tripped['finished']} time(s) (max_repeated_spawns={tripped['limit']}); it stops before "
                f"its next turn. Use the child's answer, or raise max_repeated_spawns= for a retry that is meant.",
                kind="budget", reason=StopReason.REPEATED_SPAWN, evidence=dict(tripped),
            )

    def figures(self) -> Figures:
        """Spend against the run's USD ceiling and the tree's token ceiling, right now."""
        root, tokens = self.root, self.tree.tokens
        room = tokens.room()
        return Figures(
            spent_usd=root.spent, held_usd=max(0.0, root.held), ceiling_usd=root.ceiling,
            remaining_usd=root.remaining(),
            spent_tokens=int(tokens.spent), held_tokens=max(0, int(tokens.held)),
            ceiling_tokens=None if tokens.ceiling is None else int(tokens.ceiling),
            remaining_tokens=None if room is None else int(room),
        )

    def mint_agent_id(self) -> int:
        n = self.next_agent_id
        self.next_agent_id += 1
        return n
