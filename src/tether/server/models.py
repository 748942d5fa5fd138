"""The HTTP API's request and response bodies: every route answers one of these, and OpenAPI is built from them."""

from __future__ import annotations

from typing import Annotated, Literal, get_args

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, JsonValue

from tether.contracts.entries import JournalEntry, MetaStatus
from tether.contracts.events import AgentEvent, ToolEffectRecord
from tether.contracts.messages import Message
from tether.contracts.usage import Usage
from tether.engine.budget_suspension import BudgetNeed
from tether.engine.forecasting import JudgedForecast
from tether.journal.cost import CostReport
from tether.journal.tree import AgentNode

CURSOR_PATTERN = r"^[0-9]+(\.[0-9]+)?([eE][+-]?[0-9]+)?~.+$"
"""A run-list cursor is a position, `<created_at>~<run_id>`."""
BODY = ConfigDict(extra="forbid", strict=True)
"""Request bodies are JSON and validated strictly: `false` is not a number, `"1"` is not an int."""


def _integral(value: object) -> object:
    """JSON Schema's `integer` admits `3.0`: an integral float is the int it names (strict mode alone refuses it)."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


JsonInt = Annotated[int, BeforeValidator(_integral)]
"""A request body's integer: what the OpenAPI document's `"type": "integer"` admits, `3` and `3.0`, never `"3"`."""
RUN_STATUSES: tuple[MetaStatus, ...] = get_args(MetaStatus)


class ErrorBody(BaseModel):
    """What went wrong: a stable `code`, a message that says what to do, and the numbers behind it."""

    code: str
    message: str
    data: dict[str, JsonValue] = Field(default_factory=dict)


class ErrorResponse(BaseModel):
    """Every 4xx/5xx answer of the API."""

    error: ErrorBody


class Health(BaseModel):
    """`GET /healthz`: the server is up (never behind the token)."""

    ok: bool = True
    version: str
    mode: Literal["app", "store"]
    """`app`: an application engine is loaded (runs can be started and driven here); `store`: read side only."""


class StreamEnd(BaseModel):
    """The `data` of the last frame (`event: end`) of an event stream: the run settled (or is not followed further)."""

    run_id: str
    status: MetaStatus | None = None


class RunSummary(BaseModel):
    """One row of the run list."""

    run_id: str
    workflow: str
    status: MetaStatus
    budget_usd: float | None = None
    """The run's USD ceiling as it stands (a `budget-raised` decision included)."""
    spent_usd: float = 0.0
    """What counts against the ceiling: the cost report's `total_usd` (orphaned calls included)."""
    orphaned_usd: float = 0.0
    """The part of `spent_usd` that is calls a crash cut off, at their worst case (or as settled)."""
    reused_usd: float = 0.0
    """A fork's: what its source paid for the calls it reused (the cost report's `reused_usd`; not in `spent_usd`)."""
    created_at: float
    updated_at: float
    duration_s: float
    """Wall time from the run's creation to its last settle (to now while it runs)."""
    segments: int = 1
    pending: int = 0
    """Open suspensions (human-in-the-loop keys and approvals) waiting for a resolution."""
    driven_here: bool = False
    """This server's engine is driving the run right now (it can be cancelled here)."""


class RunPage(BaseModel):
    """A page of runs, newest first; pass `next_cursor` back as `cursor` for the next page."""

    runs: list[RunSummary]
    next_cursor: str | None = None


class Ceilings(BaseModel):
    """What the run was started under: its USD ceiling and its agent tree's containment caps."""

    budget_usd: float | None = None
    max_agents: int | None = None
    max_concurrent: int | None = None
    max_depth: int | None = None
    max_tokens: int | None = None
    max_usd: float | None = None
    max_duration_s: float | None = None
    forecast: JudgedForecast | None = None
    """The forecast a `forecast_gate` judged the run by (its P50/P90/P95 and whether it was over), shown beside the
    ceiling; None: the run had no gate."""


class Settled(BaseModel):
    """The last settle of the run: how its latest segment ended."""

    status: MetaStatus
    value: JsonValue = None
    error: dict[str, JsonValue] | None = None
    pending: list[str] = Field(default_factory=list)
    at: float | None = None


class Suspension(BaseModel):
    """An open suspension: `await_external(key)`, a tool approval (both waiting for `POST .../resolve`), or the
    `budget` suspension of a run its USD ceiling parked (waiting for `POST .../raise-budget`)."""

    key: str
    kind: Literal["external", "approval", "budget"]
    seq: int
    scope: str
    label: str | None = None
    agent_id: int | None = None
    tool: str | None = None
    args: JsonValue = None
    since: float | None = None
    accepts: list[JsonValue] | None = None
    """The only values a resolution may carry: `["allow", "deny"]` for an approval (exactly those), a declared
    enum's (or const's) values; None when any value the schema admits will do."""
    value_schema: dict[str, JsonValue] | None = None
    """The JSON Schema the `await_external` declared (None: any JSON value)."""
    budget: BudgetNeed | None = None
    """A budget suspension's needs: the ceiling that stopped the run, what it spent, why, and a suggested raise."""


class SpendPoint(BaseModel):
    """One agent's spend on the run's time line: the spend chart, from the same fold as `cost`."""

    t: float
    """Seconds after the run started: when the agent settled (or was last heard of, still running)."""
    agent_id: int | None = None
    label: str | None = None
    usd: float
    """What the agent counts against the ceiling (its orphaned calls included)."""
    orphaned_usd: float = 0.0
    total_usd: float
    """The run's cumulative spend at this point: the last point's is `cost.total_usd`."""
    settled: bool = True


class ForkLineage(BaseModel):
    """Where a fork came from (its genesis's lineage) and what it reused: the run page's lineage block."""

    forked_from: str
    """The source run."""
    at: int | None = None
    """The source seq the fork re-ran from (entries before it were copied); None: the whole journal."""
    reused_through: int
    """The fork's seq of its last copied entry: entries 2..reused_through are copies the source paid for."""
    models: dict[str, str] = Field(default_factory=dict)
    """Model swaps: agent label (or type) -> the `adapter:model` the fork ran it on."""
    reused_usd: float = 0.0
    """What the source paid for the copied calls the fork reused (the cost report's `reused_usd`)."""
    reused_calls: int = 0
    new_usd: float = 0.0
    """The fork's own spend (the cost report's `total_usd`)."""
    diff: str
    """API path of the diff of the source against this fork."""


class ForkRef(BaseModel):
    """One fork of a run: the run page's list of forks links each."""

    run_id: str
    workflow: str
    status: MetaStatus
    created_at: float
    at: int | None = None
    """The source seq it re-ran from; None: it copied the whole journal."""


class ForkList(BaseModel):
    """`GET /api/runs/{run_id}/forks`: the runs forked from this one (each fork's `parent_run_id`), oldest first."""

    run_id: str
    forks: list[ForkRef] = Field(default_factory=list)


class ReuseMark(BaseModel):
    """A journal entry a fork copied from its source: `reused` unless its agent call is one the fork's code
    did not reach (the settle's `unreused` list; such copies count in neither run's spend)."""

    seq: int
    source_seq: int | None = None
    """The entry's seq in the source run."""
    reused: bool = True
    source_at: float | None = None
    """When the source journaled it (a copy keeps its source's time: it happened before the fork started)."""


class RunDetail(RunSummary):
    """`GET /api/runs/{run_id}`: the summary plus args, ceilings, the last outcome and what is pending."""

    args: JsonValue = None
    ceilings: Ceilings
    outcome: Settled | None = None
    suspensions: list[Suspension] = Field(default_factory=list)
    cost: CostReport
    spend: list[SpendPoint] = Field(default_factory=list)
    """The spend chart's series: one point per agent this run paid for (a fork's reused copies are not its
    spend), summing to `cost.total_usd`."""
    cut_seqs: list[int] = Field(default_factory=list)
    """Journal seqs of the dispatch records a crash cut off (charged at their worst case)."""
    entries: int
    """Journal entries so far."""
    started_at: float | None = None
    """When the genesis decision was journaled (the spend chart's origin)."""
    can_start: bool = False
    """The workflow is registered with this server's engine (a resolve resumes it here)."""
    lineage: ForkLineage | None = None
    """A fork's source, cut and reuse; None for a run that is not a fork."""


class JournalPage(BaseModel):
    """Journal entries in seq order; pass `next_cursor` back as `cursor` for the next page."""

    run_id: str
    entries: list[JournalEntry]
    total: int
    next_cursor: str | None = None
    reuse: list[ReuseMark] = Field(default_factory=list)
    """A fork's: the entries of this page copied from its source (empty for a run that is not a fork)."""


class TreeNode(AgentNode):
    """One agent of the tree, with where it sits and when it ran."""

    depth: int = 1
    agent_type: str | None = None
    model: str | None = None
    seq: int
    """The journal seq of the agent's `running` entry."""
    started_at: float | None = None
    ended_at: float | None = None
    transcript: str | None = None
    """API path of the agent's transcript (its last checkpoint), when one can exist."""


class QueuedAgent(BaseModel):
    """An agent waiting for a concurrency slot (seen live by this server; never journaled)."""

    label: str | None = None
    depth: int = 1
    since: float


class TreeView(BaseModel):
    """`GET /api/runs/{run_id}/tree`: the agents, the `AgentEvent` audit rows and the live queue."""

    run_id: str
    agents: list[TreeNode]
    events: list[AgentEvent]
    queued: list[QueuedAgent] = Field(default_factory=list)
    max_tokens: int | None = None


class LedgerView(BaseModel):
    """`GET /api/runs/{run_id}/ledger`: one record per tool dispatch attempt (orphans have no outcome)."""

    run_id: str
    records: list[ToolEffectRecord]


class Transcript(BaseModel):
    """An agent's conversation as its last checkpoint holds it (system prompt excluded), and its output.

    An agent that answered in its first turn never checkpointed: `messages` is empty and `output`
    (from its journaled terminal) is the whole story.
    """

    run_id: str
    agent_id: int
    label: str | None = None
    status: str
    checkpoint_ref: str
    checkpointed: bool
    turns: int = 0
    messages: list[Message] = Field(default_factory=list)
    output: JsonValue = None
    error: dict[str, JsonValue] | None = None
    usage: Usage = Field(default_factory=Usage)
    served_by: str | None = None
    redacted: bool = Field(default=False, description="Archive or redact removed its text (messages and output "
                           "empty); the digests its terminal journaled still check.")


class ResolveRequest(BaseModel):
    """`POST /api/runs/{run_id}/resolve`: the suspension's key and the JSON value that closes it."""

    model_config = BODY

    key: str = Field(min_length=1, max_length=500)
    value: JsonValue = None


class ResolveResult(BaseModel):
    """A resolution was journaled (the first valid closer wins)."""

    run_id: str
    key: str
    woke_live_run: bool
    """The run was live in this server and the parked branch continued at once."""
    resumed: bool
    """The run had settled `suspended`; this server's engine resumed it (its workflow is registered here)."""
    status: MetaStatus


class RaiseBudgetRequest(BaseModel):
    """`POST /api/runs/{run_id}/raise-budget`: the new USD ceiling (above the current one) and why."""

    model_config = BODY

    usd: float = Field(gt=0, allow_inf_nan=False)
    reason: str = Field(default="", max_length=500)


class RaiseBudgetResult(BaseModel):
    """The raise was journaled (`budget-raised`, as `engine.raise_budget` does)."""

    run_id: str
    ceiling_usd: float | None
    """The run's ceiling now."""
    resolved: list[str] = Field(default_factory=list)
    """The budget suspensions the raise closed."""
    resumed: bool
    """The run was parked (`suspended`) and this server's engine resumed it (its workflow is registered here)."""
    status: MetaStatus
    cost: CostReport


class CancelRequest(BaseModel):
    """`POST /api/runs/{run_id}/cancel`."""

    model_config = BODY

    reason: str = Field(default="cancelled from tether serve", max_length=500)


class CancelResult(BaseModel):
    """The cancel was taken: settled at once, or requested of the run's driver (as `tether cancel` does)."""

    run_id: str
    cancelled: bool = True
    """The run settled `cancelled` now, or this server is stopping it; False: requested of the process that
    drives it, which settles it at its next lease renewal."""
    reason: str
    status: MetaStatus = "cancelled"
    """The run's status as the call left it: `cancelled`, or `running` until its driver settles it."""


class ContainmentRequest(BaseModel):
    """Caps for the new run's agent tree (see `tether.Containment`)."""

    model_config = BODY

    max_agents: JsonInt = Field(ge=1)
    max_concurrent: JsonInt = Field(ge=1)
    max_depth: JsonInt = Field(ge=1)
    max_tokens: Annotated[int | None, BeforeValidator(_integral)] = Field(default=None, ge=1)
    max_usd: float | None = Field(default=None, ge=0)
    max_duration_s: float | None = Field(default=None, gt=0)


class StartRequest(BaseModel):
    """`POST /api/runs`: start a run of a workflow registered with the app engine."""

    model_config = BODY

    workflow: str = Field(min_length=1, max_length=200)
    args: dict[str, JsonValue] = Field(default_factory=dict)
    run_id: str | None = Field(default=None, min_length=1, max_length=200, pattern=r"^[A-Za-z0-9._:-]+$")
    budget_usd: float | None = Field(default=None, ge=0)
    containment: ContainmentRequest | None = None
    deadline_s: float | None = Field(default=None, gt=0)
    queue: str | None = Field(default=None, min_length=1, max_length=200)
    """Enqueue the run on this queue for `tether worker` processes (PostgreSQL store) instead of driving it here."""
    priority: JsonInt = Field(default=0, ge=-(2**31), lt=2**31)
    """With `queue`: higher runs first."""


class StartResult(BaseModel):
    run_id: str
    workflow: str
    status: MetaStatus
    url: str
    """API path of the new run."""


class RunListQuery(BaseModel):
    """Query of `GET /api/runs`."""

    status: MetaStatus | None = None
    limit: int = Field(default=50, ge=1, le=500)
    cursor: str | None = Field(default=None, max_length=1000, pattern=CURSOR_PATTERN,
                               description="The `next_cursor` of the previous page.")


class JournalQuery(BaseModel):
    """Query of `GET /api/runs/{run_id}/journal`: entries after `cursor` (a seq), at most `limit`."""

    limit: int = Field(default=500, ge=1, le=5000)
    cursor: str | None = Field(default=None, max_length=40, pattern=r"^[0-9]+$",
                               description="The seq of the last entry seen (the previous page's `next_cursor`).")
