"""`EngineLoopHost`: the engine's side of the agent-loop seam (checkpoints, decisions, approvals, tools)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from tether.agents.state import LoopState
from tether.contracts.entries import JournalEntry
from tether.contracts.events import (
    AgentEnd,
    AgentScoped,
    AgentStart,
    AgentStream,
    ApprovalPending,
    ModelEnd,
    ModelStart,
    ToolEnd,
    ToolStart,
)
from tether.engine.checkpoint import CheckpointChain, checkpoint_key, continued_state, read_checkpoint
from tether.engine.frame import CURRENT_FRAME, Frame
from tether.journal.canonical import to_jsonable
from tether.journal.cost import REDISPATCH, AgentSpend, agent_spend, draw_range, is_draw
from tether.journal.keys import approval_key, decision_key

E = TypeVar("E", bound=AgentScoped)

if TYPE_CHECKING:
    from tether.budget.hooks import AccountHooks
    from tether.engine.segment import Segment
    from tether.tools.definition import Tool


class EngineLoopHost:
    """Binds one agent invocation (its `running` entry) to the journal, the blob area and events."""

    __slots__ = (
        "_call_base", "agent_seq", "chain", "checkpoint_key", "checkpoints", "continues", "cwd", "dispatched", "frame",
        "hooks",
        "parent_span", "redispatched", "run_id", "running", "seg", "span_id", "undrawn_from",
    )

    def __init__(
        self, seg: Segment, running: JournalEntry, frame: Frame, hooks: AccountHooks, *,
        redispatched: bool = False, parent_span: str = "run", continues: Sequence[str] = (),
    ) -> None:
        assert running.seq is not None
        self.seg = seg
        self.run_id = seg.run_id
        self.running = running
        self.agent_seq = running.seq
        self.frame = frame  # the agent's own scope (agent:<seq>)
        self.checkpoint_key = checkpoint_key(seg.run_id, running.seq)
        self.checkpoints = 0
        self.chain = CheckpointChain(self.checkpoint_key)
        self.hooks = hooks
        self.cwd: str | None = None  # the agent's worktree, under isolation="worktree"
        self.redispatched = redispatched
        self.continues = tuple(continues)
        """Checkpoint keys of the ceiling-stopped invocations this one continues after a raise, newest first: its
        conversation starts from theirs until it has a checkpoint of its own."""
        self.span_id = f"agent-{running.seq}"
        self.parent_span = parent_span  # where ctx.agent was called: the run, a phase, a child, a tool call
        self._call_base: dict[int, float] = {}  # cost before each provider call, for its own cost
        spend = _open_spend(seg, running) if redispatched else None
        self.dispatched = max((d.call for d in spend.dispatches), default=0) if spend else 0
        """The last dispatch number of this invocation; numbers continue across segments."""
        self.undrawn_from = self.dispatched + 1
        """The first dispatch the next turn draw settles: never one an earlier segment's crash cut off."""

    async def load_checkpoint(self) -> LoopState | None:
        """The last checkpoint (None: start over); a redispatch also charges the calls a crash cut off.

        A fresh invocation has no checkpoint to read: its key names a seq this segment just claimed.
        """
        if not self.redispatched:
            return await continued_state(self.seg.journal.store, self.continues)
        state, tally = None, None
        restored = await read_checkpoint(self.seg.journal.store, self.checkpoint_key)
        if restored is not None:
            state, tally, self.chain = restored
        if tally is not None:
            self.hooks.restore(tally)  # the spend of the turns the checkpoint holds counts in the terminal
        spend = _open_spend(self.seg, self.running)
        if spend is not None:
            through = tally.through if tally is not None else 0
            drawn, lost, cut = lost_since(self.seg.index.entries, spend, through)
            if drawn:
                self._journal_restart(through)
            for model, usd in (tally.orphaned if tally is not None else {}).items():  # cut off by earlier crashes
                lost[model] = lost.get(model, 0.0) + usd
            # turns drawn after the checkpoint (paid, and journaled as such), the dispatches no draw settled, and
            # the calls made past the checkpoint
            self.hooks.spend.carry_lost(drawn, lost, [*(tally.cut if tally is not None else []), *cut],
                                        sum(1 for d in spend.dispatches if d.call > through))
        return state if state is not None else await continued_state(self.seg.journal.store, self.continues)

    def _journal_restart(self, through: int) -> None:
        """Say in the journal that turns drawn past the checkpoint (`through`) are sent again: the cost fold lists
        them as paid and lost to the kill (`CostReport.lost`), on every store alike."""
        if self.seg.dry_run:
            return
        self.seg.journal.stage(JournalEntry(
            kind="decision", scope=self.frame.scope, label=REDISPATCH, agent_id=self.running.agent_id,
            started_at=self.seg.services.clock(), value={"decision": REDISPATCH, "through": through},
        ))

    async def record_dispatch(
        self, served_by: str, est_input: int, max_output: int, *, purpose: str | None = None
    ) -> None:
        """Make a provider call durable before it leaves, priced at its worst case.

        If the process dies before the call settles, the provider may still bill it; a resume charges
        it at this worst case (`CostReport.orphaned_usd`), so every later ceiling check counts it.
        """
        if not self.seg.dry_run:  # budgets across runs first: a refusal leaves nothing dispatched or journaled
            await self.hooks.reserve_across_runs(served_by, est_input, max_output,
                                                 f"call {self.dispatched + 1} of agent #{self.running.agent_id}")
        self.dispatched += 1
        self.hooks.expect_input(served_by, est_input)
        if self.seg.dry_run:
            return
        worst = self.hooks.worst_case_usd(served_by, est_input, max_output)
        value = {"decision": "dispatch", "call": self.dispatched, "model": served_by,
                 "worst_usd": None if worst is None else round(worst, 10), "est_input": est_input,
                 "input_overhead": self.hooks.calibration.overhead(served_by), "max_output": max_output}
        if purpose is not None:
            value["purpose"] = purpose
        await self.seg.journal.append(JournalEntry(
            kind="decision", scope=self.frame.scope, label="dispatch", agent_id=self.running.agent_id,
            started_at=self.seg.services.clock(), value=value,
        ))

    async def end_attempt(self, turn: int, *, reached: bool) -> None:
        """A failed attempt's draw (even of nothing) is journaled at once, so the worst case its dispatch held is
        released before the retry is sized; one that never left is taken off the call count."""
        if not reached:
            self.hooks.spend.call_unsent()
        await self.flush_draw(turn, settle=True)

    async def flush_draw(self, step: int, *, settle: bool = False) -> None:
        """One `budget_draw` fact per model turn, journaled at the turn boundary (`settle`: also when the turn's
        dispatches drew nothing, so they are settled at 0 rather than left to be charged at their worst case)."""
        if self.running.agent_id is not None:
            self.seg.tree.turn_of[self.running.agent_id] = step
        tokens, costs, usage = self.hooks.take_draw()
        settle = settle and self.undrawn_from <= self.dispatched
        drawn = self.seg.tree.draw(self.running.agent_id, step, tokens, costs, (self.undrawn_from, self.dispatched),
                                   dict(self.hooks.calibration.overheads), usage, settle=settle)
        if drawn:
            self.undrawn_from = self.dispatched + 1
            self.hooks.settle_dispatches()  # the draw is staged: what its dispatches held may be reused
            await self.hooks.settle_across_runs()

    async def save_checkpoint(self, state: LoopState) -> None:
        """Checkpoint the turn: the messages it added (one chunk), then the small head that names them."""
        if self.seg.dry_run:
            return
        await self.flush_draw(state.turns)
        # The loop's state and the priced tally of the same turns, written together.
        tally = self.hooks.tally(through=self.dispatched)
        for key, data in self.chain.writes(state, tally):
            await self.seg.journal.put_blob(key, data)
        self.checkpoints += 1

    async def decide(self, name: str, payload: dict[str, Any]) -> dict[str, Any]:
        scope = self.frame.scope
        key = decision_key(name)
        found = self.seg.replay.lookup(scope, key)
        if found.action == "replay" and found.match is not None:
            value = found.match.entry.value or {}
            return dict(value.get("payload") or {})
        self.seg.replay.require_live(f"decision {name!r}", scope)
        await self.seg.journal.append(
            JournalEntry(
                kind="decision",
                scope=scope,
                key=key,
                ordinal=self.seg.index.next_ordinal(scope, key),
                label=name,
                value={"decision": name, "payload": to_jsonable(payload)},
                agent_id=self.running.agent_id,
                started_at=self.seg.services.clock(),
            )
        )
        return payload

    async def recorded(self, name: str) -> dict[str, Any] | None:
        """The next journaled decision `name` of this invocation (consumed, as `decide` would), else None."""
        if not self.seg.index.replaying():
            return None
        found = self.seg.replay.lookup(self.frame.scope, decision_key(name))
        if found.action == "replay" and found.match is not None:
            return dict((found.match.entry.value or {}).get("payload") or {})
        return None

    async def approve(self, tool: str, args: dict[str, Any]) -> bool:
        scope = self.frame.scope
        key = approval_key(tool, args)
        found = self.seg.replay.lookup(scope, key)
        if found.match is not None:
            entry = found.match.entry
        else:
            self.seg.replay.require_live(f"approval for {tool!r}", scope)
            ordinal = self.seg.index.next_ordinal(scope, key)
            human = f"approval:{self.agent_seq}:{tool}:{ordinal}"
            entry = await self.seg.journal.append(
                JournalEntry(
                    kind="approval",
                    scope=scope,
                    key=key,
                    ordinal=ordinal,
                    status="suspended",
                    label=tool,
                    value={"key": human, "tool": tool, "args": to_jsonable(args)},
                    agent_id=self.running.agent_id,
                    started_at=self.seg.services.clock(),
                )
            )
        human_key = str((entry.value or {}).get("key"))
        hooks = self.hooks  # a parked agent has no `agent:end` yet: its figures so far ride on this event
        value = await self.seg.waits.suspend(self.frame.scope, entry, human_key, self._stamped(ApprovalPending(
            key=human_key, tool=tool, usage=hooks.usage, cost_usd=hooks.cost_usd + hooks.orphaned_usd,
            provider_calls=hooks.provider_calls)))
        return is_allow(value)

    async def execute_tool(self, tool: Tool, args: dict[str, Any], *, call_id: str, ordinal: int) -> Any:
        # Inside the tool, the current span is the tool call's: spawned agents and their events nest under it.
        token = CURRENT_FRAME.set(self.frame.enter(self.frame.scope, span_id=f"{self.span_id}:{call_id}"))
        try:
            return await self.seg.tools.run(
                tool,
                args,
                agent_seq=self.agent_seq,
                ordinal=ordinal,
                call_id=call_id,
                cwd=self.cwd,
            )
        finally:
            CURRENT_FRAME.reset(token)

    def emit(self, event: AgentScoped, /) -> None:
        """Telemetry of this invocation: the agent's ids, its spans and its live cost filled in, then emitted."""
        self.seg.events.emit(self._stamped(event))

    def _stamped(self, event: E) -> E:
        """`event` with the fields the host fills: the agent's ids and depth, its spans, its journaled cost."""
        hooks = self.hooks
        event.agent_id = self.running.agent_id
        event.label = self.running.label
        event.depth = self.frame.depth
        if isinstance(event, _CALL_EVENTS):
            event.span_id, event.parent_span_id = f"{self.span_id}:call-{event.call}", self.span_id
        elif isinstance(event, _TOOL_EVENTS):
            event.span_id, event.parent_span_id = f"{self.span_id}:{event.call_id}", self.span_id
        else:
            event.span_id, event.parent_span_id = self.span_id, self.parent_span
        if isinstance(event, AgentStart):
            event.parent_agent_id, event.phase = self.running.parent_agent_id, self.frame.phase
        elif isinstance(event, AgentEnd):  # the cost as the terminal journals it
            event.cost_usd, event.parent_agent_id = hooks.cost_usd + hooks.orphaned_usd, self.running.parent_agent_id
        elif isinstance(event, AgentStream):
            event.cost_usd = hooks.cost_usd + hooks.orphaned_usd
        elif isinstance(event, ModelStart):
            self._call_base[event.call] = hooks.cost_usd
        elif isinstance(event, ModelEnd):
            event.cost_usd = max(0.0, hooks.cost_usd - self._call_base.pop(event.call, hooks.cost_usd))
        return event

    async def sleep(self, seconds: float) -> None:
        await self.seg.services.sleep(seconds)


_CALL_EVENTS = (ModelStart, ModelEnd, AgentStream)
"""Events of one provider call: their span is the call's."""
_TOOL_EVENTS = (ToolStart, ToolEnd)


def _open_spend(seg: Segment, running: JournalEntry) -> AgentSpend | None:
    """The journal's account of a redispatched invocation (None for a fresh one)."""
    for spend in agent_spend(seg.index.entries):
        if spend.running.seq == running.seq:
            return spend
    return None


def lost_since(
    entries: list[JournalEntry], spend: AgentSpend, through: int
) -> tuple[dict[str, float], dict[str, float], list[int]]:
    """What a crash cut off after the checkpoint (`through`), per model: the turns drawn but not checkpointed,
    at their journaled cost (paid: they count as spend), and the dispatches no draw settled, at their worst
    case (orphans), with those dispatches' numbers. (What earlier crashes cut off before the checkpoint
    rides in the checkpoint's tally.)"""
    drawn: dict[str, float] = {}
    lost: dict[str, float] = {}
    cut: list[int] = []
    for e in entries:
        if e.agent_id == spend.running.agent_id and is_draw(e) and draw_range(e)[0] > through:
            for model, usd in (e.costs or {}).items():
                drawn[model] = drawn.get(model, 0.0) + float(usd)
    for call, model, worst in spend.unsettled(after=through):
        if worst:
            lost[model] = lost.get(model, 0.0) + worst
            cut.append(call)
    return drawn, lost, cut


def is_allow(value: Any) -> bool:
    """Only an explicit allow allows; anything else is a deny."""
    if value is True or (isinstance(value, str) and value.lower() in ("allow", "approve", "yes")):
        return True
    if isinstance(value, dict):
        return is_allow(value.get("decision", value.get("allow")))
    return False
