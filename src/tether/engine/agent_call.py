"""`ctx.agent`: identity, matching, admission, the journaled two-phase entry and the loop under it."""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Unpack

from pydantic import BaseModel

from tether.agents.dispatch import estimate_prompt_tokens
from tether.agents.host import AgentSpec, OutputSpec
from tether.agents.loop import end_event, run_agent
from tether.budget.accounts import Hold
from tether.budget.admission import admit, check_spawn_cap, raise_hint, reserve_usd
from tether.budget.hooks import AccountHooks
from tether.budget.pricebook import unpriced_refusal
from tether.budget.tenant import Budget, BudgetLedger, TenantGate
from tether.contracts.entries import JournalEntry
from tether.contracts.errors import AgentCallError, BudgetExhaustedError, ConfigError, PricingError, TetherError
from tether.contracts.events import AgentEnd, AgentQueued, BudgetRefused, Spawn, SpawnRefused
from tether.contracts.loops import AgentLoop
from tether.contracts.messages import Message
from tether.contracts.money import usd
from tether.contracts.prices import Price
from tether.contracts.results import AgentError, AgentResult
from tether.contracts.routes import ResolvedModel
from tether.contracts.stops import StopReason
from tether.engine.agent_result import restore_result
from tether.engine.checkpoint import checkpoint_key
from tether.engine.foreign_agent import run_foreign
from tether.engine.frame import CURRENT_FRAME, Frame
from tether.engine.loop_host import EngineLoopHost
from tether.engine.options import AgentOptions, check_agent_options, check_context, genesis_of
from tether.engine.orchestrator import spawn_tool
from tether.engine.outcome import DroppedBranch
from tether.engine.profiles import NO_PROFILE
from tether.engine.replay import Lookup
from tether.engine.replay_events import ReplayFacts
from tether.engine.tree import CapLabel, Refusal, refusal_error
from tether.engine.turns import history_identity
from tether.journal.canonical import schema_hash, to_jsonable
from tether.journal.disposition import ceiling_stopped, continues_on_rerun
from tether.journal.keys import agent_identity, agent_key, budget_refusal_key, spawn_refusal_key
from tether.journal.lineage import lineage_of
from tether.journal.matching import CONTINUES, continued_seq
from tether.journal.scope import agent_segment, join
from tether.journal.stops import stop_reason
from tether.mcp.source import resolve_tools, toolset_changes, toolset_record
from tether.tools.definition import Tool, toolset_hash
from tether.tools.executors.worktree import Worktree

if TYPE_CHECKING:
    from tether.engine.segment import Segment


# Engine-decided stops are memoized: replaying them is cheaper and deterministic.
MEMOIZED_ERROR_KINDS = frozenset({"schema-mismatch"})
DEFAULT_MAX_OUTPUT = 4_096
"""A call's output limit when it sets none (bounded mode, or no USD ceiling)."""


def output_spec(output: Any) -> OutputSpec | None:
    """A pydantic model class or a JSON schema dict as the loop's `OutputSpec`."""
    if output is None:
        return None
    if isinstance(output, type) and issubclass(output, BaseModel):
        return OutputSpec(schema=output.model_json_schema(), model_cls=output, name=output.__name__)
    if isinstance(output, dict):
        return OutputSpec(schema=output, name=str(output.get("title") or "result"))
    raise ConfigError(f"output= must be a pydantic model class or a JSON schema dict, not {type(output).__name__}")


class AgentCall:
    """Runs `ctx.agent` invocations for one segment."""

    def __init__(self, seg: Segment) -> None:
        self.seg = seg
        self._replay_facts: ReplayFacts | None = None  # built at the first replayed agent
        self._tenant: TenantGate | bool | None = False  # the budgets across runs, read from the genesis once
        self._lineage = lineage_of(seg.index.entries[:1])  # a fork's model swaps (docs/forks.md)
        # Bound once: a bound method made per invocation is one more object per agent in flight.
        self._on_debit, self._on_unpriced, self._brake = seg.budget_update, seg.warn_unpriced, seg.check_brakes

    async def call(
        self,
        prompt: str,
        *,
        output: Any = None,
        on_error: Literal["raise", "none"] = "raise",
        full: bool = False,
        role: str = "loop",
        **options: Unpack[AgentOptions],
    ) -> Any:
        if options:
            check_agent_options(options, "ctx.agent()")
            check_context(options.get("context"))
        tools = options.get("tools", ())
        model = options.get("model")
        agent_type = options.get("agent_type")
        key = options.get("key")
        label = options.get("label")
        if self._lineage is not None:
            model = self._lineage.model_for(label, agent_type) or model
        est_cost = options.get("est_cost")
        max_turns = options.get("max_turns")
        max_output_tokens = options.get("max_output_tokens")
        isolation = options.get("isolation")
        history = tuple(options.get("history") or ())
        seg, services = self.seg, self.seg.services
        frame = CURRENT_FRAME.get()
        profile = services.profiles.get(agent_type or "") or NO_PROFILE
        spec_model = services.router.spec_for(role, model, profile.model, services.workflow_model(frame.workflow))
        models = services.router.resolve(spec_model)
        out = output_spec(output)
        all_tools = await resolve_tools([*profile.tools, *tools], seg.resources)  # MCP servers list here
        ident = agent_identity(
            agent_type=agent_type, model=spec_model.identity,
            prompt=key if key is not None else history_identity(prompt, history),
            schema_hash=schema_hash(out.schema if out else None), toolset_hash=toolset_hash(all_tools),
            isolation=isolation,
        )
        k = agent_key(ident)
        found = seg.replay.lookup(frame.scope, k)
        if found.action is None and all_tools:
            self._toolset_changed(frame.scope, ident, all_tools, label or prompt[:40])
        del ident  # not needed past matching; this frame is held for the whole invocation
        if found.action == "replay" and found.match and found.match.terminal:
            result = restore_result(found.match.entry, found.match.terminal, out)
            if ceiling_stopped(found.match.terminal) and result.error is not None:
                self._ceiling_stopped(frame, None, result.error, found.match.entry)  # the stop replays too
            self._replay_facts = self._replay_facts or ReplayFacts(seg.index)
            self._replay_facts.emit(seg.events, frame, found.match.entry, found.match.terminal, result)
            return self._shape(frame, found.match.entry, result, on_error, full)
        seg.replay.require_live(f"agent {label or prompt[:40]!r}", frame.scope)
        spec = AgentSpec(
            prompt=prompt,
            models=models,
            system=options.get("system") or profile.system,
            output=out,
            tools=all_tools or (),
            max_turns=max_turns or profile.max_turns or 32,
            max_output_tokens=max_output_tokens or profile.max_output_tokens or self._default_output(frame),
            effort=spec_model.effort,
            tool_budget=options.get("tool_budget"),
            label=label,
            agent_type=agent_type,
            permissions=services.permissions,
            exposure_wait=options.get("exposure_wait", False),
            opening=Message.text("user", prompt),
            context=options.get("context"),
            history=history,
            max_identical_tool_calls=_first(options.get("max_identical_tool_calls"), seg.max_identical_tool_calls),
        )
        depth = frame.depth + 1
        if found.running is None:
            check_spawn_cap(seg.next_agent_id - 1, services.max_spawns, seg.run_id)
            await self._contain(frame, depth, k, prompt)
        slots = seg.tree.slots(depth)
        if slots.locked():
            seg.events.emit(AgentQueued(label=label, depth=depth, parent_span_id=frame.span_id))
        running, continues = found.running, self._continues(found)
        del found  # (held no longer than needed: this frame lives as long as the invocation)
        await slots.acquire()  # (not `async with`: its bound `__aexit__` would be held for the whole call)
        try:
            est_input, max_output, turn_output = self._estimate(spec)
            price = services.price_of(spec.models[0].ref)
            refusal = None if price is not None else unpriced_refusal(
                spec.models[0].ref, frame.account, strict=seg.strict_pricing, allowed=seg.allow_unpriced)
            if refusal is not None:
                raise refusal  # before any reserve: a model that cannot be priced is a set-up problem, not money
            reserve = reserve_usd(est_cost if est_cost is not None else profile.est_cost, None, price, est_input,
                                  max_output)
            free = _all_free(services.price_of, spec.models)
            hold = await self._admit(frame, k, reserve, f"agent {label or prompt[:40]!r}", free=free)
            token_hold = seg.tree.hold(est_input + turn_output)
            hooks = self._hooks(frame, hold, token_hold, free=free)
            try:
                worktree = (options.get("repo") or os.getcwd()) if isolation == "worktree" else None
                running, host = self._open(frame, running, spec, hooks, k, role, spec_model.identity, continues)
                loop = _loop_of(options.get("loop"), max_turns)
                # Dropped before the loop runs: this frame is held for the whole invocation, and every name still
                # bound is one more reference the collector walks per agent in flight (docs/performance.md).
                del prompt, output, options, tools, model, agent_type, key, label, est_cost, max_turns, history
                del max_output_tokens, services, profile, spec_model, models, all_tools, k, continues, role
                del est_input, max_output, turn_output, price, refusal, reserve, free, hold
                try:
                    if worktree is None:
                        result = await self._run_loop(spec, host, hooks, loop)
                    else:
                        result = await self._run_isolated(spec, host, hooks, worktree, loop)
                    await host.flush_draw(result.turns)
                except (PricingError, asyncio.CancelledError) as exc:
                    await self._failed(frame, running, hooks, host, exc)
                    raise
                finally:
                    seg.tree.stopped(depth)
                    CURRENT_FRAME.set(frame)
                head = host.chain.head_sha256
                terminal = await seg.journal.append(self._terminal(frame, running, result, hooks, head))
            finally:
                await self._settle_across_runs(hooks)
                hooks.release_all()  # after the terminal: the room its dispatches held is reused only after it
                if token_hold is not None:
                    token_hold.release()
        finally:
            slots.release()
        result = restore_result(running, terminal, out, live=result)
        if result.error is not None and result.error.kind == "budget":
            self._ceiling_stopped(frame, hooks, result.error, running)
        return self._shape(frame, running, result, on_error, full)

    def _continues(self, found: Lookup) -> tuple[int, ...]:
        """The seqs of the invocations this call continues, newest first: an agent run again after a ceiling
        stopped it (and a raise), a cancel or a transport failure goes on from its last checkpoint, not from its
        prompt (docs/budgets.md, *Continuing after a raise*; `disposition.continues_on_rerun`), and so does a
        redispatch or a rerun of such a continuation."""
        m = found.match
        if m is None:
            return ()
        if found.action == "redispatch":
            start = continued_seq(m.entry)
        elif found.action == "rerun" and m.terminal is not None and (
                continues_on_rerun(m.terminal) or continued_seq(m.entry) is not None):
            start = m.entry.seq
        else:
            return ()
        chain: list[int] = []
        while start is not None and start not in chain:
            chain.append(start)
            before = self.seg.index.by_seq.get(start)
            start = continued_seq(before) if before is not None else None
        return tuple(chain)

    def _default_output(self, frame: Frame) -> int | None:
        """The output limit of a call that set none: the serving model's own cap (None) under the hard USD
        ceiling, where the budget clamps it to what the unreserved remainder buys; else 4,096 tokens."""
        return None if self.seg.hard_ceiling and frame.account.capped() else DEFAULT_MAX_OUTPUT

    def _hooks(self, frame: Frame, hold: Hold, token_hold: Hold | None, *, free: bool = False) -> AccountHooks:
        seg = self.seg
        return AccountHooks(
            frame.account, seg.services.price_of, hold=hold, exposure=seg.exposure,
            strict_pricing=seg.strict_pricing, on_debit=self._on_debit,
            tokens=seg.tree.tokens if seg.tree.tokens.ceiling is not None else None, token_hold=token_hold,
            allow_unpriced=seg.allow_unpriced, on_unpriced=self._on_unpriced, calibration=seg.calibration,
            hard=seg.hard_ceiling, wait_s=seg.services.dispatch_wait_s, run_id=seg.run_id,
            tenant=self._budgets_across_runs(), free=free,
            brake=self._brake if seg.spend_rate is not None or seg.max_repeated_spawns is not None else None,
        )

    def _budgets_across_runs(self) -> TenantGate | None:
        """The run's budgets across runs as the genesis fixed them (None: it carries none)."""
        if self._tenant is False:
            seg = self.seg
            genesis = genesis_of(seg.index.entries)
            stored = genesis.value.get("budgets") if genesis and isinstance(genesis.value, dict) else None
            store = seg.journal.store
            self._tenant = None
            if stored and isinstance(store, BudgetLedger):  # the runner refused other stores before the genesis
                self._tenant = TenantGate(
                    store, tuple(Budget.from_json(b) for b in stored), seg.run_id, seg.journal.lease,
                    on_refused=lambda message, data: seg.root.stop(message, **data),  # data carries its reason
                    wait_s=seg.services.dispatch_wait_s, sleep=seg.services.sleep,
                )
        return self._tenant if isinstance(self._tenant, TenantGate) else None

    @staticmethod
    async def _settle_across_runs(hooks: AccountHooks) -> None:
        """Charge the budgets across runs what the invocation's calls cost, even while it is being cancelled
        (a settle that cannot be written leaves the reservation to be charged at its worst case)."""
        if hooks.tenant is None:
            return
        with contextlib.suppress(TetherError):
            await asyncio.shield(hooks.settle_across_runs())

    async def _admit(self, frame: Frame, k: str, reserve: float, what: str, *, free: bool = False) -> Hold:
        """Layer 1 as a journaled decision: a refusal is written once and read back on every resume.

        Without the fact a resume would decide again against different holds (the siblings that
        replay hold nothing) and could admit, and pay for, work the first segment refused.
        """
        seg = self.seg
        prior = seg.index.match(frame.scope, budget_refusal_key(k)) if seg.index.replaying() else None
        if prior is not None and (prior.entry.seq or 0) < seg.replay.money_reset_seq:
            prior = None  # refused before the ceiling was raised or the orphans settled: decide it again
        if prior is not None and isinstance(prior.entry.value, dict):
            value = prior.entry.value
            account = next((a for a in frame.account.chain() if a.name == value.get("account")), seg.root)
            data = dict(value.get("data") or {})
            account.stop(str(value.get("message") or "admission refused (read back from the journal)"),
                         what=what, reserve_usd=data.get("reserve"), remaining_usd=data.get("remaining"))
            self._refusal_event(frame, what, str(value.get("message")), value.get("account"), reserve,
                                replayed=True)
            data["reason"] = stop_reason("budget", data.get("reason"), value.get("message"))  # typed, as when decided
            raise BudgetExhaustedError(str(value.get("message")), **data)
        try:
            return admit(frame.account, reserve, what=what, run_id=seg.run_id, free=free)
        except BudgetExhaustedError as exc:
            self._refusal_event(frame, what, exc.message, exc.data.get("account"), reserve)
            if not seg.dry_run:
                key = budget_refusal_key(k)
                await seg.journal.append(JournalEntry(
                    kind="decision", scope=frame.scope, key=key, ordinal=seg.index.next_ordinal(frame.scope, key),
                    label="budget-refusal", phase=frame.phase, started_at=seg.services.clock(),
                    value={"decision": "budget-refusal", "account": exc.data.get("account"), "message": exc.message,
                           "data": to_jsonable(exc.data)},
                ))
            raise

    def _refusal_event(
        self, frame: Frame, what: str, message: str, account: Any, reserve: float, replayed: bool = False
    ) -> None:
        self.seg.events.emit(BudgetRefused(
            agent_id=frame.agent_id, what=what, account=account if isinstance(account, str) else None,
            reserve_usd=reserve, message=message, replayed=replayed, **self.seg.figures(),
        ))

    def _ceiling_stopped(
        self, frame: Frame, hooks: AccountHooks | None, error: AgentError, running: JournalEntry,
    ) -> None:
        """Record which ceiling stopped this agent (and the agent), so its scope settles `exhausted`
        (`hooks` None: a replayed stop, whose binding ceiling is the one with the least room now).

        The in-flight exposure cap is not a ceiling: its refusals stop nothing for good.
        """
        reason = stop_reason(error.kind, error.reason, error.message)
        if reason in _NOT_STOPPING:
            return
        who = {"agent_id": running.agent_id, "label": running.label, "stage": error.stage, "reason": reason}
        tokens = self.seg.tree.tokens
        binding = hooks.binding if hooks is not None else None
        # replayed (`hooks` None), an output floor the tree's tokens left unaffordable names them in `limited_by`:
        # the tokens are not at their ceiling, and without it the stop is lost and the run settles again as `ok`
        if (reason is StopReason.TOKEN_CEILING or binding is tokens or error.limited_by == "tokens"
                or (binding is None and tokens.at_ceiling())):
            tokens.stop(error.message, **who, remaining_tokens=self.seg.tree.remaining_tokens())
            return
        account = binding or frame.account.binding()
        if account is not None:
            account.stop(error.message, **who, remaining_usd=account.room())

    def _estimate(self, spec: AgentSpec) -> tuple[int, int, int]:
        """The first request's input estimate, the output tokens the admission reserve prices, and those the
        tree's token reserve counts (one turn of `max_output_tokens`, never above the model's cap).

        Bounded, the reserve prices that worst-case turn; hard, the least a turn can ask for (the model's
        output floor), since every dispatch holds its own worst case on the ceiling as it leaves.
        """
        model = spec.models[0]
        est = estimate_prompt_tokens(spec, model, [*spec.history, spec.opening or Message.text("user", spec.prompt)])
        caps = model.adapter.caps(model.name)
        turn = min(spec.max_output_tokens or DEFAULT_MAX_OUTPUT, caps.max_output_tokens)
        priced = caps.output_floor if self.seg.hard_ceiling else turn
        return self.seg.calibration.scale(model.ref, est), priced, turn

    async def _contain(self, frame: Frame, depth: int, k: str, goal: str) -> None:
        """The tree's refusals: journaled with their cap label, and read back (never re-decided) on resume."""
        seg = self.seg
        prior = seg.index.match(frame.scope, spawn_refusal_key(k)) if seg.index.replaying() else None
        if prior is not None and isinstance(prior.entry.value, dict):
            label = prior.entry.value.get("detail")
            cap: CapLabel = label if label in ("agents", "depth", "budget") else "agents"
            raise refusal_error(Refusal(cap, f"refused earlier in this run ({cap})"))
        try:
            seg.tree.check(depth)
        except Refusal as refusal:
            await self.refused(frame, spawn_refusal_key(k), refusal.label, goal)
            raise refusal_error(refusal) from None

    def repeated_spawn(self, frame: Frame, goal: str) -> dict[str, Any] | None:
        """The repeated-spawn brake (`max_repeated_spawns`): the evidence when the orchestrator of `frame` spawns a
        goal that already finished more often than allowed (its next turn then stops); None: it may spawn."""
        limit, parent = self.seg.max_repeated_spawns, frame.agent_id
        if limit is None or parent is None:
            return None
        children = {e.value.get("child_agent_id") for e in self.seg.index.entries if e.kind == "tree"
                    and e.label == "spawn" and isinstance(e.value, dict) and e.value.get("parent_agent_id") == parent
                    and e.value.get("detail") == goal[:500]}
        finished = sum(1 for e in self.seg.index.entries if e.kind == "agent" and e.ref is not None
                       and e.agent_id in children)
        if finished <= limit:
            return None
        evidence = {"goal": goal[:500], "finished": finished, "limit": limit, "orchestrator": parent}
        self.seg.spawn_brakes[parent] = evidence
        return evidence

    async def refused(self, frame: Frame, key: str, label: CapLabel, goal: str) -> None:
        """Journal a `spawn_refused` fact with its cap label (once: a resumed run reads it back)."""
        seg = self.seg
        parent = frame.agent_id or 0
        if seg.index.match(frame.scope, key) is None:
            await seg.journal.append(seg.tree.event(
                scope=frame.scope, key=key, agent_id=parent, step=seg.tree.turn_of.get(parent, 0),
                kind="spawn_refused", detail=label,
            ))
        seg.events.emit(SpawnRefused(agent_id=parent, step=seg.tree.turn_of.get(parent, 0), detail=label,
                                     goal=goal[:200]))

    def _open(
        self, frame: Frame, running: JournalEntry | None, spec: AgentSpec, hooks: AccountHooks, k: str,
        role: str, model: str, continues: tuple[int, ...] = (),
    ) -> tuple[JournalEntry, EngineLoopHost]:
        """The invocation's running entry (staged, or the one it redispatches) and its loop host; the current frame
        is the invocation's own from here (`call` sets it back). Its loop runs in `call` itself: a coroutine of its
        own would be one more object per agent in flight."""
        seg = self.seg
        redispatched = running is not None
        if running is None:
            # Staged: durable with the first dispatch record (one commit), before anything it authorizes.
            running = seg.journal.stage(self._running_entry(frame, spec, k, role, model,
                                                            continues[0] if continues else None))
            self._spawned(frame, running, spec.prompt)
        assert running.seq is not None
        inner = frame.enter(
            join(frame.scope, agent_segment(running.seq)), agent_id=running.agent_id, depth=frame.depth + 1,
            span_id=f"agent-{running.seq}",
        )
        host = EngineLoopHost(seg, running, inner, hooks, redispatched=redispatched, parent_span=frame.span_id,
                              continues=_checkpoint_keys(seg.run_id, continues))
        CURRENT_FRAME.set(inner)  # set back to `frame` by `call`: a reset token would be one more object in flight
        seg.tree.started(inner.depth)
        return running, host

    async def _failed(
        self, frame: Frame, running: JournalEntry, hooks: AccountHooks, host: EngineLoopHost, exc: BaseException,
    ) -> None:
        """An invocation's loop raised: a pricing refusal (before the wire) or a cancel still gets its terminal."""
        seg = self.seg
        if isinstance(exc, PricingError):  # refused before the wire: the entry it opened still gets its terminal
            refused = AgentResult(status="error", usage=hooks.usage, usage_by_model=hooks.usage_by_model,
                                  error=AgentError(kind="terminal", message=exc.message))
            await seg.journal.append(self._terminal(frame, running, refused, hooks, host.chain.head_sha256))
            host.emit(end_event(refused, reason="pricing"))
        elif not seg.waits.all_parked.is_set():  # cancelled: a suspension keeps the agent `running` (its checkpoint)
            await self._journal_cancelled(frame, running, hooks, host.chain.head_sha256)
            host.emit(AgentEnd(status="cancelled", usage=hooks.usage, reason="cancelled"))

    def _run_loop(
        self, spec: AgentSpec, host: EngineLoopHost, hooks: AccountHooks, loop: _Loop
    ) -> Awaitable[AgentResult]:
        """The agent loop of one invocation: tether's, or the foreign `loop=` through its `LoopSession`."""
        if loop.foreign is not None:
            return run_foreign(spec, host, hooks, self.seg.cancel, loop.foreign, loop.max_turns)
        return run_agent(spec, host, hooks, signal=self.seg.cancel)

    async def _run_isolated(
        self, spec: AgentSpec, host: EngineLoopHost, hooks: AccountHooks, repo: str, loop: _Loop
    ) -> AgentResult:
        """The loop inside a disposable git worktree: its patch comes back as an artifact."""
        async with Worktree(repo) as tree:
            host.cwd = tree.path
            result = await self._run_loop(spec, host, hooks, loop)
        return result.model_copy(update={"artifacts": {"patch": tree.patch or ""}})

    def _spawned(self, frame: Frame, running: JournalEntry, goal: str) -> None:
        """A child started by an agent: the `spawn` fact (adopted children on resume write none)."""
        if frame.agent_id is None:
            return
        seg = self.seg
        seg.journal.stage(seg.tree.event(
            agent_id=frame.agent_id, step=seg.tree.turn_of.get(frame.agent_id, 0), kind="spawn",
            child_agent_id=running.agent_id, detail=goal[:500], parent_agent_id=frame.agent_id,
        ))
        seg.events.emit(Spawn(agent_id=frame.agent_id, step=seg.tree.turn_of.get(frame.agent_id, 0),
                              child_agent_id=running.agent_id, detail=goal[:500], parent_agent_id=frame.agent_id))

    def _running_entry(
        self, frame: Frame, spec: AgentSpec, k: str, role: str, model: str, continues: int | None = None,
    ) -> JournalEntry:
        seg = self.seg
        value: dict[str, Any] = {"model": model, "toolset": toolset_record(spec.tools)} if spec.tools else {
            "model": model}
        if continues is not None:
            value[CONTINUES] = continues  # matched through the stopped invocation (journal.matching.successor)
        return JournalEntry(
            kind="agent", scope=frame.scope, key=k, ordinal=seg.index.next_ordinal(frame.scope, k), status="running",
            label=spec.label, phase=frame.phase, agent_id=seg.mint_agent_id(), parent_agent_id=frame.agent_id,
            agent_type=spec.agent_type, role=role, started_at=seg.services.clock(),
            value=value,
        )

    def _toolset_changed(self, scope: str, ident: dict[str, Any], tools: Sequence[Tool], what: str) -> None:
        """A resume says so when an agent misses only because its tools changed (an MCP server upgraded)."""
        entries = self.seg.index.entries
        drift = toolset_changes(entries[: len(entries) - self.seg.journal.appended], scope, ident, tools)
        if drift is not None:
            seq, changed = drift
            msg = (f"agent {what!r} runs live again: its toolset changed since the journaled call (seq {seq}); "
                   f"changed tools: {', '.join(changed)}")
            self.seg.warn(f"toolset:{seq}", msg)  # the `tether` logger, a warning event, outcome.warnings

    async def _journal_cancelled(self, frame: Frame, running: JournalEntry, hooks: AccountHooks, head: str) -> None:
        """A cancelled invocation still gets its terminal, with the partial (approximate) spend."""
        if self.seg.journal.lost is not None:
            return  # another driver owns the run now: this segment writes nothing more
        usage = hooks.usage.model_copy(update={"approximate": True})
        result = AgentResult(
            status="cancelled", usage=usage, usage_by_model=hooks.usage_by_model,
            error=AgentError(kind="transport", message="cancelled while running"),
        )
        with contextlib.suppress(asyncio.CancelledError):  # appends finish once started; cancel is re-raised
            await self.seg.journal.append(self._terminal(frame, running, result, hooks, head))

    def _terminal(
        self, frame: Frame, running: JournalEntry, result: AgentResult, hooks: AccountHooks, head: str,
    ) -> JournalEntry:
        error = result.error.model_dump(exclude_none=True) if result.error else None
        memoized = result.status == "limit" or (result.error is not None and result.error.kind in MEMOIZED_ERROR_KINDS)
        return JournalEntry(
            kind="agent",
            ref=running.seq,
            scope=running.scope,
            key=running.key,
            ordinal=running.ordinal,
            status=result.status,
            label=running.label,
            phase=frame.phase,
            agent_id=running.agent_id,
            parent_agent_id=running.parent_agent_id,
            agent_type=running.agent_type,
            role=running.role,
            value={"output": to_jsonable(result.output, what="the agent's output"), "turns": result.turns,
                   "artifacts": result.artifacts or None, "finish_reason": result.finish_reason},
            error=error,
            usage=result.usage,
            usage_by_model=result.usage_by_model or None,
            served_by=result.served_by,
            provider_calls=hooks.provider_calls,
            cost_usd=hooks.cost_usd,
            costs=hooks.costs or None,
            orphaned=hooks.orphaned or None,
            orphaned_usd=round(hooks.orphaned_usd, 10) or None,
            cut=hooks.cut or None,
            unpriced=dict(hooks.unpriced) or None,
            tool_budget=_dump(result.tool_budget),
            memoized=memoized or None,
            checkpoint_ref=checkpoint_key(self.seg.run_id, running.seq or 0),
            checkpoint_sha256=head,
            ended_at=self.seg.services.clock(),
        )

    def _shape(self, frame: Frame, running: JournalEntry, result: AgentResult, on_error: str, full: bool) -> Any:
        """What `ctx.agent` returns or raises; budget refusals always raise, even with `full=True`."""
        if result.status == "ok":
            return result if full else result.output
        err = result.error or AgentError(kind="terminal", message=f"agent ended {result.status}")
        if err.kind == "budget":
            # What the agent paid for rides on the error: a reply the clamp cut is still the caller's.
            raise BudgetExhaustedError(
                f"budget: agent {running.label or running.agent_id} stopped ({err.reason or result.status}, "
                f"stage {err.stage or 'loop'}): {err.message}{self._what_to_do(frame, err)}",
                error=err,
                reason=err.reason,  # typed, as every refusal carries it (a caught one, a settled run's)
                stage=err.stage,
                evidence=err.evidence,
                agent_id=running.agent_id,
                output=result.output,
                usage=result.usage,
                finish_reason=result.finish_reason,
                cost_usd=result.cost_usd,
            )
        if full:
            return result
        if on_error == "none":
            self.seg.dropped.append(
                DroppedBranch(scope=frame.scope, seq=running.seq, error=err.model_dump(exclude_none=True))
            )
            return None
        raise AgentCallError(
            f"agent {running.label or running.agent_id} ended {result.status} ({err.kind}): {err.message}",
            error=err,
            status=result.status,
            agent_id=running.agent_id,
        )

    def _what_to_do(self, frame: Frame, err: AgentError) -> str:
        """How to go on after a ceiling stopped an agent: what the run has spent (settled and orphaned), and
        how to raise the ceiling. Nothing for the exposure cap (not a ceiling) or a message that says it."""
        reason = stop_reason(err.kind, err.reason, err.message)
        if reason is not None and reason.is_brake:
            return f" (evidence: {err.evidence})" if err.evidence else ""
        if reason is StopReason.TOKEN_CEILING or err.limited_by == "tokens":  # a USD figure would mislead
            return ". Raise Containment(max_tokens=...) for the next run, or lower max_output_tokens=."
        acct = frame.account.binding()
        if acct is None or acct.ceiling is None or reason is None or not reason.is_ceiling:
            return ""
        run_id = self.seg.run_id
        return f". The run has {acct.spent_phrase(run_id)} of its {usd(acct.ceiling)} USD ceiling. {raise_hint(run_id)}"

    async def orchestrate(
        self, goal: str, *, output: Any = None, max_spawns: int | None = None,
        on_error: Literal["raise", "none"] = "raise", full: bool = False, **options: Unpack[AgentOptions],
    ) -> Any:
        """An agent with a `spawn_agent` tool; its children are agents one level deeper in the tree."""
        check_agent_options(options, "ctx.orchestrate()")
        tools = await resolve_tools(options.get("tools", ()), self.seg.resources)
        options["tools"] = [*tools, spawn_tool(self, tools, max_spawns)]
        return await self.call(goal, output=output, on_error=on_error, full=full, role="orchestrate", **options)


@dataclass(frozen=True, slots=True)
class _Loop:
    """Who drives an invocation's loop: a foreign `AgentLoop` (with the `max_turns` the call gave), or tether."""

    foreign: AgentLoop | None
    max_turns: int | None


_TETHER_LOOP = _Loop(None, None)
"""tether's own loop drives the invocation (shared: frozen)."""


def _loop_of(foreign: AgentLoop | None, max_turns: int | None) -> _Loop:
    return _TETHER_LOOP if foreign is None else _Loop(foreign, max_turns)


_NOT_STOPPING = frozenset({StopReason.EXPOSURE_CAP, StopReason.EXPOSURE_DRAINED, StopReason.IN_FLIGHT})
"""Budget errors that stop nothing for good: the in-flight exposure cap is not a ceiling."""


def _checkpoint_keys(run_id: str, seqs: tuple[int, ...]) -> list[str]:
    """(A function, not a comprehension in `_start`: that would make `seg` a cell held for the whole invocation.)"""
    return [checkpoint_key(run_id, seq) for seq in seqs]


def _all_free(price_of: Callable[[str], Price | None], models: Sequence[ResolvedModel]) -> bool:
    """Whether every model of the call is priced free (a function, not a generator in `call`: that one's
    closure cells would live as long as the invocation)."""
    for m in models:
        p = price_of(m.ref)
        if p is None or not p.is_free:
            return False
    return True


def _first(given: int | None, default: int | None) -> int | None:
    if given is not None and (type(given) is not int or given < 1):
        raise ConfigError(f"max_identical_tool_calls must be a whole number >= 1, got {given!r}")
    return given if given is not None else default


def _dump(model: BaseModel | None) -> dict[str, Any] | None:
    return model.model_dump(exclude_none=True) if model is not None else None
