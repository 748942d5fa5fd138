"""The cost report: a pure fold over the journal, identical for a run and its replays.

An agent invocation's spend comes from its terminal once it has one (the priced tally of every call
it made, plus `orphaned`: calls a crash cut off before they settled). An invocation without a
terminal (its segment crashed, or it is parked on an approval) is charged what its journaled turn
draws say it spent, plus the priced worst case of every dispatch no draw settled: the provider may
have billed those calls, and nothing journaled says otherwise. That worst-case part is
`orphaned_usd`, kept apart from `spent_usd` (what settled draws and terminals say) and included in
`total_usd` and in every ceiling check of a resumed run.

Two operator decisions change the figures from the point they are journaled: `orphans-settled`
replaces the orphaned figure known then with the provider's own number (every orphan known at that
point is scaled by the same factor, so per-scope sums stay consistent), and `budget-raised` raises the
run's ceiling (`ceiling_usd`).
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from tether.contracts.entries import JournalEntry
from tether.contracts.usage import ZERO_USAGE, Usage, sum_usage
from tether.journal.lineage import UNREUSED_MEMBER, lineage_from
from tether.journal.scope import is_under

UNTYPED = "(untyped)"
"""The `by_agent_type` bucket of agents started without an `agent_type`."""
ORPHANS_SETTLED = "orphans-settled"
BUDGET_RAISED = "budget-raised"
UNPRICED_ALLOWED = "unpriced-allowed"
COMPACTION_PURPOSE = "compaction"
"""The `purpose` a context compaction's summarize call journals on its `dispatch` fact (`tether.agents.compaction`)."""
REDISPATCH = "redispatch"
"""The fact a redispatched invocation journals as it restarts from its checkpoint: `through`, the last dispatch
the checkpoint holds. Turns drawn after it were paid and then lost with the process (the agent sends them again)."""
MONEY_DECISIONS = frozenset({"genesis", "settle", ORPHANS_SETTLED, BUDGET_RAISED, UNPRICED_ALLOWED})
"""The run-level decisions a cost fold reads besides the agents' entries (a fork's genesis and settles say
which calls the source paid for)."""


class OrphanSettlement(BaseModel):
    """An operator's settlement of a run's orphaned calls from the provider's own usage records."""

    model_config = ConfigDict(frozen=True)

    seq: int
    usd: float
    """The orphaned figure from then on (what the provider says the cut calls cost)."""
    old_usd: float
    """The figure it replaced (the cut calls at their worst case)."""
    calls: int
    reason: str = ""
    by: str = ""
    at: float | None = None


Charged = Literal["recorded", "worst-case", "settled"]
"""How a lost call is charged: its journaled usage (`recorded`: a turn drawn, then re-sent after a kill), its
dispatch's priced worst case (`worst-case`: an orphan no draw settled), or an operator's `settled` figure."""


class LostCall(BaseModel):
    """Provider calls of one agent paid (or possibly paid) and lost to a kill: their reply never reached the run."""

    model_config = ConfigDict(frozen=True)

    agent_id: int | None = None
    calls: list[int] = Field(default_factory=list)
    """The invocation's dispatch numbers."""
    model: str = ""
    usd: float = 0.0
    charged: Charged = "worst-case"


class CostReport(BaseModel):
    """What a run spent, attributed by model, phase, role and agent type; unpriced usage itemized."""

    model_config = ConfigDict(frozen=True)

    total_usd: float = 0.0
    """`spent_usd + orphaned_usd`: what the run counts against its ceiling."""
    spent_usd: float = 0.0
    """What settled draws and terminals say the calls cost."""
    orphaned_usd: float = 0.0
    """Calls cut off by a crash, at their priced worst case (or as an operator settled them)."""
    orphaned_calls: int = 0
    """How many calls a crash cut off (charged in `orphaned_usd`)."""
    settlement: OrphanSettlement | None = None
    """The last `tether settle-orphans` of the run, if any."""
    ceiling_usd: float | None = None
    """The run's USD ceiling as it stands (its start's, or the last `budget-raised`)."""
    by_model: dict[str, float] = Field(default_factory=dict)
    by_phase: dict[str, float] = Field(default_factory=dict)
    by_role: dict[str, float] = Field(default_factory=dict)
    by_agent_type: dict[str, float] = Field(default_factory=dict)
    unpriced: dict[str, Usage] = Field(default_factory=dict)
    approximate: bool = False
    usage: Usage = Usage()
    """Tokens of every agent summed (agents still running or parked count their drawn turns);
    `usage.reasoning_tokens` is the reasoning part of `output_tokens`."""
    provider_calls: int = 0
    reused_usd: float = 0.0
    """A fork's: what the source run paid for the agent calls the fork reused (their settled spend, never the
    source's orphans, never a copy the fork did not reach); not in `total_usd`: not billed again."""
    reused_calls: int = 0
    """A fork's: the agent invocations it reused from its source."""
    reused_provider_calls: int = 0
    """A fork's: the provider calls those invocations made (in the source)."""
    lost: list[LostCall] = Field(default_factory=list)
    """Calls paid and lost to a kill, each charged at its recorded usage or its worst case (and said which):
    the `worst-case`/`settled` ones make up `orphaned_usd`, the `recorded` ones `lost_recorded_usd`."""
    lost_recorded_usd: float = 0.0
    """The part of `spent_usd` that is turns drawn and then lost to a kill (sent again by the redispatch)."""
    compaction_usd: float = 0.0
    """The part of `spent_usd` that context compactions' summarize calls cost (docs/agents.md, *Context*)."""
    compaction_calls: int = 0
    """The provider calls those compactions made (in `provider_calls`)."""


@dataclass
class Dispatch:
    """One journaled provider call of an invocation (its `dispatch` decision)."""

    call: int
    model: str
    worst: float | None
    seq: int | None


@dataclass
class AgentSpend:
    """What one agent invocation spent, as the journal tells it."""

    running: JournalEntry
    terminal: JournalEntry | None = None
    costs: dict[str, float] = field(default_factory=dict)
    """Settled spend per model: the terminal's tally, or the journaled draws so far."""
    raw_orphaned: dict[str, float] = field(default_factory=dict)
    """Cut-off calls at their worst case, per model (a terminal's carried ones, or the unsettled dispatches)."""
    cut: list[int] = field(default_factory=list)
    """The numbers of the dispatches `raw_orphaned` charges."""
    covered: list[tuple[int, int]] = field(default_factory=list)
    """The dispatch numbers journaled turn draws settled, as (first, last) ranges."""
    dispatches: list[Dispatch] = field(default_factory=list)
    draw_tokens: int = 0
    draw_usage: Usage = ZERO_USAGE
    last_at: float | None = None
    """When the journal last heard of the invocation (its terminal, else its latest draw or dispatch)."""
    scaled: dict[str, float] = field(default_factory=dict)
    """The orphaned figure per model as of the last settlement (scaled by it)."""
    scaled_raw: dict[str, float] = field(default_factory=dict)
    """`raw_orphaned` as it stood at that settlement."""
    draws: list[tuple[int, int, dict[str, float]]] = field(default_factory=list)
    """Every journaled turn draw: the dispatches it settles (first, last) and its USD per model."""
    resent: list[tuple[int, int, dict[str, float]]] = field(default_factory=list)
    """The draws a redispatch sent again (past its checkpoint): paid, and lost with the process."""
    compaction_calls: set[int] = field(default_factory=set)
    """The dispatches a context compaction's summarize call made (their `dispatch` fact's `purpose`)."""

    @property
    def compaction_usd(self) -> float:
        """What the draws settling only compaction dispatches cost (a summary call is drawn on its own)."""
        calls = self.compaction_calls
        if not calls:
            return 0.0
        return sum(sum(costs.values()) for first, last, costs in self.draws
                   if all(n in calls for n in range(first, last + 1)))

    @property
    def settled(self) -> bool:
        return self.terminal is not None

    @property
    def orphaned(self) -> dict[str, float]:
        """Orphaned spend per model: the last settlement's figure plus what crashes cut off after it."""
        if not self.scaled and not self.scaled_raw:
            return self.raw_orphaned
        models = {*self.raw_orphaned, *self.scaled}
        return {m: self.scaled.get(m, 0.0) + max(0.0, self.raw_orphaned.get(m, 0.0) - self.scaled_raw.get(m, 0.0))
                for m in models}

    @property
    def spent_usd(self) -> float:
        return sum(self.costs.values())

    @property
    def orphaned_usd(self) -> float:
        return sum(self.orphaned.values())

    @property
    def usd(self) -> float:
        return self.spent_usd + self.orphaned_usd

    @property
    def usage(self) -> Usage:
        """The terminal's usage, else what the journaled draws carried."""
        if self.terminal is not None:
            return self.terminal.usage or ZERO_USAGE
        return self.draw_usage

    @property
    def tokens(self) -> int:
        if self.terminal is not None:
            u = self.terminal.usage
            return 0 if u is None else u.input_tokens + u.output_tokens
        return self.draw_tokens

    @property
    def provider_calls(self) -> int:
        if self.terminal is not None:
            return self.terminal.provider_calls or 0
        return len(self.dispatches)

    @property
    def cut_seqs(self) -> list[int]:
        """The journal seqs of the dispatch records a crash cut off."""
        cut = set(self.cut)
        return [d.seq for d in self.dispatches if d.call in cut and d.seq is not None]

    def settles(self, call: int) -> bool:
        """Whether a journaled draw settled dispatch `call` (a later draw never settles an earlier kill's call)."""
        return any(first <= call <= last for first, last in self.covered)

    def unsettled(self, after: int = 0) -> list[tuple[int, str, float | None]]:
        """Dispatches numbered above `after` that no draw settled: cut off by a crash, billed at worst."""
        return [(d.call, d.model, d.worst) for d in self.dispatches if d.call > after and not self.settles(d.call)]

    def restarted(self, through: int) -> None:
        """A redispatch restarted the invocation from a checkpoint holding dispatches up to `through`."""
        for draw in self.draws:
            if draw[0] > through and draw not in self.resent:
                self.resent.append(draw)

    @property
    def lost_calls(self) -> list[LostCall]:
        """Its calls paid and lost to a kill: re-sent turns at their recorded usage, orphans at their worst case
        (or scaled to an operator's settlement)."""
        aid = self.running.agent_id
        out = [LostCall(agent_id=aid, calls=list(range(first, last + 1)), model=model, usd=round(usd, 10),
                        charged="recorded") for first, last, costs in self.resent for model, usd in costs.items()]
        worst = {d.call: (d.model, d.worst or 0.0) for d in self.dispatches}
        charged: Charged = "settled" if self.scaled or self.scaled_raw else "worst-case"
        orphaned = self.orphaned
        by_model: dict[str, list[int]] = {}
        for call in self.cut:
            by_model.setdefault(worst.get(call, ("", 0.0))[0], []).append(call)
        for model, calls in by_model.items():
            raw = sum(worst.get(c, ("", 0.0))[1] for c in calls)
            share = orphaned.get(model, 0.0)
            for c in calls:
                part = share * (worst[c][1] / raw) if raw > 0 and c in worst else share / len(calls)
                out.append(LostCall(agent_id=aid, calls=[c], model=model, usd=round(part, 10), charged=charged))
        return out

    @property
    def lost_recorded_usd(self) -> float:
        return sum(sum(costs.values()) for _, _, costs in self.resent)

    def refresh_open(self) -> None:
        """An open invocation's orphans: its dispatches no draw settled, at their worst case."""
        if self.terminal is not None:
            return
        self.raw_orphaned, self.cut = {}, []
        for call, model, worst in self.unsettled():
            if worst:
                _add(self.raw_orphaned, model, worst)
                self.cut.append(call)


def draw_range(entry: JournalEntry) -> tuple[int, int]:
    """The dispatches a `budget_draw` settles; a draw written before ranges existed settles all up to `through`."""
    last = int(entry.through or 0)
    return int(entry.from_call or 1), last


def _add(d: dict[str, float], k: str, v: float) -> None:
    d[k] = d.get(k, 0.0) + v


def _floats(raw: Any) -> dict[str, float]:
    return {str(k): float(v) for k, v in raw.items()} if isinstance(raw, dict) else {}


def dispatch_value(entry: JournalEntry) -> dict[str, Any] | None:
    """The payload of a `dispatch` fact (written before a provider call leaves), else None."""
    if entry.kind == "decision" and isinstance(entry.value, dict) and entry.value.get("decision") == "dispatch":
        return entry.value
    return None


def decision_name(entry: JournalEntry) -> str | None:
    if entry.kind == "decision" and isinstance(entry.value, dict):
        name = entry.value.get("decision")
        return name if isinstance(name, str) else None
    return None


def is_draw(entry: JournalEntry) -> bool:
    return entry.kind == "tree" and isinstance(entry.value, dict) and entry.value.get("kind") == "budget_draw"


def money_entries(spend_entries: Iterable[JournalEntry], decisions: Iterable[JournalEntry]) -> list[JournalEntry]:
    """The agents' entries and the run's money decisions merged in journal order: all a cost fold reads."""
    money = [e for e in decisions if e.scope == "" and decision_name(e) in MONEY_DECISIONS]
    if not money:
        return list(spend_entries)
    return list(heapq.merge(spend_entries, money, key=lambda e: e.seq or 0))


@dataclass
class SpendFold:
    """Every invocation's spend, the run's settlements and its ceiling, folded from the journal."""

    agents: list[AgentSpend]
    settlement: OrphanSettlement | None = None
    ceiling_usd: float | None = None
    copied_through: int = 0
    """A fork's copied prefix (its lineage's `reused_through`): invocations in it the source paid for."""
    unreused: frozenset[int] = frozenset()
    """Copied invocations (by seq) the fork's last settle says its code did not reuse."""

    def copied(self, spend: AgentSpend) -> bool:
        """Whether the source run paid for this invocation (a fork's copied one): never the fork's spend."""
        return (spend.running.seq or 0) <= self.copied_through

    def reused(self, spend: AgentSpend) -> bool:
        """A copied invocation the fork's code replayed (its settled spend is `reused_usd`)."""
        return self.copied(spend) and spend.running.seq not in self.unreused

    def own(self) -> list[AgentSpend]:
        """The invocations this run paid for (a fork's copies left out)."""
        return [s for s in self.agents if not self.copied(s)]


def fold_spend(entries: Iterable[JournalEntry]) -> SpendFold:
    """Every agent invocation's spend, settled or not, in the order the invocations started."""
    by_seq: dict[int, AgentSpend] = {}
    by_agent: dict[int, AgentSpend] = {}
    settlement: OrphanSettlement | None = None
    ceiling: float | None = None
    copied_through = 0
    unreused: frozenset[int] = frozenset()
    for e in entries:
        if e.kind == "agent":
            if e.status == "running" and e.ref is None and e.seq is not None:
                spend = AgentSpend(e)
                by_seq[e.seq] = spend
                if e.agent_id is not None:
                    by_agent[e.agent_id] = spend
            elif e.ref is not None and e.ref in by_seq and not by_seq[e.ref].settled:
                _settle(by_seq[e.ref], e)
            continue
        if e.agent_id is None:
            name = decision_name(e) if e.scope == "" else None
            if name == ORPHANS_SETTLED:
                settlement = _apply_settlement(list(by_seq.values()), e) or settlement
            elif name == BUDGET_RAISED and isinstance(e.value, dict):
                ceiling = _float(e.value.get("new_usd"), ceiling)
            elif name == "genesis" and isinstance(e.value, dict):
                ceiling = _genesis_ceiling(e.value) if ceiling is None else ceiling
                lineage = lineage_from(e.value)
                copied_through = lineage.reused_through if lineage is not None else copied_through
            elif name == "settle" and isinstance(e.value, dict) and copied_through:
                unreused = frozenset(int(s) for s in e.value.get(UNREUSED_MEMBER) or ())
            continue  # not an agent's fact (so a fold may be handed only the agents' entries)
        open_spend = by_agent.get(e.agent_id)
        if open_spend is None or open_spend.settled:
            continue
        open_spend.last_at = e.started_at or open_spend.last_at
        if is_draw(e):
            costs = _floats(e.costs)
            for model, usd in costs.items():
                _add(open_spend.costs, model, usd)
            open_spend.covered.append(draw_range(e))
            open_spend.draws.append((*draw_range(e), costs))
            value = e.value if isinstance(e.value, dict) else {}
            open_spend.draw_tokens += int(value.get("tokens") or 0)
            if e.usage is not None:  # the turn's usage (draws written before it carried only `tokens`)
                open_spend.draw_usage = open_spend.draw_usage + e.usage
        elif (d := dispatch_value(e)) is not None:
            worst = d.get("worst_usd")
            open_spend.dispatches.append(Dispatch(int(d.get("call", 0)), str(d.get("model", "")),
                                                  None if worst is None else float(worst), e.seq))
            if d.get("purpose") == COMPACTION_PURPOSE:
                open_spend.compaction_calls.add(int(d.get("call", 0)))
        elif decision_name(e) == REDISPATCH and isinstance(e.value, dict):
            open_spend.restarted(int(e.value.get("through") or 0))
    spends = list(by_seq.values())
    for spend in spends:
        spend.refresh_open()
    return SpendFold(spends, settlement, ceiling, copied_through, unreused)


def _settle(spend: AgentSpend, terminal: JournalEntry) -> None:
    spend.terminal = terminal
    spend.last_at = terminal.ended_at or terminal.started_at or spend.last_at
    spend.costs = _floats(terminal.costs)
    if not spend.costs and terminal.cost_usd:
        spend.costs = {terminal.served_by or "": float(terminal.cost_usd)}
    spend.raw_orphaned = _floats(terminal.orphaned)
    cut = terminal.cut
    if isinstance(cut, list):
        spend.cut = [int(n) for n in cut]
    elif spend.raw_orphaned:  # written before terminals named their cut calls: the dispatches no draw settled
        spend.cut = [call for call, _, worst in spend.unsettled() if worst]


def _apply_settlement(spends: list[AgentSpend], entry: JournalEntry) -> OrphanSettlement | None:
    """Scale every orphan known at `entry` so that they sum to the settled figure."""
    value = entry.value if isinstance(entry.value, dict) else {}
    usd = _float(value.get("usd"), None)
    if usd is None or usd < 0:
        return None
    for spend in spends:
        spend.refresh_open()
    known = sum(s.orphaned_usd for s in spends)
    factor = usd / known if known > 0 else 0.0
    for spend in spends:
        spend.scaled = {m: v * factor for m, v in spend.orphaned.items()}
        spend.scaled_raw = dict(spend.raw_orphaned)
    return OrphanSettlement(
        seq=entry.seq or 0, usd=usd, old_usd=_float(value.get("old_usd"), known) or 0.0,
        calls=int(value.get("calls") or 0), reason=str(value.get("reason") or ""), by=str(value.get("by") or ""),
        at=entry.started_at,
    )


def _float(raw: Any, default: float | None) -> float | None:
    return float(raw) if isinstance(raw, int | float) and not isinstance(raw, bool) else default


def _genesis_ceiling(value: dict[str, Any]) -> float | None:
    """The run's USD ceiling as its genesis fixed it: `budget_usd`, or a lower containment `max_usd`."""
    budget = _float(value.get("budget_usd"), None)
    containment = value.get("containment")
    cap = _float(containment.get("max_usd"), None) if isinstance(containment, dict) else None
    if cap is not None:
        return cap if budget is None else min(budget, cap)
    return budget


def agent_spend(entries: Iterable[JournalEntry]) -> list[AgentSpend]:
    """Every agent invocation's spend, settled or not, in the order the invocations started."""
    return fold_spend(entries).agents


def fold_cost(entries: Iterable[JournalEntry]) -> CostReport:
    """Sum what every invocation spent: once per invocation, never per redispatch."""
    return cost_report(fold_spend(entries))


def cost_report(folded: SpendFold) -> CostReport:
    """The report of a spend fold (`fold_cost` for a caller that also needs the per-agent figures)."""
    by_model: dict[str, float] = {}
    by_phase: dict[str, float] = {}
    by_role: dict[str, float] = {}
    by_type: dict[str, float] = {}
    spent = orphaned = 0.0
    cut = calls = reused_calls = reused_provider_calls = 0
    reused = resent = 0.0
    unpriced: dict[str, Usage] = {}
    usages: list[Usage] = []
    lost_calls: list[LostCall] = []
    compaction = 0.0
    compaction_calls = 0
    for spend in folded.agents:
        if folded.copied(spend):
            if folded.reused(spend):  # what the source paid and this run did not: never the source's orphans
                reused += spend.spent_usd
                reused_calls += 1
                reused_provider_calls += spend.provider_calls
            continue
        lost_calls.extend(spend.lost_calls)
        resent += spend.lost_recorded_usd
        lost = spend.orphaned
        usd = spend.spent_usd + sum(lost.values())
        spent += spend.spent_usd
        orphaned += sum(lost.values())
        cut += len(spend.cut)
        for model, v in (*spend.costs.items(), *lost.items()):
            _add(by_model, model, v)
        run = spend.running
        _add(by_phase, run.phase or "", usd)
        _add(by_role, run.role or "loop", usd)
        _add(by_type, run.agent_type or UNTYPED, usd)
        usages.append(spend.usage)
        calls += spend.provider_calls
        if spend.compaction_calls:
            compaction += spend.compaction_usd
            compaction_calls += len(spend.compaction_calls)
        if spend.terminal is not None:
            for model, raw in (spend.terminal.unpriced or {}).items():
                unpriced[model] = unpriced.get(model, Usage()) + Usage.model_validate(raw)
    usage = sum_usage(usages)
    return CostReport(
        total_usd=round(spent + orphaned, 10),
        spent_usd=round(spent, 10),
        orphaned_usd=round(orphaned, 10),
        orphaned_calls=cut,
        settlement=folded.settlement,
        ceiling_usd=folded.ceiling_usd,
        by_model=by_model,
        by_phase={k: v for k, v in by_phase.items() if k},
        by_role=by_role,
        by_agent_type=by_type,
        unpriced=unpriced,
        approximate=orphaned > 0 or usage.approximate,
        usage=usage,
        provider_calls=calls,
        reused_usd=round(reused, 10),
        reused_calls=reused_calls,
        reused_provider_calls=reused_provider_calls,
        lost=lost_calls,
        lost_recorded_usd=round(resent, 10),
        compaction_usd=round(compaction, 10),
        compaction_calls=compaction_calls,
    )


def spent_under(entries: Iterable[JournalEntry], scope: str | None) -> tuple[float, float]:
    """(spend, its orphaned part) of every invocation under `scope` (the whole run for None)."""
    folded = fold_spend(entries)
    spends = [s for s in folded.agents if (scope is None or is_under(s.running.scope, scope)) and not folded.copied(s)]
    return sum(s.usd for s in spends), sum(s.orphaned_usd for s in spends)
