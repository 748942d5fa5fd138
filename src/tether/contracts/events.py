"""Telemetry events (never journaled), the agent-tree audit `AgentEvent` and `ToolEffectRecord`.

One slotted pydantic dataclass per event type (`@event`), validated as it is built (a wrong field or
value is an error where the event is made), and a discriminated union on `type` (`Event`) derived from
the one list of them. Emitters build the event and hand it to the run's stream, which fills the
envelope (`run_id`, `seq`, `ts`, the span when none is set) as it takes it over. docs/observability.md
lists every type and field.
"""

from __future__ import annotations

import dataclasses
import operator
import typing
from collections.abc import Callable
from dataclasses import field
from typing import Annotated, Any, Literal, NamedTuple, TypeAlias, TypedDict, get_args

from pydantic import BaseModel, ConfigDict, Field, JsonValue, TypeAdapter
from pydantic.dataclasses import dataclass

from tether.contracts.entries import EntryStatus, RunStatus
from tether.contracts.errors import TetherError
from tether.contracts.records import Record, documented
from tether.contracts.results import AgentError, AgentStatus, Stage, ToolBudgetSummary
from tether.contracts.stream import FinishReason
from tether.contracts.usage import Usage


class AgentEvent(BaseModel):
    """One fact of an agent tree (seed 003): a spawn, a refused spawn, or a draw on the shared ceiling."""

    model_config = ConfigDict(frozen=True)

    agent_id: int
    step: int
    kind: Literal["spawn", "spawn_refused", "budget_draw"]
    child_agent_id: int | None = None
    detail: str | None = None
    tokens: int | None = None
    remaining: int | None = None
    usd: float | None = None
    remaining_usd: float | None = None
    parent_agent_id: int | None = None


class ToolEffectRecord(BaseModel):
    """One dispatch attempt's side-effect facts (seed 004); args are never stored, only their hash.

    An orphan (intent without outcome) has `outcome`, `exit_code`, `signal`, `duration_ms` = None.
    """

    model_config = ConfigDict(frozen=True)

    attempt_id: str
    idempotency_key: str
    run_id: str
    span_id: str
    tool: str
    args_hash: str
    executor: str
    workdir: str
    cwd: str | None = None
    work_mount: str | None = None
    started_at: float
    duration_ms: float | None = None
    outcome: Literal["ok", "error", "timeout"] | None = None
    exit_code: int | None = None
    signal: str | None = None


class EventLogError(TetherError):
    """An event log file cannot be read back (a corrupt line before the last one)."""

    code = "event-log"


# -- the envelope -------------------------------------------------------------------------------


EVENT_CONFIG = ConfigDict(extra="forbid")
"""Every event is a slotted pydantic dataclass (`@dataclass(slots=True, kw_only=True, config=EVENT_CONFIG)`
over `@documented`): validated as it is built, its fields documented in place (subclasses inherit them)."""


@dataclass(slots=True, kw_only=True, config=EVENT_CONFIG)
@documented
class BaseEvent(Record):
    """The envelope every event carries. Emitters leave `run_id`, `seq` and `ts` unset: the stream fills them."""

    type: str
    """The event type, e.g. `agent:end`: the union's discriminator."""
    run_id: str = ""
    """The run this event belongs to."""
    seq: int = 0
    """A per-segment telemetry counter (1, 2, ...): not a journal seq."""
    ts: float = 0.0
    """Wall-clock time of the event, epoch seconds."""
    span_id: str | None = None
    """The telemetry span the event opens or closes (`run`, `phase-2`, `agent-7`, `agent-7:call-1`,
    `agent-7:call_1_0`), or for a point event the span it happened in."""
    parent_span_id: str | None = None
    """The span that encloses `span_id`, for events that open or close a span."""
    replayed: bool = False
    """Served from the journal (a replay), not done live: no provider call, no spend."""

    @classmethod
    def field_infos(cls) -> dict[str, Any]:
        """The event's fields (pydantic `FieldInfo`s, with their descriptions), by name."""
        found: dict[str, Any] = cls.__pydantic_fields__  # type: ignore[attr-defined]
        return found

    @classmethod
    def layout(cls) -> EventLayout:
        """The event's slots as the run's stream keeps them (`EventLayout`); built on first use and kept on the
        class (as `Record.adapter` is: a fact about the class), so a run does not resolve type hints again."""
        found: EventLayout | None = cls.__dict__.get("_layout")
        if found is None:
            fields = dataclasses.fields(cls)
            names = tuple(f.name for f in fields)
            hints = typing.get_type_hints(cls)
            usage_at = tuple(i for i, f in enumerate(fields)
                             if hints[f.name] is Usage or Usage in get_args(hints[f.name]))
            found = EventLayout(names, operator.attrgetter(*names), usage_at)
            setattr(cls, "_layout", found)  # noqa: B010 (a slotted class declares no such attribute)
        return found


class EventLayout(NamedTuple):
    """How an event class's instances are kept as plain tuples: its slot names, one reader of them all (a C
    call) and the positions of the fields that may hold a `Usage`."""

    names: tuple[str, ...]
    read: Callable[[Any], Any]
    usage_at: tuple[int, ...]


@dataclass(slots=True, kw_only=True, config=EVENT_CONFIG)
@documented
class BudgetFigures(BaseEvent):
    """Spend against the run's USD ceiling and the agent tree's token ceiling, at the moment of the event."""

    spent_usd: float = 0.0
    """USD the run has spent (journaled spend restored at the segment's start included)."""
    held_usd: float = 0.0
    """USD held as admission reserves by invocations still running."""
    ceiling_usd: float | None = None
    """The run's USD ceiling (`budget_usd`, or containment `max_usd`); None without one."""
    remaining_usd: float | None = None
    """USD left under the ceiling net of holds; None without a ceiling."""
    spent_tokens: int = 0
    """Tokens the agent tree has drawn (input plus output)."""
    held_tokens: int = 0
    """Tokens held by invocations still running."""
    ceiling_tokens: int | None = None
    """The tree's token ceiling (containment `max_tokens`); None without one."""
    remaining_tokens: int | None = None
    """Tokens left under the tree's ceiling net of holds; None without a ceiling."""


class Figures(TypedDict):
    """The `BudgetFigures` fields as keyword arguments (`RunStart(workflow=..., **figures)`)."""

    spent_usd: float
    held_usd: float
    ceiling_usd: float | None
    remaining_usd: float | None
    spent_tokens: int
    held_tokens: int
    ceiling_tokens: int | None
    remaining_tokens: int | None


@dataclass(slots=True, kw_only=True, config=EVENT_CONFIG)
@documented
class AgentScoped(BaseEvent):
    """An event of one agent invocation; the engine fills `agent_id`, `label` and `depth`."""

    agent_id: int | None = None
    """The agent's id, unique in its run (None before it has one, e.g. `agent:queued`)."""
    label: str | None = None
    """The `label=` the invocation was given."""
    depth: int = 0
    """Depth in the agent tree: agents the workflow starts are at 1."""


@dataclass(slots=True, kw_only=True, config=EVENT_CONFIG)
@documented
class TreeRow(BaseEvent):
    """The fields of the `AgentEvent` row the same fact journals (seed 003)."""

    agent_id: int
    """The agent the fact belongs to (the parent, for a spawn; the drawing agent, for a draw)."""
    step: int = 0
    """The agent's turn the fact occurred on."""
    child_agent_id: int | None = None
    """The spawned child's agent id (spawns)."""
    detail: str | None = None
    """The child's goal (spawns) or the cap label `agents` | `depth` | `budget` (refusals)."""
    tokens: int | None = None
    """Tokens drawn: the turn's input plus output (draws)."""
    remaining: int | None = None
    """Tree tokens left after the draw; None without a token ceiling (draws)."""
    usd: float | None = None
    """USD drawn (draws)."""
    remaining_usd: float | None = None
    """Run USD left after the draw; None without a ceiling (draws)."""
    parent_agent_id: int | None = None
    """The parent of `agent_id` (spawns)."""

    def row(self) -> AgentEvent:
        """This fact as the `AgentEvent` row `engine.agent_events(run_id)` returns."""
        kind = {"spawn": "spawn", "spawn:refused": "spawn_refused"}.get(self.type, "budget_draw")
        values = {name: getattr(self, name) for name in AgentEvent.model_fields if name != "kind"}
        return AgentEvent.model_validate({**values, "kind": kind})


# -- the run ----------------------------------------------------------------------------------


@dataclass(slots=True, kw_only=True, config=EVENT_CONFIG)
@documented
class RunStart(BudgetFigures):
    """A segment of a run started (a new run, or a resume); figures include spend restored from the journal."""

    type: Literal["run:start"] = "run:start"
    workflow: str
    """The workflow's registered name."""
    resumed: bool = False
    """The journal already held entries: this segment resumes the run."""
    max_agents: int | None = None
    """The containment's agent cap, if any."""


@dataclass(slots=True, kw_only=True, config=EVENT_CONFIG)
@documented
class RunEnd(BudgetFigures):
    """The segment settled: its status, cost and what it replayed."""

    type: Literal["run:end"] = "run:end"
    status: RunStatus
    """`ok` | `error` | `cancelled` | `exhausted` | `suspended` (`running` never ends a run)."""
    cost_usd: float = 0.0
    """The run's total cost, folded from the journal (`outcome.cost.total_usd`)."""
    orphaned_usd: float = 0.0
    """Estimated spend of calls a crash cut off, included in `cost_usd`."""
    orphaned_calls: int = 0
    """How many calls a crash cut off (charged in `orphaned_usd`)."""
    reused_usd: float = 0.0
    """A fork's: what its source paid for the calls it reused (`outcome.cost.reused_usd`, not in `cost_usd`)."""
    reused_calls: int = 0
    """A fork's: the agent calls it reused from its source."""
    usage: Usage = Usage()
    """The run's total usage."""
    hits: int = 0
    """Calls served from the journal."""
    misses: int = 0
    """Calls the journal did not hold (run live)."""
    reruns: int = 0
    """Journaled calls run again (cancelled, transport errors, redispatches)."""
    pending: list[str] = field(default_factory=list)
    """Open suspension keys (`suspended` and `exhausted` runs)."""
    error_type: str | None = None
    """The error's type name when the run settled `error` or `cancelled`."""
    error: str | None = None
    """The error's message."""


@dataclass(slots=True, kw_only=True, config=EVENT_CONFIG)
@documented
class PhaseStart(BaseEvent):
    """`async with ctx.phase(name)` was entered."""

    type: Literal["phase:start"] = "phase:start"
    phase: str
    """The phase name."""


@dataclass(slots=True, kw_only=True, config=EVENT_CONFIG)
@documented
class PhaseEnd(BaseEvent):
    """A phase's block was left."""

    type: Literal["phase:end"] = "phase:end"
    phase: str
    """The phase name."""
    error_type: str | None = None
    """The exception type that left the block, if one did."""


@dataclass(slots=True, kw_only=True, config=EVENT_CONFIG)
@documented
class LogLine(BaseEvent):
    """`ctx.log(level, msg, **fields)`: telemetry only, never journaled."""

    type: Literal["log"] = "log"
    level: str
    """The level as given (`info`, `warning`, ...)."""
    msg: str
    """The message."""
    fields: dict[str, JsonValue] = field(default_factory=dict)
    """The keyword fields passed to `ctx.log` (JSON values)."""


@dataclass(slots=True, kw_only=True, config=EVENT_CONFIG)
@documented
class RunWarning(BaseEvent):
    """Something the run wants you to know but did not stop for; also on the `tether` logger."""

    type: Literal["warning"] = "warning"
    message: str
    """The warning, with what to do about it."""


@dataclass(slots=True, kw_only=True, config=EVENT_CONFIG)
@documented
class ChildStart(BaseEvent):
    """A child workflow (`ctx.workflow`) started."""

    type: Literal["child:start"] = "child:start"
    workflow: str
    """The child's workflow name."""
    scope: str = ""
    """The child's scope path in the journal."""
    ceiling_usd: float | None = None
    """The child's sub-account ceiling; None without one."""


@dataclass(slots=True, kw_only=True, config=EVENT_CONFIG)
@documented
class ChildEnd(BaseEvent):
    """A child workflow settled (or was served from the journal)."""

    type: Literal["child:end"] = "child:end"
    workflow: str
    """The child's workflow name."""
    status: EntryStatus
    """How the child settled (`ok`, `error`, `limit`, `cancelled`, `exhausted`)."""


@dataclass(slots=True, kw_only=True, config=EVENT_CONFIG)
@documented
class ExternalWaiting(BaseEvent):
    """A branch parked on `ctx.await_external(key)`."""

    type: Literal["external:waiting"] = "external:waiting"
    key: str
    """The key `resolve_external` is called with."""


# -- budgets ----------------------------------------------------------------------------------


@dataclass(slots=True, kw_only=True, config=EVENT_CONFIG)
@documented
class BudgetUpdate(BudgetFigures):
    """A live debit: what one provider call's usage just cost, and the run's figures after it."""

    type: Literal["budget:update"] = "budget:update"
    model: str
    """The `adapter:model` that was billed."""
    usd: float
    """This debit, USD."""
    agent_id: int | None = None
    """The agent whose call was billed."""


@dataclass(slots=True, kw_only=True, config=EVENT_CONFIG)
@documented
class BudgetDraw(TreeRow):
    """One model turn's draw on the shared ceilings (one `budget_draw` row per turn)."""

    type: Literal["budget:draw"] = "budget:draw"


@dataclass(slots=True, kw_only=True, config=EVENT_CONFIG)
@documented
class BudgetRefused(BudgetFigures):
    """Admission refused an invocation: its reserve does not fit under a ceiling."""

    type: Literal["budget:refused"] = "budget:refused"
    agent_id: int | None = None
    """The agent that asked (the parent; None for the workflow)."""
    what: str
    """What was refused (`agent 'label'`)."""
    account: str | None = None
    """The account whose ceiling refused (`run`, or a child workflow's scope)."""
    reserve_usd: float | None = None
    """The reserve that did not fit."""
    message: str
    """The refusal with its arithmetic."""


# -- agents -----------------------------------------------------------------------------------


@dataclass(slots=True, kw_only=True, config=EVENT_CONFIG)
@documented
class AgentQueued(AgentScoped):
    """An invocation waits for a slot of its depth level (`max_concurrent`)."""

    type: Literal["agent:queued"] = "agent:queued"


@dataclass(slots=True, kw_only=True, config=EVENT_CONFIG)
@documented
class AgentStart(AgentScoped):
    """An agent invocation started (or was served from the journal, `replayed`)."""

    type: Literal["agent:start"] = "agent:start"
    parent_agent_id: int | None = None
    """The agent that spawned it; None for agents the workflow started."""
    agent_type: str | None = None
    """The `agent_type=` profile, if any."""
    model: str | None = None
    """The primary `adapter:model` routed for it."""
    phase: str | None = None
    """The workflow phase it runs in."""
    resumed: bool = False
    """Continued from a checkpoint of an earlier segment."""
    turns: int = 0
    """Turns already taken (a resumed checkpoint's)."""
    prompt: str | None = None
    """The prompt (first 2,000 characters); exporters record it only when asked to capture content."""


@dataclass(slots=True, kw_only=True, config=EVENT_CONFIG)
@documented
class AgentEnd(AgentScoped):
    """An agent invocation settled; `cost_usd` equals the journaled terminal's cost."""

    type: Literal["agent:end"] = "agent:end"
    status: AgentStatus
    """`ok` | `error` | `limit` | `cancelled` | `skipped`."""
    output: str | None = None
    """A summary of the output: text, or compact JSON, cut to 500 characters."""
    usage: Usage = Usage()
    """Tokens the invocation consumed."""
    cost_usd: float = 0.0
    """What it cost, USD, as journaled (spend of calls a crash cut off included)."""
    turns: int = 0
    """Model turns taken."""
    served_by: str | None = None
    """The `adapter:model` that answered last (differs from the request after a failover)."""
    finish_reason: FinishReason | None = None
    """How the last model reply ended."""
    tool_budget: ToolBudgetSummary | None = None
    """How close it came to its tool budget, when one was configured."""
    error: AgentError | None = None
    """Why it did not settle `ok`."""
    reason: str | None = None
    """Which stop ended the loop (`max-turns`, `no-progress`, `tool-budget`, `budget`, ...)."""
    provider_calls: int = 0
    """Provider calls made (retries and failovers included)."""
    parent_agent_id: int | None = None
    """The agent that spawned it; None for agents the workflow started."""


@dataclass(slots=True, kw_only=True, config=EVENT_CONFIG)
@documented
class AgentFailed(AgentScoped):
    """An invocation settled with an error (just before its `agent:end`)."""

    type: Literal["agent:error"] = "agent:error"
    status: AgentStatus
    """The status it settled with."""
    error: AgentError
    """The typed error."""


class SchemaIssue(BaseModel):
    """One validation problem of a structured output."""

    model_config = ConfigDict(frozen=True, use_attribute_docstrings=True)

    loc: list[str | int] = []
    """Where in the output."""
    msg: str = ""
    """What is wrong."""
    type: str = ""
    """pydantic's error type."""


@dataclass(slots=True, kw_only=True, config=EVENT_CONFIG)
@documented
class SchemaRetry(AgentScoped):
    """A structured output failed validation; the model is asked again with the issues."""

    type: Literal["agent:schema-retry"] = "agent:schema-retry"
    attempt: int
    """Which re-prompt this is (1, 2, ...)."""
    issues: list[SchemaIssue] = field(default_factory=list)
    """What failed validation."""


@dataclass(slots=True, kw_only=True, config=EVENT_CONFIG)
@documented
class AgentStream(AgentScoped):
    """A text delta of a model reply, with the invocation's usage and cost so far."""

    type: Literal["agent:stream"] = "agent:stream"
    call: int = 0
    """The invocation's provider call number the delta belongs to."""
    model: str
    """The `adapter:model` streaming."""
    text: str
    """The delta."""
    usage: Usage = Usage()
    """The invocation's usage so far (this call's usage reported up to now included)."""
    cost_usd: float = 0.0
    """The invocation's live cost so far, USD."""


@dataclass(slots=True, kw_only=True, config=EVENT_CONFIG)
@documented
class ModelStart(AgentScoped):
    """A provider call left (one per attempt: retries and failovers are calls too)."""

    type: Literal["model:start"] = "model:start"
    call: int
    """The invocation's provider call number."""
    model: str
    """The `adapter:model` called."""
    provider: str
    """The adapter id (`anthropic`, `openai`, `fake`, ...)."""
    max_tokens: int | None = None
    """The request's `max_output_tokens` (after the budget's clamp)."""
    stage: Stage = "loop"
    """Which dispatch: `loop`, `extract`, `reserve-summary`, ..."""


@dataclass(slots=True, kw_only=True, config=EVENT_CONFIG)
@documented
class ModelEnd(AgentScoped):
    """A provider call settled (or, `replayed`, the journaled usage of a model served from the journal)."""

    type: Literal["model:end"] = "model:end"
    call: int
    """The invocation's provider call number (replays number their models 1, 2, ...)."""
    model: str
    """The `adapter:model` called."""
    provider: str
    """The adapter id."""
    status: Literal["ok", "error", "cancelled"] = "ok"
    """How the call settled."""
    usage: Usage = Usage()
    """This call's usage (a replay: the model's journaled usage in the invocation)."""
    cost_usd: float = 0.0
    """This call's cost, USD (0 for unpriced models)."""
    finish_reason: FinishReason | None = None
    """How the reply ended; None when it did not finish."""
    max_tokens: int | None = None
    """The request's `max_output_tokens`."""
    error: AgentError | None = None
    """The call's error, when it failed."""
    calls: int = 1
    """How many provider calls this event stands for (a replay folds a model's calls into one)."""


@dataclass(slots=True, kw_only=True, config=EVENT_CONFIG)
@documented
class ToolStart(AgentScoped):
    """A validated, permitted tool call is about to execute."""

    type: Literal["tool:start"] = "tool:start"
    tool: str
    """The tool's name."""
    call_id: str
    """The engine-minted tool-call id (`call_<turn>_<index>`)."""
    ordinal: int | None = None
    """The call's ordinal within the invocation (the effect ledger's idempotency key uses it)."""
    args: dict[str, JsonValue] = field(default_factory=dict)
    """The validated arguments."""


@dataclass(slots=True, kw_only=True, config=EVENT_CONFIG)
@documented
class ToolEnd(AgentScoped):
    """A tool call ended: executed, or refused/skipped before executing."""

    type: Literal["tool:end"] = "tool:end"
    tool: str
    """The tool's name."""
    call_id: str
    """The engine-minted tool-call id."""
    ordinal: int | None = None
    """The call's ordinal, for executed calls."""
    is_error: bool = False
    """The model got an error result."""
    executed: bool = True
    """The tool ran; False for denied, invalid, refused and skipped calls."""
    outcome: str | None = None
    """Why it did not execute: `refused` (finalization window), `skipped` (tool budget expiry); None otherwise."""
    guard: str | None = None
    """The guard that refused or skipped it (`finalization-window`, `max_tool_calls`, `tool_units`)."""
    result: str | None = None
    """The result text the model reads (first 1,000 characters)."""


@dataclass(slots=True, kw_only=True, config=EVENT_CONFIG)
@documented
class ApprovalPending(AgentScoped):
    """A tool call waits for a human's approval (`resolve_external(key, "allow")`)."""

    type: Literal["approval:pending"] = "approval:pending"
    key: str
    """The key to resolve."""
    tool: str | None = None
    """The tool asking."""
    usage: Usage = Usage()
    """What the parked agent's calls used so far (it has no `agent:end` until it is resolved)."""
    cost_usd: float = 0.0
    """What they cost so far."""
    provider_calls: int = 0
    """The provider calls it made so far."""


@dataclass(slots=True, kw_only=True, config=EVENT_CONFIG)
@documented
class Spawn(TreeRow):
    """An agent spawned a child (`spawn_agent`)."""

    type: Literal["spawn"] = "spawn"


@dataclass(slots=True, kw_only=True, config=EVENT_CONFIG)
@documented
class SpawnRefused(TreeRow):
    """The containment boundary refused a spawn; `detail` is the cap label."""

    type: Literal["spawn:refused"] = "spawn:refused"
    goal: str = ""
    """The refused child's goal (first 200 characters)."""


Event: TypeAlias = Annotated[
    RunStart | RunEnd | PhaseStart | PhaseEnd | LogLine | RunWarning | ChildStart | ChildEnd | ExternalWaiting
    | BudgetUpdate | BudgetDraw | BudgetRefused
    | AgentQueued | AgentStart | AgentEnd | AgentFailed | SchemaRetry | AgentStream | ModelStart | ModelEnd
    | ToolStart | ToolEnd | ApprovalPending | Spawn | SpawnRefused,
    Field(discriminator="type"),
]
"""Any telemetry event; `event.type` tells which model it is. The one list of them: the tables below are
derived from it."""

EVENT_ADAPTER: TypeAdapter[Event] = TypeAdapter(Event)

EVENT_TYPES: dict[str, type[BaseEvent]] = {
    cls.field_infos()["type"].default: cls for cls in get_args(get_args(Event)[0])
}
"""Every event type and its model."""

EventType = Literal[
    "run:start", "run:end", "phase:start", "phase:end", "log", "warning", "child:start", "child:end",
    "external:waiting", "budget:update", "budget:draw", "budget:refused", "agent:queued", "agent:start",
    "agent:end", "agent:error", "agent:schema-retry", "agent:stream", "model:start", "model:end", "tool:start",
    "tool:end", "approval:pending", "spawn", "spawn:refused",
]
"""Every event type, for type checkers (a literal must be spelled out; the import check below keeps it
the union's)."""
if set(get_args(EventType)) != set(EVENT_TYPES):  # pragma: no cover - a mismatch is a bug found at import
    raise TypeError(f"EventType and the Event union differ: {set(get_args(EventType)) ^ set(EVENT_TYPES)}")


def matches(pattern: str, type: str) -> bool:
    """`"*"` matches everything, `"agent:*"` every agent event, anything else one type."""
    return pattern in ("*", type) or (pattern.endswith(":*") and type.startswith(pattern[:-1]))

