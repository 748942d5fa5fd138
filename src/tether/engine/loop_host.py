"""`EngineLoopHost`: the engine's side of the agent-loop seam (checkpoints, decisions, approvals, tools)."""

from __future__ import annotations

import json
import operator
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ValidationError

from tether.agents.state import LoopState
from tether.budget.hooks import Tally
from tether.contracts.entries import JournalEntry
from tether.contracts.messages import Message
from tether.contracts.protocols import JournalStore
from tether.engine.frame import CURRENT_FRAME, Frame
from tether.journal.canonical import content_key, to_jsonable
from tether.journal.cost import AgentSpend, agent_spend, is_draw

if TYPE_CHECKING:
    from tether.budget.hooks import AccountHooks
    from tether.engine.ctx import Ctx
    from tether.engine.segment import Segment
    from tether.tools.definition import Tool


class EngineLoopHost:
    """Binds one agent invocation (its `running` entry) to the journal, the blob area and events."""

    def __init__(
        self, seg: Segment, ctx: Ctx, running: JournalEntry, frame: Frame, hooks: AccountHooks, *,
        redispatched: bool = False,
    ) -> None:
        assert running.seq is not None
        self.seg = seg
        self.ctx = ctx
        self.run_id = seg.run_id
        self.running = running
        self.agent_seq = running.seq
        self.frame = frame  # the agent's own scope (agent:<seq>)
        self.checkpoint_key = f"{seg.run_id}/checkpoints/{running.seq}"
        self.checkpoints = 0
        self.chain = CheckpointChain(self.checkpoint_key)
        self.hooks = hooks
        self.cwd: str | None = None  # the agent's worktree, under isolation="worktree"
        self.redispatched = redispatched
        spend = _open_spend(seg, running) if redispatched else None
        self.dispatched = max((n for n, _, _ in spend.dispatches), default=0) if spend else 0
        """The last dispatch number of this invocation; numbers continue across segments."""

    async def load_checkpoint(self) -> LoopState | None:
        """The last checkpoint (None: start over); a redispatch also charges the calls a crash cut off.

        A fresh invocation has no checkpoint to read: its key names a seq this segment just claimed.
        """
        if not self.redispatched:
            return None
        state, tally = None, None
        restored = await read_checkpoint(self.seg.store, self.checkpoint_key)
        if restored is not None:
            state, tally, self.chain = restored
        if tally is not None:
            self.hooks.restore(tally)  # the spend of the turns the checkpoint holds counts in the terminal
        spend = _open_spend(self.seg, self.running)
        if spend is not None:
            through = tally.through if tally is not None else 0
            self.hooks.orphaned = lost_since(self.seg.index.entries, spend, through)
        return state

    async def record_dispatch(self, served_by: str, est_input: int, max_output: int) -> None:
        """Make a provider call durable before it leaves, priced at its worst case.

        If the process dies before the call settles, the provider may still bill it; a resume charges
        it at this worst case (`CostReport.orphaned_usd`), so every later ceiling check counts it.
        """
        self.dispatched += 1
        if self.seg.dry_run:
            return
        worst = self.hooks.worst_case_usd(served_by, est_input, max_output)
        await self.seg.append(JournalEntry(
            kind="decision", scope=self.frame.scope, label="dispatch", agent_id=self.running.agent_id,
            started_at=self.seg.engine.clock(),
            value={"decision": "dispatch", "call": self.dispatched, "model": served_by,
                   "worst_usd": None if worst is None else round(worst, 10), "est_input": est_input,
                   "max_output": max_output},
        ))

    async def flush_draw(self, step: int) -> None:
        """One `budget_draw` fact per model turn, journaled at the turn boundary."""
        if self.running.agent_id is not None:
            self.seg.tree.turn_of[self.running.agent_id] = step
        tokens, costs = self.hooks.take_draw()
        self.seg.tree.draw(self.running.agent_id, step, tokens, costs, self.dispatched)

    async def save_checkpoint(self, state: LoopState) -> None:
        """Checkpoint the turn: the messages it added (one chunk), then the small head that names them."""
        if self.seg.dry_run:
            return
        await self.flush_draw(state.turns)
        # The loop's state and the priced tally of the same turns, written together.
        tally = self.hooks.tally(through=self.dispatched)
        for key, data in self.chain.writes(state, tally):
            await self.seg.put_blob(key, data)
        self.checkpoints += 1

    async def decide(self, name: str, payload: dict[str, Any]) -> dict[str, Any]:
        scope = self.frame.scope
        key = content_key({"kind": "decision", "decision": name})
        found = self.seg.lookup(scope, key)
        if found.action == "replay" and found.match is not None:
            value = found.match.entry.value or {}
            return dict(value.get("payload") or {})
        self.seg.require_live(f"decision {name!r}", scope)
        await self.seg.append(
            JournalEntry(
                kind="decision",
                scope=scope,
                key=key,
                ordinal=self.seg.index.next_ordinal(scope, key),
                label=name,
                value={"decision": name, "payload": to_jsonable(payload)},
                agent_id=self.running.agent_id,
                started_at=self.seg.engine.clock(),
            )
        )
        return payload

    async def approve(self, tool: str, args: dict[str, Any]) -> bool:
        scope = self.frame.scope
        key = content_key({"kind": "approval", "tool": tool, "input": to_jsonable(args)})
        found = self.seg.lookup(scope, key)
        if found.match is not None:
            entry = found.match.entry
        else:
            self.seg.require_live(f"approval for {tool!r}", scope)
            ordinal = self.seg.index.next_ordinal(scope, key)
            human = f"approval:{self.agent_seq}:{tool}:{ordinal}"
            entry = await self.seg.append(
                JournalEntry(
                    kind="approval",
                    scope=scope,
                    key=key,
                    ordinal=ordinal,
                    status="suspended",
                    label=tool,
                    value={"key": human, "tool": tool, "args": to_jsonable(args)},
                    agent_id=self.running.agent_id,
                    started_at=self.seg.engine.clock(),
                )
            )
        human_key = str((entry.value or {}).get("key"))
        value = await self.seg.suspend(self.frame.scope, entry, human_key, "approval:pending")
        return is_allow(value)

    async def execute_tool(self, tool: Tool, args: dict[str, Any], *, call_id: str, ordinal: int) -> Any:
        token = CURRENT_FRAME.set(self.frame)
        try:
            return await self.seg.engine.tool_runner.run(
                self.seg,
                tool,
                args,
                agent_seq=self.agent_seq,
                ordinal=ordinal,
                call_id=call_id,
                cwd=self.cwd,
            )
        finally:
            CURRENT_FRAME.reset(token)

    def emit(self, type: str, **data: Any) -> None:
        data.setdefault("agent_id", self.running.agent_id)
        data.setdefault("label", self.running.label)
        data.setdefault("depth", self.frame.depth)
        self.seg.events.emit(type, span_id=f"agent-{self.agent_seq}", **data)

    async def sleep(self, seconds: float) -> None:
        await self.seg.engine.sleep(seconds)


# -- checkpoints -----------------------------------------------------------------------------------
# A checkpoint is a small head blob (the loop's state without its messages, and the tally) plus the
# transcript in chunks: each save writes only the messages added since the last one, so a turn's
# checkpoint costs the same at turn 200 as at turn 2, and a resume reads the chunks back in order
# (time linear in the transcript). A chunk is written before the head that names it; every chunk
# carries its lineage, index and first message number, and a head whose chunks do not all line up
# is unreadable (the agent starts over), so a crash between the writes leaves the previous head valid.
class _Chunk(BaseModel):
    lineage: str
    index: int
    start: int
    messages: list[Message]


class _Head(BaseModel):
    layout: Literal[2] = 2
    lineage: str
    chunks: int
    loop: LoopState
    """The loop state with `messages` empty (they are in the chunks)."""
    tally: Tally


def chunk_key(key: str, index: int) -> str:
    return f"{key}/m/{index}"


@dataclass
class CheckpointChain:
    """What one invocation's checkpoints hold so far, so the next save writes only what is new."""

    key: str
    lineage: str = ""
    """Random per start of a transcript (minted at the first write), so chunks of another never pass."""
    chunks: int = 0
    saved: list[Message] = field(default_factory=list)

    def writes(self, state: LoopState, tally: Tally) -> list[tuple[str, bytes]]:
        """The blobs to write, in order: a chunk of the new messages (if any), then the head."""
        messages, n = state.messages, len(self.saved)
        if not self.lineage:
            self.lineage = uuid.uuid4().hex
        if len(messages) < n or not all(map(operator.is_, messages, self.saved)):
            # The transcript was rewritten rather than extended: a new lineage, from its first message.
            self.lineage, self.chunks, self.saved, n = uuid.uuid4().hex, 0, [], 0
        out: list[tuple[str, bytes]] = []
        if len(messages) > n:
            added = messages[n:]
            chunk = _Chunk(lineage=self.lineage, index=self.chunks, start=n, messages=added)
            out.append((chunk_key(self.key, self.chunks), chunk.model_dump_json().encode()))
            self.chunks += 1
            self.saved.extend(added)
        head = _Head(lineage=self.lineage, chunks=self.chunks, loop=state.model_copy(update={"messages": []}),
                     tally=tally)
        out.append((self.key, head.model_dump_json().encode()))
        return out


async def read_checkpoint(store: JournalStore, key: str) -> tuple[LoopState, Tally, CheckpointChain] | None:
    """A checkpoint read back (head, then its chunks in order), or None when it is missing or does not
    hold together (an unreadable checkpoint is never trusted)."""
    data = await store.get_blob(key)
    if data is None:
        return None
    try:
        envelope = json.loads(data)
        if isinstance(envelope, dict) and envelope.get("layout") == 2:
            head = _Head.model_validate(envelope)
            messages: list[Message] = []
            for i in range(head.chunks):
                raw = await store.get_blob(chunk_key(key, i))
                if raw is None:
                    return None
                chunk = _Chunk.model_validate_json(raw)
                if (chunk.lineage, chunk.index, chunk.start) != (head.lineage, i, len(messages)):
                    return None
                messages.extend(chunk.messages)
            state = head.loop.model_copy(update={"messages": messages})
            return state, head.tally, CheckpointChain(key, head.lineage, head.chunks, list(messages))
        # A whole-transcript checkpoint (written before chunks existed): the next save starts a lineage.
        state = LoopState.model_validate(envelope["loop"])
        return state, Tally.model_validate(envelope["tally"]), CheckpointChain(key)
    except (ValidationError, ValueError, KeyError, TypeError):
        return None


def _open_spend(seg: Segment, running: JournalEntry) -> AgentSpend | None:
    """The journal's account of a redispatched invocation (None for a fresh one)."""
    for spend in agent_spend(seg.index.entries):
        if spend.running.seq == running.seq:
            return spend
    return None


def lost_since(entries: list[JournalEntry], spend: AgentSpend, through: int) -> dict[str, float]:
    """What a crash cut off after the checkpoint (`through`): turns drawn but not checkpointed, at their
    journaled cost, and dispatches after the last draw, at their worst case; per model."""
    lost: dict[str, float] = {}
    for e in entries:
        if e.agent_id == spend.running.agent_id and is_draw(e) and int(getattr(e, "through", 0) or 0) > through:
            for model, usd in (getattr(e, "costs", None) or {}).items():
                lost[model] = lost.get(model, 0.0) + float(usd)
    drawn = max(through, spend.through)
    for n, model, worst in spend.dispatches:
        if n > drawn and worst:
            lost[model] = lost.get(model, 0.0) + worst
    return lost


def is_allow(value: Any) -> bool:
    """Only an explicit allow allows; anything else is a deny."""
    if value is True or (isinstance(value, str) and value.lower() in ("allow", "approve", "yes")):
        return True
    if isinstance(value, dict):
        return is_allow(value.get("decision", value.get("allow")))
    return False
