"""`Ctx`: the closed surface through which a workflow body performs every effect."""

from __future__ import annotations

import asyncio
import inspect
import json
import uuid as uuidlib
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, Literal, TypeVar, overload

from pydantic import BaseModel, ConfigDict

from tether.contracts.entries import EntryStatus, JournalEntry
from tether.contracts.errors import AgentCallError, BudgetExhaustedError, ConfigError, TetherError
from tether.contracts.events import ChildEnd, ChildStart, ExternalWaiting, LogLine, PhaseEnd, PhaseStart
from tether.contracts.results import AgentError
from tether.engine.agent_surface import AgentSurface
from tether.engine.branches import BranchPool
from tether.engine.external import ExternalSchema
from tether.engine.frame import CURRENT_FRAME, Frame
from tether.engine.memory import Memory
from tether.engine.outcome import DroppedBranch, error_dict
from tether.engine.replay import Abandoned, Lookup, PreviewStopped
from tether.engine.segment import Segment
from tether.engine.turns import TurnContext, turn_context
from tether.engine.workflow import Workflow, as_workflow
from tether.journal.canonical import to_jsonable
from tether.journal.cost import spent_under
from tether.journal.keys import child_key, external_key, rand_key, step_call_key
from tether.journal.scope import child_segment, join, parallel_segment

if TYPE_CHECKING:
    from tether.engine.agent_call import AgentCall

R = TypeVar("R")


class BranchOutcome(BaseModel):
    """One branch of `ctx.parallel(..., settle=True)`: its value, or the typed error it failed with.

    `error` is the `AgentError` of a failed agent (`AgentCallError.error`), the `TetherError` the
    branch raised, or for any other exception the exception itself.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    status: Literal["ok", "error", "skipped"]
    value: Any = None
    error: AgentError | TetherError | Exception | None = None

    @property
    def message(self) -> str | None:
        """The error as one line (`Type: message`), or None for a branch that did not fail."""
        if self.error is None:
            return None
        if isinstance(self.error, AgentError):
            return f"AgentError ({self.error.kind}): {self.error.message}"
        return f"{type(self.error).__name__}: {self.error}"


class BudgetView:
    """Live USD figures of the innermost account (`remaining()` is None without a ceiling)."""

    def spent(self) -> float:
        return CURRENT_FRAME.get().account.spent

    def remaining(self) -> float | None:
        return CURRENT_FRAME.get().account.remaining()


class Ctx(AgentSurface):
    """Per-run context. Every method journals (or is telemetry only, like `log`); `agent` and
    `orchestrate` come from `AgentSurface`."""

    def __init__(self, segment: Segment, agent_call: AgentCall) -> None:
        self._seg = segment
        self._agents = agent_call
        self.budget = BudgetView()

    @property
    def run_id(self) -> str:
        return self._seg.run_id

    @property
    def session(self) -> TurnContext | None:
        """The session turn this run is (None outside a session): `await ctx.session.history()` (docs/sessions.md)."""
        return turn_context(self._seg.journal.store, self._seg.index.entries)

    @property
    def memory(self) -> Memory:
        """Durable notes of the session's workspace ("default" outside a session): remember, recall, forget."""
        turn = self.session
        return Memory(self.step, self._seg.journal.store, turn.workspace if turn else "default", self.run_id,
                      session=turn.session_id if turn else None, turn=turn.turn if turn else None,
                      clock=self._seg.services.clock)

    # -- host steps --------------------------------------------------------------------------
    @overload
    async def step(
        self, label: str, fn: Callable[[], Awaitable[R]], *, key: str | None = None, deps: Sequence[Any] = ()
    ) -> R: ...
    @overload
    async def step(self, label: str, fn: Callable[[], R], *, key: str | None = None, deps: Sequence[Any] = ()) -> R: ...

    async def step(self, label: str, fn: Callable[[], Any], *, key: str | None = None, deps: Sequence[Any] = ()) -> Any:
        """Run `fn` once; after it completed, resumes serve its journaled result."""
        frame = CURRENT_FRAME.get()
        name = key or label
        k = step_call_key(name, deps)
        found = self._seg.replay.replayed(frame.scope, k)
        if not isinstance(found, Lookup):  # the journaled terminal to replay
            if not getattr(fn, "__annotations__", None):
                return found.value
            return self._seg.services.return_types.revalidate(fn, found.value, self._seg.warn)
        assert found.action != "replay"  # (a replay without a terminal: a journal no step writes)
        self._seg.replay.require_live(f"step {label!r}", frame.scope)
        if self._seg.services.preview:
            raise PreviewStopped(f"the preview stops at host step {label!r} (scope {frame.scope!r}): it would run "
                                 f"live, and a preview runs no host code. What follows it is not forecast.",
                                 step=label, scope=frame.scope)
        journal = self._seg.journal
        running = found.running or await journal.append(self._entry(frame, "step", k, status="running", label=label))
        try:
            value = fn()
            if inspect.isawaitable(value):
                value = await value
            stored = to_jsonable(value, what=f"the result of step {label!r}")
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            await self._seg.journal.append(self._terminal(frame, running, "error", error=error_dict(exc)))
            raise
        await self._seg.journal.append(self._terminal(frame, running, "ok", value=stored))
        return value

    # -- concurrency -------------------------------------------------------------------------
    @overload
    async def parallel(
        self, thunks: Sequence[Callable[[], Awaitable[R]]], *, settle: Literal[False] = False,
        concurrency: int | None = None,
    ) -> list[R]: ...
    @overload
    async def parallel(
        self, thunks: Sequence[Callable[[], Awaitable[Any]]], *, settle: Literal[True], concurrency: int | None = None,
    ) -> list[BranchOutcome]: ...
    @overload
    async def parallel(
        self, thunks: Sequence[Callable[[], Awaitable[Any]]], *, settle: bool, concurrency: int | None = None,
    ) -> list[Any]: ...

    async def parallel(
        self, thunks: Sequence[Callable[[], Awaitable[Any]]], *, settle: bool = False, concurrency: int | None = None,
    ) -> list[Any]:
        """Run branches concurrently, results in source order; `settle=True` never fails fast.

        `concurrency=k` runs at most `k` branches at once: the next (in source order) starts when one
        finishes, and a branch's task exists only while it runs (`engine.branches.BranchPool`)."""
        if concurrency is not None and (type(concurrency) is not int or concurrency < 1):
            raise ConfigError(f"ctx.parallel(concurrency=) must be a whole number >= 1, got {concurrency!r}")
        frame = CURRENT_FRAME.get()
        site = self._seg.replay.next_counter(frame.scope, "par")
        seg = self._seg

        async def branch(i: int) -> Any:
            CURRENT_FRAME.set(frame.enter(join(frame.scope, parallel_segment(site, i))))
            try:
                return await thunks[i]()
            except (Exception, Abandoned) as exc:
                if settle or isinstance(exc, Abandoned):  # a lost branch is itemized the moment it is lost
                    seg.dropped.append(_dropped(frame, site, i, exc))
                raise

        pool = BranchPool(branch, len(thunks), concurrency or len(thunks), seg.waits.branch_waiting,
                          fail_fast=not settle)
        pool.fill()
        seg.waits.branch_waiting(-1)  # the caller waits (once its first branches count as working)
        try:
            await pool.wait()
            if settle:
                done = pool.outcomes()
                outcomes = [_settled(r) for r in done]
                refused = next((r for r in done if isinstance(r, BudgetExhaustedError)), None)
                if refused is not None:
                    # the ceiling stopped work: say so, with every branch's outcome (all journaled)
                    raise BudgetExhaustedError(refused.message, **{**refused.data, "outcomes": outcomes})
                return outcomes
            # The first branch to fail (in completion order) cancels its siblings and its error propagates. A
            # budget refusal is the exception: admitted siblings are already paying, so they finish (their work
            # is journaled) and the refusal is raised once every branch has settled.
            if pool.failed is not None:
                await pool.cancel()
                raise pool.failed
            if pool.refused is not None:
                raise pool.refused
            return pool.results()
        finally:
            seg.waits.branch_waiting(+1)

    # -- child workflows ---------------------------------------------------------------------
    @overload
    async def workflow(
        self, child: Callable[..., Awaitable[R]], args: dict[str, Any] | None = None, *,
        budget_fraction: float | None = None,
    ) -> R: ...
    @overload
    async def workflow(
        self, child: Workflow, args: dict[str, Any] | None = None, *, budget_fraction: float | None = None
    ) -> Any: ...

    async def workflow(
        self,
        child: Workflow | Callable[..., Awaitable[Any]],
        args: dict[str, Any] | None = None,
        *,
        budget_fraction: float | None = None,
    ) -> Any:
        """Run a nested workflow in its own scope with a budget sub-account."""
        wf = as_workflow(child)
        args = dict(args or {})
        frame = CURRENT_FRAME.get()
        inner = join(frame.scope, child_segment(wf.name, self._seg.replay.next_counter(frame.scope, f"wf:{wf.name}")))
        k = child_key(wf.name, args)
        found = self._seg.replay.lookup(frame.scope, k)
        if found.action == "replay":
            assert found.match and found.match.terminal
            span, parent = f"child-{found.match.entry.seq}", frame.span_id
            self._seg.events.emit(ChildStart(replayed=True, workflow=wf.name, scope=inner, span_id=span,
                                             parent_span_id=parent))
            self._seg.events.emit(ChildEnd(replayed=True, workflow=wf.name, status=found.match.terminal.status or "ok",
                                           span_id=span, parent_span_id=parent))
            return self._seg.services.return_types.revalidate(wf.fn, found.match.terminal.value, self._seg.warn)
        self._seg.replay.require_live(f"child workflow {wf.name!r}", frame.scope)
        running = found.running
        ceiling = None
        if running is not None and isinstance(running.value, dict):
            ceiling = running.value.get("ceiling")
        account = frame.account.child(budget_fraction, name=inner, ceiling=ceiling)
        account.restore(*spent_under(self._seg.index.entries, inner))
        if running is None:
            running = await self._seg.journal.append(
                self._entry(
                    frame,
                    "child",
                    k,
                    status="running",
                    label=wf.name,
                    value={"inner_scope": inner, "workflow": wf.name, "ceiling": account.ceiling},
                )
            )
        span, parent = f"child-{running.seq}", frame.span_id
        self._seg.events.emit(ChildStart(workflow=wf.name, scope=inner, ceiling_usd=account.ceiling, span_id=span,
                                         parent_span_id=parent))
        token = CURRENT_FRAME.set(frame.enter(inner, account=account, workflow=wf.name, span_id=span))
        try:
            value = await wf.fn(self, **args)
            stored = to_jsonable(value, what=f"the result of child workflow {wf.name!r}")
        except (asyncio.CancelledError, Abandoned):
            raise
        except Exception as exc:
            status: EntryStatus = "exhausted" if isinstance(exc, BudgetExhaustedError) else "error"
            await self._seg.journal.append(self._terminal(frame, running, status, error=error_dict(exc)))
            self._seg.events.emit(ChildEnd(workflow=wf.name, status=status, span_id=span, parent_span_id=parent))
            raise
        finally:
            CURRENT_FRAME.reset(token)
        # a sub-account whose ceiling stopped work settles the child `exhausted`, its value kept
        status = "exhausted" if account.ceiling is not None and account.exhausted else "ok"
        # an exhausted child that returned is memoized: a resume replays its value, not its body
        memoized = status != "ok" or None
        await self._seg.journal.append(self._terminal(frame, running, status, value=stored, memoized=memoized))
        self._seg.events.emit(ChildEnd(workflow=wf.name, status=status, span_id=span, parent_span_id=parent))
        return value

    # -- suspension --------------------------------------------------------------------------
    @overload
    async def await_external(self, key: str, *, schema: type[R]) -> R: ...
    @overload
    async def await_external(self, key: str, *, schema: Mapping[str, Any] | None = None) -> Any: ...

    async def await_external(self, key: str, *, schema: Any = None) -> Any:
        """Suspend this branch until a value for `key` arrives (human in the loop).

        With `schema` (a type or a JSON-schema dict) a value that does not match is refused with
        `InvalidResolutionError` before it is journaled; the branch keeps waiting for a valid one.
        """
        frame = CURRENT_FRAME.get()
        k = external_key(key)
        found = self._seg.replay.lookup(frame.scope, k)
        spec = ExternalSchema.of(schema, key)
        if found.match is not None:
            entry = found.match.entry
        else:
            self._seg.replay.require_live(f"await_external({key!r})", frame.scope)
            declared = {"schema": spec.json_schema} if spec is not None and spec.json_schema is not None else {}
            entry = await self._seg.journal.append(
                self._entry(
                    frame,
                    "external",
                    k,
                    status="suspended",
                    label=key,
                    value={"key": key, **declared},  # the schema lets any process validate a resolution
                )
            )
        assert entry.seq is not None
        if spec is not None:
            self._seg.waits.schemas[entry.seq] = spec  # the live adapter checks resolutions while we wait
        try:
            value = await self._seg.waits.suspend(frame.scope, entry, key, ExternalWaiting(key=key))
        finally:
            self._seg.waits.schemas.pop(entry.seq, None)
        return spec.load(value, run_id=self._seg.run_id, key=key) if spec is not None else value

    # -- phases, logs, time and randomness ------------------------------------------------------
    @asynccontextmanager
    async def phase(self, name: str) -> AsyncIterator[None]:
        """Name a section for events and cost attribution; never changes identity."""
        frame = CURRENT_FRAME.get()
        span, parent = f"phase-{self._seg.replay.next_counter('', 'span:phase') + 1}", frame.span_id
        token = CURRENT_FRAME.set(frame.enter(frame.scope, phase=name, span_id=span))
        self._seg.events.emit(PhaseStart(phase=name, span_id=span, parent_span_id=parent))
        failed: str | None = None
        try:
            yield
        except BaseException as exc:
            failed = type(exc).__name__
            raise
        finally:
            CURRENT_FRAME.reset(token)
            self._seg.events.emit(PhaseEnd(phase=name, error_type=failed, span_id=span, parent_span_id=parent))

    def log(self, level: str, msg: str, **data: Any) -> None:
        """Telemetry only; never journaled (`data` becomes the event's JSON `fields`)."""
        fields = json.loads(json.dumps(data, default=str))  # telemetry never fails a workflow: str() the rest
        self._seg.events.emit(LogLine(level=level, msg=msg, fields=fields))

    def _rand(self, subtype: str, key: str | None, make: Callable[[], Any]) -> Any:
        frame = CURRENT_FRAME.get()
        k = rand_key(subtype, key)
        found = self._seg.replay.lookup(frame.scope, k)
        if found.action == "replay":
            assert found.match
            return found.match.entry.value
        self._seg.replay.require_live(f"ctx.{subtype}()", frame.scope)
        value = make()
        # Written before the next journal append: any effect that depends on it is journaled after it.
        self._seg.journal.defer(self._entry(frame, "rand", k, value=value, label=subtype))
        return value

    def now(self) -> float:
        """Journaled wall-clock time (epoch seconds): the same value on every replay."""
        return float(self._rand("now", None, self._seg.services.clock))

    def random(self, key: str | None = None) -> float:
        """A journaled random float in [0, 1)."""
        return float(self._rand("random", key, self._seg.services.rng.random))

    def uuid(self) -> str:
        """A journaled UUID4 string."""
        rng = self._seg.services.rng
        return str(self._rand("uuid", None, lambda: str(uuidlib.UUID(int=rng.getrandbits(128), version=4))))

    # -- entry builders ----------------------------------------------------------------------
    def _entry(self, frame: Frame, kind: Any, key: str, **fields: Any) -> JournalEntry:
        return JournalEntry(
            kind=kind,
            scope=frame.scope,
            key=key,
            ordinal=self._seg.index.next_ordinal(frame.scope, key),
            phase=frame.phase,
            started_at=self._seg.services.clock(),
            **fields,
        )

    def _terminal(self, frame: Frame, running: JournalEntry, status: Any, **fields: Any) -> JournalEntry:
        return JournalEntry(
            kind=running.kind,
            ref=running.seq,
            scope=running.scope,
            key=running.key,
            ordinal=running.ordinal,
            status=status,
            label=running.label,
            phase=frame.phase,
            ended_at=self._seg.services.clock(),
            **fields,
        )


def _settled(r: Any) -> BranchOutcome:
    if isinstance(r, Abandoned):
        return BranchOutcome(status="skipped")
    if isinstance(r, asyncio.CancelledError):
        raise r
    if isinstance(r, AgentCallError) and isinstance(r.error, AgentError):
        return BranchOutcome(status="error", error=r.error)
    if isinstance(r, Exception):
        return BranchOutcome(status="error", error=r)
    if isinstance(r, BaseException):
        raise r
    return BranchOutcome(status="ok", value=r)


def _is_failure(exc: BaseException | None) -> bool:
    return exc is not None and not isinstance(exc, Abandoned)


def _dropped(frame: Frame, site: int, i: int, exc: BaseException) -> DroppedBranch:
    scope = join(frame.scope, parallel_segment(site, i))
    seq = exc.seq if isinstance(exc, Abandoned) else None
    return DroppedBranch(scope=scope, seq=seq, error=error_dict(exc))
