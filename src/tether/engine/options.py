"""The options of a run and of an agent: `RunOptions`, `AgentOptions`, and what derives from them.

`RunOptions` is the one declaration `engine.start/run/run_sync/enqueue/resume/start_resume` take
(`**options: Unpack[RunOptions]`); the durable list, the genesis entry and the validation derive from it.
`AgentOptions` is the one declaration of what `ctx.agent` and `ctx.orchestrate` take besides the prompt
and the three arguments that decide what comes back (`output`, `on_error`, `full`).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypedDict, cast, get_args

from tether.agents.context import Context
from tether.agents.tool_budget import ToolBudget
from tether.budget.tenant import Budget, check_budgets
from tether.contracts.entries import JournalEntry
from tether.contracts.errors import ConfigError
from tether.contracts.loops import AgentLoop
from tether.contracts.messages import Message
from tether.contracts.sessions import TurnOf
from tether.contracts.usage import MAX_TOKENS
from tether.journal.cost import BUDGET_RAISED, UNPRICED_ALLOWED, decision_name
from tether.journal.keys import GENESIS_KEY, args_hash
from tether.mcp.source import ToolLike
from tether.routing import ModelLike

Overshoot = Literal["hard", "bounded"]
OVERSHOOT_MODES: tuple[Overshoot, ...] = get_args(Overshoot)
OnExhausted = Literal["exhausted", "suspend"]
ON_EXHAUSTED_MODES: tuple[OnExhausted, ...] = get_args(OnExhausted)
ForecastGate = Literal["refuse", "suspend"]
FORECAST_GATES: tuple[ForecastGate, ...] = get_args(ForecastGate)


@dataclass(frozen=True)
class Containment:
    """Caps on a run's whole agent tree, fixed at start; nothing a model writes can raise them.

    `max_agents` counts agents ever created (the workflow is not one); agents the workflow starts are
    at depth 1. `max_concurrent` queues (FIFO, per depth level); the other caps refuse.
    """

    max_agents: int
    max_concurrent: int
    max_depth: int
    max_tokens: int | None = None
    max_usd: float | None = None
    max_duration_s: float | None = None

    def __post_init__(self) -> None:
        for name in ("max_agents", "max_concurrent", "max_depth"):
            if getattr(self, name) < 1:
                raise ConfigError(f"Containment.{name} must be at least 1, got {getattr(self, name)}")
        tokens = self.max_tokens
        if tokens is not None and (type(tokens) is not int or not 0 < tokens <= MAX_TOKENS):
            got = f"a {tokens.bit_length()}-bit number" if type(tokens) is int and tokens > 0 else repr(tokens)
            raise ConfigError(f"Containment.max_tokens must be a whole number from 1 to {MAX_TOKENS}, got {got}",
                              cap="max_tokens")


class RunOptions(TypedDict, total=False):
    """How a run runs. Every option but `deadline_s` is fixed at the run's start (journaled in its genesis):
    a resume that leaves one out keeps the stored value, and one that passes another value is refused."""

    budget_usd: float | None
    """The run's USD ceiling (docs/budgets.md)."""
    containment: Containment | None
    """Caps on the agent tree (agents, depth, concurrency, tokens, USD, duration)."""
    max_in_flight_exposure_usd: float | None
    """A cap on the worst case of the provider calls in flight at once."""
    strict_pricing: bool | None
    """Refuse a model with no price row even without a USD ceiling."""
    allow_unpriced: bool | None
    """Run unpriced models under the USD ceiling (their spend is itemized, not counted against it)."""
    overshoot: Overshoot | None
    """`"hard"` (the default): spend plus every in-flight call's worst case never passes the ceiling;
    `"bounded"`: at most one clamped turn per concurrently running agent past it."""
    on_exhausted: OnExhausted | None
    """What the run does when its USD ceiling stops work: `"exhausted"` (the default) settles it `exhausted`;
    `"suspend"` parks it on a `budget` suspension until an operator raises the ceiling, then the stopped agents
    continue from their checkpoints (docs/budgets.md, *The suspend mode*)."""
    budgets: Sequence[Budget] | None
    """`tether.Budget`s across runs (a scope's USD per window, shared by every run and worker on the
    PostgreSQL store); each call reserves its worst case on them before it leaves (docs/budgets.md)."""
    forecast_gate: ForecastGate | None
    """Judge the run by its forecast before it starts (`engine.forecast`): `"refuse"` raises
    `tether.ForecastRefusedError` before anything is written when its P95 exceeds the ceiling or a budget's
    remaining USD; `"suspend"` parks it on a `forecast` suspension until an operator approves (docs/budgets.md)."""
    max_identical_tool_calls: int | None
    """Runaway brake: an agent asking for the same tool with canonically equal arguments more than this many
    times stops (`StopReason.IDENTICAL_TOOL_CALLS`). Default: off (three identical turns in a row still stop)."""
    max_spend_rate_usd_per_min: float | None
    """Runaway brake: the run's agents stop (`StopReason.SPEND_RATE`) once the last minute's spend passes this."""
    max_repeated_spawns: int | None
    """Runaway brake: an orchestrator spawning a child goal that already finished more than this many times again
    stops (`StopReason.REPEATED_SPAWN`); 0 stops at the first repeat. Default: off."""
    deadline_s: float | None
    """Wall-clock seconds this segment may run before it is cancelled (per segment, never stored)."""
    session: TurnOf | None
    """The session turn this run is (set by `Session.send`, read by `ctx.session`; docs/sessions.md)."""


class AgentOptions(TypedDict, total=False):
    """How one agent invocation runs (`ctx.agent`, `ctx.orchestrate`); see docs/agents.md."""

    tools: Sequence[ToolLike]
    """`tether.Tool`s (`@tether.tool`, docs/tools.md) and MCP sources the model may call."""
    model: ModelLike | None
    """`"adapter:model"`, a list (the rest are fallbacks) or a `tether.ModelSpec`; default: the profile's,
    else the workflow's, else the engine's `routing` for the role."""
    agent_type: str | None
    """A profile registered with `engine.profile(...)`: its model, tools, system prompt and limits are the
    defaults; grouped under it in `by_agent_type` costs."""
    key: str | None
    """Identity instead of the prompt: the journal matches on it, so the prompt may change freely."""
    label: str | None
    """A display name (events, spans, `tether tree`); never part of the identity."""
    est_cost: float | None
    """USD reserved at admission instead of the priced estimate of one turn."""
    max_turns: int | None
    """Model calls allowed (default 32, or the profile's); past it the agent settles `limit`."""
    max_output_tokens: int | None
    """The output limit of each call (the budget may clamp it lower)."""
    tool_budget: ToolBudget | None
    """A `tether.ToolBudget` capping this invocation's tool calls (docs/tool-budgets.md)."""
    system: str | None
    """The system prompt (default: the profile's)."""
    exposure_wait: bool
    """Under `max_in_flight_exposure_usd`, wait for in-flight calls to settle instead of failing."""
    isolation: Literal["worktree"] | None
    """`"worktree"`: every tool call runs in a disposable git worktree of `repo`; the patch comes back in
    `AgentResult.artifacts["patch"]`. Part of the identity."""
    repo: str | None
    """The repository for `isolation="worktree"` (default: the working directory)."""
    history: Sequence[Message] | None
    """Messages the transcript starts with, before the prompt (`await ctx.session.history()`; docs/sessions.md)."""
    loop: AgentLoop | None
    """A foreign loop (`tether.AgentLoop`) that drives this invocation instead of tether's own, through the
    `LoopSession` it is handed (docs/internals.md, "Extension seams"); `max_turns` binds it only when given."""
    context: Context | None
    """A `tether.Context`: keep each request under an input-token limit by compacting older turns (dropped or
    summarized), and cut long tool results (docs/agents.md, *Context*). Not part of the identity."""
    max_identical_tool_calls: int | None
    """This agent's identical-call brake (default: the run's `max_identical_tool_calls`); docs/budgets.md."""


AGENT_OPTION_NAMES = frozenset(AgentOptions.__annotations__)


def check_agent_options(options: Mapping[str, Any], what: str) -> None:
    """A name `AgentOptions` does not declare is a `TypeError`, as Python raises for an unexpected keyword
    (mypy reports it before the code runs; this is for untyped callers)."""
    for name in options:
        if name not in AGENT_OPTION_NAMES:
            raise TypeError(
                f"{what} got an unexpected keyword argument {name!r}; the options are output, on_error, full, "
                f"{', '.join(sorted(AGENT_OPTION_NAMES))} (tether.AgentOptions)"
            )


def check_context(context: object) -> None:
    """`context=` is a `tether.Context` or None (a dict or a number is a mistake mypy would have caught)."""
    if context is not None and not isinstance(context, Context):
        raise ConfigError(f"context= must be a tether.Context or None, not {type(context).__name__}")


class StartOptions(RunOptions, total=False):
    """What `engine.start`, `run` and `run_sync` take: the run options, the run's id and an event log."""

    run_id: str | None
    """The run's id (default: a new ULID); a known id resumes that run."""
    event_log: str | os.PathLike[str] | None
    """Also append this run's events to this JSONL file (besides the engine's sinks)."""


class ResumeOptions(RunOptions, total=False):
    """What `engine.resume` and `start_resume` take: the run options (which may only repeat the stored
    ones) and four of a resume's own."""

    dry_run: bool
    """Replay-strict: the first would-be-live call raises `JournalMissError`, and nothing is written."""
    invalidate: Sequence[int]
    """Entries (by seq) to run again."""
    raise_budget_usd: float | None
    """Raise the run's USD ceiling to this (journaled `budget-raised`; never lowered)."""
    raise_reason: str
    """Why (journaled with the raise, and with `allow_unpriced=True` turned on)."""


PER_SEGMENT_OPTIONS = frozenset({"deadline_s"})
RUN_OPTION_NAMES: tuple[str, ...] = tuple(RunOptions.__annotations__)
DURABLE_OPTIONS: tuple[str, ...] = tuple(n for n in RUN_OPTION_NAMES if n not in PER_SEGMENT_OPTIONS)
"""Run options fixed at the run's start: journaled in its genesis entry, read back by every resume."""


@dataclass(frozen=True, slots=True)
class SegmentOptions:
    """How one segment runs: the caller's `RunOptions` (None: "as stored" on a resume) and its own flags."""

    budget_usd: float | None = None
    containment: Containment | None = None
    max_in_flight_exposure_usd: float | None = None
    strict_pricing: bool | None = None
    allow_unpriced: bool | None = None
    overshoot: Overshoot | None = None
    on_exhausted: OnExhausted | None = None
    budgets: tuple[Budget, ...] | None = None
    forecast_gate: ForecastGate | None = None
    max_identical_tool_calls: int | None = None
    max_spend_rate_usd_per_min: float | None = None
    max_repeated_spawns: int | None = None
    deadline_s: float | None = None
    session: TurnOf | None = None
    dry_run: bool = False
    invalidate: tuple[int, ...] = ()
    resume: bool = False
    """A resume of a run that must already exist (`engine.resume`), not a start."""
    raise_budget_usd: float | None = None
    """A resume that raises the run's USD ceiling to this (journaled `budget-raised`; never lowered)."""
    raise_reason: str = ""
    raised_usd: float | None = None
    """The ceiling as the journal's last `budget-raised` left it (set from the journal, never by a caller)."""

    @property
    def deadline(self) -> float | None:
        limits = [d for d in (self.deadline_s, self.containment.max_duration_s if self.containment else None) if d]
        return min(limits) if limits else None

    @property
    def ceiling(self) -> float | None:
        """The run's USD ceiling: the last raise of it, else `budget_usd` or the containment's `max_usd` when lower."""
        if self.raised_usd is not None:
            return self.raised_usd
        budget, c = self.budget_usd, self.containment
        if c is not None and c.max_usd is not None:
            return c.max_usd if budget is None else min(budget, c.max_usd)
        return budget


def segment_options(options: Mapping[str, Any], what: str, **flags: Any) -> SegmentOptions:
    """`options` checked (unknown names, types a typo would give) as a segment's options, with `flags`."""
    unknown = sorted(set(options) - set(RUN_OPTION_NAMES))
    if unknown:  # what Python raises for an unexpected keyword (mypy reports it before the code runs)
        extra = f" (and {', '.join(RESUME_FLAGS)}: tether.ResumeOptions)" if flags.get("resume") else ""
        raise TypeError(
            f"{what} got an unexpected keyword argument {unknown[0]!r}; the run options are "
            f"{', '.join(RUN_OPTION_NAMES)} (tether.RunOptions){extra}"
        )
    budget = options.get("budget_usd")
    if budget is not None and (isinstance(budget, bool) or not isinstance(budget, int | float) or budget < 0):
        raise ConfigError(f"budget_usd must be a USD amount >= 0, got {budget!r}")
    containment = options.get("containment")
    if containment is not None and not isinstance(containment, Containment):
        raise ConfigError(f"containment must be a tether.Containment, got {type(containment).__name__}")
    mode = options.get("overshoot")
    if mode is not None and mode not in OVERSHOOT_MODES:
        raise ConfigError(f"overshoot must be one of {', '.join(map(repr, OVERSHOOT_MODES))}, got {mode!r}")
    on_exhausted = options.get("on_exhausted")
    if on_exhausted is not None and on_exhausted not in ON_EXHAUSTED_MODES:
        raise ConfigError(f"on_exhausted must be one of {', '.join(map(repr, ON_EXHAUSTED_MODES))}, "
                          f"got {on_exhausted!r}")
    check_foresight(options)
    given = {k: v for k, v in options.items() if v is not None}
    if "budgets" in given:
        given["budgets"] = check_budgets(given["budgets"])
    return SegmentOptions(**given, **flags)


def check_foresight(options: Mapping[str, Any]) -> None:
    """`forecast_gate=` and the runaway brakes' limits checked (docs/budgets.md, *Forecasts* and *Runaway brakes*)."""
    gate = options.get("forecast_gate")
    if gate is not None and gate not in FORECAST_GATES:
        raise ConfigError(f"forecast_gate must be one of {', '.join(map(repr, FORECAST_GATES))}, got {gate!r}")
    for name, least in (("max_identical_tool_calls", 1), ("max_repeated_spawns", 0)):
        n = options.get(name)
        if n is not None and (type(n) is not int or n < least):
            raise ConfigError(f"{name} must be a whole number >= {least}, got {n!r}")
    rate = options.get("max_spend_rate_usd_per_min")
    if rate is not None and (isinstance(rate, bool) or not isinstance(rate, int | float) or not rate > 0):
        raise ConfigError(f"max_spend_rate_usd_per_min must be a USD amount > 0, got {rate!r}")


RESUME_FLAGS: tuple[str, ...] = tuple(n for n in ResumeOptions.__annotations__ if n not in RUN_OPTION_NAMES)


def resume_options(options: Mapping[str, Any]) -> SegmentOptions:
    """`ResumeOptions` as a resuming segment's options (its own flags checked, the run options as `segment_options`)."""
    raise_to = options.get("raise_budget_usd")
    if raise_to is not None and not raise_to > 0:
        raise ConfigError(f"raise_budget_usd must be a positive USD amount, got {raise_to}")
    return segment_options(
        {k: v for k, v in options.items() if k not in RESUME_FLAGS}, "resume()", resume=True,
        dry_run=bool(options.get("dry_run", False)), invalidate=tuple(options.get("invalidate", ())),
        raise_budget_usd=raise_to, raise_reason=str(options.get("raise_reason", "")),
    )


def genesis_of(entries: Iterable[JournalEntry]) -> JournalEntry | None:
    return next((e for e in entries if e.key == GENESIS_KEY and e.scope == ""), None)


def genesis_entry(started_at: float, workflow: str, args_json: Any, opts: SegmentOptions, *,
                  code_hash: str | None = None, forecast: Any = None) -> JournalEntry:
    """The run's first entry: its workflow (and its code's hash), args hash, the durable options every resume reads
    back, and the forecast a `forecast_gate` judged it by."""
    value: dict[str, Any] = {"decision": "genesis", "workflow": workflow, "args_hash": args_hash(args_json)}
    value.update({k: v for k, v in (("code_hash", code_hash), ("forecast", forecast)) if v is not None})
    for name in DURABLE_OPTIONS:
        value[name] = _stored_form(name, getattr(opts, name))
    return JournalEntry(kind="decision", key=GENESIS_KEY, label="genesis", started_at=started_at, value=value)


def _stored_form(name: str, value: Any) -> Any:
    """A durable option as the genesis stores it (flags as booleans, the mode's default spelled out)."""
    if name == "containment":
        return dataclasses.asdict(value) if value is not None else None
    if name in ("strict_pricing", "allow_unpriced"):
        return bool(value)
    if name == "overshoot":
        return value or "hard"
    if name == "on_exhausted":
        return value or "exhausted"
    if name == "budgets":
        return [b.to_json() for b in value] if value else None
    return value


def stored_options(opts: SegmentOptions) -> dict[str, Any]:
    """The durable options given in `opts`, in the form a genesis stores them (JSON)."""
    return {n: _stored_form(n, getattr(opts, n)) for n in DURABLE_OPTIONS if getattr(opts, n) is not None}


def loaded_options(stored: Mapping[str, Any]) -> RunOptions:
    """`stored_options` read back as run options."""
    return cast(RunOptions, {n: _loaded_form(n, v) for n, v in stored.items() if n in DURABLE_OPTIONS})


def _loaded_form(name: str, value: Any) -> Any:
    if name == "containment" and isinstance(value, dict):
        return Containment(**value)
    if name == "budgets" and isinstance(value, list):
        return tuple(Budget.from_json(b) for b in value) or None
    return value


def durable_options(run_id: str, opts: SegmentOptions, genesis: JournalEntry | None,
                    decisions: Iterable[JournalEntry] = ()) -> SegmentOptions:
    """The segment's options: what the genesis fixed, as later operator decisions relaxed it (a raised
    ceiling, unpriced models allowed), wins; a conflicting explicit value is refused."""
    started = genesis.value if genesis is not None and isinstance(genesis.value, dict) else None
    if started is None:
        return opts
    stored_options = dict(started)
    if "overshoot" not in stored_options and "budget_usd" in stored_options:
        stored_options["overshoot"] = "bounded"  # a run started before the hard ceiling keeps the mode it ran in
    raised: float | None = None
    for e in decisions:
        name = decision_name(e) if e.scope == "" else None
        if name == BUDGET_RAISED and isinstance(e.value, dict) and isinstance(e.value.get("new_usd"), int | float):
            raised = float(e.value["new_usd"])
        elif name == UNPRICED_ALLOWED:
            stored_options["allow_unpriced"] = True
    fixed: dict[str, Any] = {}
    for name in DURABLE_OPTIONS:
        if name not in stored_options:
            continue  # a journal older than this option: the caller's value (or the default) holds
        stored, given = _loaded_form(name, stored_options[name]), getattr(opts, name)
        repeats = given is None or given == stored or (name == "budget_usd" and given == raised)
        if name == "allow_unpriced" and given and not stored:
            repeats = True  # turning it on is a relaxation the resume journals (`unpriced-allowed`)
            stored = None
        if not repeats:
            raise ConfigError(
                f"run {run_id!r} was started with {name}={stored!r}; options fixed at a run's start are kept "
                f"by every resume. Omit {name}= (or pass the same value), or start a new run for {given!r}"
                + (" (or raise its ceiling: `tether resume RUN --raise-budget USD`)." if name == "budget_usd"
                   else "."),
                run_id=run_id, option=name, stored=stored_options[name],
            )
        if stored is not None:
            fixed[name] = stored
    return dataclasses.replace(opts, **fixed, raised_usd=raised)
