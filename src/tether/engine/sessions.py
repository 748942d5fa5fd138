"""`Session`: a conversation as a tree of turns, each turn a run of its own (docs/sessions.md).

`send` claims the next turn by moving the session's head with a compare-and-swap on the session's version
(two sends on one head: one wins, the other gets `SessionConflictError`), then runs the turn under a ceiling of
at most what the session's own ceiling has left. Money figures come from each turn's cost report.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol, TypedDict, Unpack, cast

from tether.contracts.entries import JournalEntry, RunMeta
from tether.contracts.errors import ConfigError
from tether.contracts.money import usd
from tether.contracts.protocols import JournalStore
from tether.contracts.sessions import (
    SessionConflictError,
    SessionNotFoundError,
    SessionRecord,
    SessionStore,
    TurnOf,
    TurnRecord,
)
from tether.contracts.stops import StopReason
from tether.engine.handle import RunHandle
from tether.engine.options import ResumeOptions, RunOptions, StartOptions, segment_options
from tether.engine.outcome import RunOutcome
from tether.engine.seam import WorkflowRef
from tether.engine.turns import message_sha256, user_message
from tether.engine.workflow import Workflow
from tether.journal.cost import fold_cost
from tether.journal.keys import SETTLE_KEY

SETTLED = frozenset({"ok", "error", "cancelled", "exhausted", "dead"})
"""Run statuses after which a turn holds no more of the session's money and a next turn may follow it."""


class SessionOptions(TypedDict, total=False):
    """What `engine.session` takes beside the id (fixed when the session is created)."""

    workspace: str | None
    """The memory scope of its turns (default "default")."""
    budget_usd: float | None
    """A USD ceiling across all its turns, set when the session is created (then raised: `Session.raise_budget`)."""


class _Store(JournalStore, SessionStore, Protocol):
    """A store holding both runs and sessions (every shipped store)."""


class SessionEngine(Protocol):
    """What a session uses of an `Engine`."""

    @property
    def clock(self) -> Any: ...

    async def store(self) -> JournalStore: ...

    def resolve_workflow(self, wf: WorkflowRef) -> Workflow: ...

    def start(self, wf: WorkflowRef, args: Mapping[str, Any] | None = None,
              **options: Unpack[StartOptions]) -> RunHandle: ...

    async def start_resume(self, run_id: str, wf: WorkflowRef | None = None, args: Mapping[str, Any] | None = None,
                           *, event_log: Any = None, **options: Unpack[ResumeOptions]) -> RunHandle: ...


@dataclass(frozen=True, slots=True)
class Turn:
    """One turn as a session shows it: its run, place in the tree, status and cost (from its cost report)."""

    session_id: str
    index: int
    run_id: str | None
    """None for a turn the session ceiling refused before it started (it is not in the tree)."""
    parent: str | None
    status: str
    """The run's status (`ok`, `running`, `exhausted`, ...), or `refused`."""
    cost_usd: float = 0.0
    grant_usd: float | None = None
    answer: Any = None
    stop: StopReason | None = None
    why: str | None = None
    """What stopped the turn, in words, when something did."""
    outcome: RunOutcome | None = None
    """The run's outcome when this process drove the turn (`send`, `resume`)."""

    def to_json(self) -> dict[str, Any]:
        return {"session_id": self.session_id, "index": self.index, "run_id": self.run_id, "parent": self.parent,
                "status": self.status, "cost_usd": self.cost_usd, "grant_usd": self.grant_usd,
                "answer": self.answer, "stop": self.stop.value if self.stop else None, "why": self.why}


class Session:
    """A conversation on an engine's store. Cheap to make: nothing is read or written until it is used."""

    def __init__(self, engine: SessionEngine, session_id: str, *, workspace: str | None = None,
                 budget_usd: float | None = None) -> None:
        if budget_usd is not None and (isinstance(budget_usd, bool) or not budget_usd >= 0):
            raise ConfigError(f"a session's budget_usd must be a USD amount >= 0, got {budget_usd!r}")
        self.session_id, self._engine = session_id, engine
        self._asked = (workspace, budget_usd)

    async def _store(self) -> _Store:
        store = await self._engine.store()
        if not isinstance(store, SessionStore):
            raise ConfigError(f"sessions need a store that holds them; {type(store).__name__} does not. Use a "
                              f"shipped store (sqlite, postgresql, jsonl, memory).")
        return cast(_Store, store)

    async def record(self) -> SessionRecord:
        """The stored session, created on first use with this object's workspace and ceiling."""
        store = await self._store()
        workspace, budget = self._asked
        held = await store.session_create(SessionRecord(self.session_id, workspace=workspace or "default",
                                                        budget_usd=budget, created_at=self._engine.clock()))
        if workspace is not None and workspace != held.workspace:
            raise ConfigError(f"session {self.session_id!r} belongs to workspace {held.workspace!r}, not "
                              f"{workspace!r}; a session's workspace is fixed when it is created.")
        return held  # an existing session keeps its stored ceiling (as raised since), whatever `budget_usd` says

    # -- reading -------------------------------------------------------------------------------------------
    async def turns(self) -> list[Turn]:
        """Every turn of every line, by index, with its status and cost."""
        store = await self._store()
        await self.record()
        return [await self._view(store, t) for t in await store.session_turns(self.session_id)]

    async def line(self, turn: str | int | None = None) -> list[Turn]:
        """The turns from the first to `turn` (default: the head), oldest first."""
        store = await self._store()
        rec = await self.record()
        records = await store.session_turns(self.session_id)
        at = rec.head if turn is None else _find(records, turn, self.session_id).run_id
        by_run = {t.run_id: t for t in records}
        line: list[TurnRecord] = []
        while at is not None:
            line.append(by_run[at])
            at = by_run[at].parent
        return [await self._view(store, t) for t in reversed(line)]

    async def spent_usd(self) -> float:
        """What the session's turns count against its ceiling: settled turns their cost, others their grant."""
        store = await self._store()
        return await _held(store, await store.session_turns(self.session_id))

    # -- changing ------------------------------------------------------------------------------------------
    async def send(self, prompt: str | Mapping[str, Any], *, workflow: WorkflowRef,
                   **options: Unpack[RunOptions]) -> Turn:
        """Run the next turn on the head: `prompt` (a string, passed as `prompt=`, or the workflow's args) as a
        run of its own under the run options (`budget_usd=`: the turn's own ceiling); `SessionConflictError`
        when another send moved the head first."""
        budget_usd = options.pop("budget_usd", None)
        flow = self._engine.resolve_workflow(workflow)  # a workflow or an option it would refuse: before the claim
        segment_options(options, "session.send()")
        store = await self._store()
        rec = await self.record()
        records = await store.session_turns(self.session_id)
        if rec.head is not None:
            await self._settled_head(store, rec.head)
        args, text = _args(prompt)
        index = len(records) + 1
        grant, capped = budget_usd, False
        if rec.budget_usd is not None:
            spent = await _held(store, records)
            left = max(0.0, rec.budget_usd - spent)
            if left <= 0:
                why = (f"session ceiling: session {self.session_id!r} has spent {usd(spent)} of its "
                       f"{usd(rec.budget_usd)} USD ceiling across {len(records)} turns, so turn {index} was not "
                       f"started. Raise it with session.raise_budget(usd) (tether session raise ID USD), or "
                       f"start a new session.")
                return Turn(self.session_id, index, None, rec.head, "refused", stop=StopReason.SESSION_CEILING,
                            why=why)
            capped = grant is None or left < grant
            grant = left if capped else grant
        run_id = f"{self.session_id}.{index}"
        turn = TurnRecord(self.session_id, index, run_id, rec.head, grant, capped, self._engine.clock())
        if not await store.session_swap(dataclasses.replace(rec, head=run_id), rec.version, turn):
            raise SessionConflictError(
                f"session {self.session_id!r} moved while turn {index} was being sent (another send or a branch "
                f"won); nothing ran. Read the session again and send on its new head, or branch from the turn "
                f"you meant (session.branch(turn)).", session=self.session_id, expected_version=rec.version)
        session = TurnOf(session=self.session_id, turn=index, parent=rec.head, workspace=rec.workspace,
                         prompt_sha256=message_sha256(text))
        options["budget_usd"], options["session"] = grant, session
        handle = self._engine.start(flow, args, run_id=run_id, **options)
        return await self._view(store, turn, await handle)

    async def resume(self, turn: str | int | None = None, workflow: WorkflowRef | None = None) -> Turn:
        """Resume a turn (default: the head) whose run a crash cut off: completed calls replay, none re-paid."""
        store = await self._store()
        rec = await self.record()
        target = _find(await store.session_turns(self.session_id), turn if turn is not None else rec.head,
                       self.session_id)
        handle = await self._engine.start_resume(target.run_id, workflow)
        return await self._view(store, target, await handle)

    async def branch(self, turn: str | int) -> SessionRecord:
        """Move the head to `turn` (an index or run id): the next send continues from it; other lines stay."""
        store = await self._store()
        rec = await self.record()
        target = _find(await store.session_turns(self.session_id), turn, self.session_id)
        moved = dataclasses.replace(rec, head=target.run_id)
        if not await store.session_swap(moved, rec.version):
            raise SessionConflictError(f"session {self.session_id!r} moved while branching; read it and branch again.",
                                       session=self.session_id)
        return dataclasses.replace(moved, version=rec.version + 1)

    async def raise_budget(self, usd_: float) -> SessionRecord:
        """Raise the session's USD ceiling (never lowered): later turns get what the raise leaves them."""
        rec = await self.record()
        if rec.budget_usd is not None and not usd_ >= rec.budget_usd:
            raise ConfigError(f"session {self.session_id!r} has a ceiling of {usd(rec.budget_usd)} USD; a ceiling is "
                              f"only raised, and {usd_!r} is lower.")
        moved = dataclasses.replace(rec, budget_usd=float(usd_))
        if not await (await self._store()).session_swap(moved, rec.version):
            raise SessionConflictError(f"session {self.session_id!r} moved while raising its ceiling; try again.",
                                       session=self.session_id)
        self._asked = (self._asked[0], float(usd_))
        return dataclasses.replace(moved, version=rec.version + 1)

    # -- helpers -------------------------------------------------------------------------------------------
    async def _settled_head(self, store: _Store, head: str) -> None:
        meta = await _meta(store, head)
        if meta is None or meta.status not in SETTLED:
            status = meta.status if meta is not None else "not started"
            raise SessionConflictError(
                f"session {self.session_id!r}: its head turn {head!r} is {status}, so no turn may follow it yet. "
                f"Wait for it, resume it if a crash cut it off (session.resume()), or branch from an earlier turn.",
                session=self.session_id, head=head, status=status)

    async def _view(self, store: _Store, t: TurnRecord, outcome: RunOutcome | None = None) -> Turn:
        journal = await store.load(t.run_id)
        meta = await _meta(store, t.run_id)
        status = outcome.status if outcome is not None else meta.status if meta is not None else "not started"
        report = outcome.cost if outcome is not None else fold_cost(journal)
        answer = outcome.value if outcome is not None else _settled_value(journal)
        stop, why = None, None
        if status == "exhausted":
            stop = StopReason.SESSION_CEILING if t.session_capped else StopReason.USD_CEILING
            err = outcome.error if outcome is not None else None
            said = getattr(err, "message", None) or (str(err) if err is not None else "the turn's ceiling stopped it")
            why = (f"session ceiling: turn {t.index} of session {t.session_id!r} was granted the "
                   f"{usd(t.grant_usd or 0.0)} USD the session had left, and it did not cover the turn. Raise the "
                   f"session's ceiling (session.raise_budget, tether session raise) for later turns. The turn's run "
                   f"said: {said}" if t.session_capped else said)
        return Turn(t.session_id, t.index, t.run_id, t.parent, status, report.total_usd, t.grant_usd, answer, stop,
                    why, outcome)


async def _meta(store: _Store, run_id: str) -> RunMeta | None:
    return await store.get_meta(run_id)


async def turn_raise_room(store: JournalStore, run_id: str, turn: TurnOf) -> float | None:
    """The highest ceiling a raise may give `run_id`, turn `turn` of a session with a ceiling: what the session's
    ceiling leaves after its other turns (None: the session has no ceiling, or is not in this store)."""
    if not isinstance(store, SessionStore):
        return None
    rec = await store.session_get(turn["session"])
    if rec is None or rec.budget_usd is None:
        return None
    others = [t for t in await store.session_turns(turn["session"]) if t.run_id != run_id]
    return max(0.0, rec.budget_usd - await _held(cast(_Store, store), others))


async def _held(store: _Store, records: list[TurnRecord]) -> float:
    """Settled turns count their cost; a turn still running (or cut off) counts at least its grant."""
    total = 0.0
    for t in records:
        cost = fold_cost(await store.load(t.run_id)).total_usd
        meta = await _meta(store, t.run_id)
        total += cost if meta is not None and meta.status in SETTLED else max(cost, t.grant_usd or 0.0)
    return total


def _settled_value(journal: list[JournalEntry]) -> Any:
    settle = next((e for e in reversed(journal) if e.key == SETTLE_KEY and e.scope == ""), None)
    return settle.value.get("value") if settle is not None and isinstance(settle.value, dict) else None


def _args(prompt: str | Mapping[str, Any]) -> tuple[dict[str, Any], str]:
    args = {"prompt": prompt} if isinstance(prompt, str) else dict(prompt)
    return args, user_message(args) or ""


def _find(records: list[TurnRecord], turn: str | int | None, session_id: str) -> TurnRecord:
    for t in records:
        if turn in (t.index, t.run_id):
            return t
    raise SessionNotFoundError(f"session {session_id!r} has no turn {turn!r} (turns are numbered from 1); "
                               f"`tether session show {session_id}` lists them.", session=session_id, turn=turn)




async def session_records(engine: SessionEngine, limit: int = 100) -> list[SessionRecord]:
    """The sessions of `engine`'s store, newest first."""
    store = await engine.store()
    if not isinstance(store, SessionStore):
        raise ConfigError(f"{type(store).__name__} holds no sessions")
    return await store.session_list(limit)
