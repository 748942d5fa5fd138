"""Read-side views of a run, folded from its meta and journal (the same data on every store)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any
from urllib.parse import quote

from tether.contracts.entries import JournalEntry, RunMeta
from tether.engine.budget_suspension import budget_need
from tether.engine.forecasting import JudgedForecast
from tether.engine.resolutions import open_suspensions
from tether.journal.cost import AgentSpend, CostReport, SpendFold, cost_report, fold_cost, fold_spend
from tether.journal.lineage import lineage_of
from tether.journal.matching import JournalIndex
from tether.journal.tree import fold_tree
from tether.server.models import (
    Ceilings,
    ForkLineage,
    ForkRef,
    ReuseMark,
    RunDetail,
    RunSummary,
    Settled,
    SpendPoint,
    Suspension,
    TreeNode,
    TreeView,
)
from tether.server.routing import ApiError
from tether.server.state import LiveRun


def genesis(entries: Sequence[JournalEntry]) -> JournalEntry | None:
    """The run's first decision: workflow, args hash, budget and containment as the run started."""
    for e in entries:
        value = e.value if isinstance(e.value, dict) else {}
        if e.kind == "decision" and e.scope == "" and value.get("decision") == "genesis":
            return e
    return None


def suspensions(entries: Sequence[JournalEntry]) -> list[Suspension]:
    """Open suspensions, in journal order, with the values each accepts."""
    out: list[Suspension] = []
    for s in open_suspensions(entries):
        e = s.entry
        value = e.value if isinstance(e.value, dict) else {}
        schema = value.get("schema")
        out.append(Suspension(
            key=s.key, kind=s.kind, seq=e.seq or 0, scope=e.scope, label=e.label, agent_id=e.agent_id,
            tool=value.get("tool"), args=value.get("args"), since=e.started_at,
            accepts=list(s.accepts) if s.accepts is not None else None,
            value_schema=schema if isinstance(schema, dict) else None, budget=budget_need(e),
        ))
    return out


def summary(meta: RunMeta, entries: Sequence[JournalEntry], live: LiveRun | None,
            cost: CostReport | None = None) -> RunSummary:
    """One run-list row; spend is the cost fold over the journal."""
    end = time.time() if meta.status == "running" else meta.updated_at
    cost = cost or fold_cost(entries)
    return RunSummary(
        run_id=meta.run_id,
        workflow=meta.workflow,
        status=meta.status,
        budget_usd=cost.ceiling_usd if cost.ceiling_usd is not None else meta.budget_usd,
        spent_usd=cost.total_usd,
        orphaned_usd=cost.orphaned_usd,
        reused_usd=cost.reused_usd,
        created_at=meta.created_at,
        updated_at=meta.updated_at,
        duration_s=max(end - meta.created_at, 0.0),
        segments=meta.segments,
        pending=len(suspensions(entries)),
        driven_here=live is not None,
    )


def detail(meta: RunMeta, entries: Sequence[JournalEntry], live: LiveRun | None, can_start: bool) -> RunDetail:
    """The run page's header data: the summary plus ceilings, the last settle and open suspensions."""
    first = genesis(entries)
    started = first.value if first is not None and isinstance(first.value, dict) else {}
    raw = started.get("containment")
    containment: dict[str, Any] = raw if isinstance(raw, dict) else {}
    last = JournalIndex.build(entries).last_settle()
    outcome = None
    if last is not None and isinstance(last.value, dict) and last.value.get("status"):
        v = last.value
        outcome = Settled(status=v["status"], value=v.get("value"), error=v.get("error"),
                          pending=list(v.get("pending") or []), at=last.started_at)
    folded = fold_spend(entries)
    cost = cost_report(folded)
    base = summary(meta, entries, live, cost)
    origin = first.started_at if first is not None else None
    return RunDetail(
        **base.model_dump(),
        args=meta.args,
        ceilings=Ceilings(budget_usd=base.budget_usd, **{k: containment.get(k) for k in (
            "max_agents", "max_concurrent", "max_depth", "max_tokens", "max_usd", "max_duration_s")},
            forecast=JudgedForecast.of(started)),
        outcome=outcome,
        suspensions=suspensions(entries),
        cost=cost,
        spend=spend_series(folded.own(), origin),
        cut_seqs=sorted(seq for s in folded.agents for seq in s.cut_seqs),
        entries=len(entries),
        started_at=origin,
        can_start=can_start,
        lineage=fork_lineage(meta.run_id, entries, cost),
    )


def fork_lineage(run_id: str, entries: Sequence[JournalEntry], cost: CostReport) -> ForkLineage | None:
    """A fork's lineage block: its genesis's lineage and the cost report's reused and new spend (None: no fork)."""
    found = lineage_of(entries[:1])
    if found is None:
        return None
    diff = f"/api/runs/{quote(found.forked_from, safe='')}/diff/{quote(run_id, safe='')}"
    return ForkLineage(forked_from=found.forked_from, at=found.at, reused_through=found.reused_through,
                       models=dict(found.models), reused_usd=cost.reused_usd, reused_calls=cost.reused_calls,
                       new_usd=cost.total_usd, diff=diff)


def forks_of(source: RunMeta, metas: Sequence[RunMeta]) -> list[ForkRef]:
    """The runs of `metas` forked from `source` (their meta's `parent_run_id`), oldest first."""
    found = [m for m in metas if m.parent_run_id == source.run_id and m.run_id != source.run_id]
    out = []
    for m in sorted(found, key=lambda m: (m.created_at, m.run_id)):
        at = (m.model_extra or {}).get("fork_at")
        out.append(ForkRef(run_id=m.run_id, workflow=m.workflow, status=m.status, created_at=m.created_at,
                           at=at if isinstance(at, int) else None))
    return out


def reuse_marks(entries: Sequence[JournalEntry], page: Sequence[JournalEntry]) -> list[ReuseMark]:
    """The entries of `page` a fork copied from its source, each `reused` unless it belongs to a copied agent
    call the fork's settle lists as not reached: the same split the cost report makes (`fold_spend`)."""
    found = lineage_of(entries[:1])
    if found is None:
        return []
    seqs, agents = _unreached(fold_spend(entries))
    marks = []
    for e in page:
        seq = e.seq or 0
        if not 2 <= seq <= found.reused_through:
            continue
        call = e.ref if e.kind == "agent" and e.ref is not None else seq
        lost = call in seqs or (e.agent_id is not None and e.agent_id in agents)
        marks.append(ReuseMark(seq=seq, source_seq=found.seq_map.get(seq), reused=not lost,
                               source_at=e.ended_at or e.started_at))
    return marks


def _unreached(folded: SpendFold) -> tuple[frozenset[int], frozenset[int]]:
    """The running seqs and agent ids of the copied agent calls a fork's code did not reach."""
    spends = [s for s in folded.agents if folded.copied(s) and s.running.seq in folded.unreused]
    return (frozenset(s.running.seq or 0 for s in spends),
            frozenset(s.running.agent_id for s in spends if s.running.agent_id is not None))


def spend_series(agents: Sequence[AgentSpend], origin: float | None) -> list[SpendPoint]:
    """Each agent's spend at the moment the journal last heard of it, cumulated: the chart the cards agree with
    (`agents`: those the run paid for, `SpendFold.own`)."""
    timed = sorted(agents, key=lambda a: a.last_at or a.running.started_at or 0.0)
    t0 = origin if origin is not None else min((a.running.started_at or 0.0 for a in agents), default=0.0)
    points: list[SpendPoint] = []
    total = 0.0
    for a in timed:
        total += a.usd
        at = a.last_at or a.running.started_at or t0
        points.append(SpendPoint(t=max(0.0, at - t0), agent_id=a.running.agent_id, label=a.running.label,
                                 usd=round(a.usd, 10), orphaned_usd=round(a.orphaned_usd, 10),
                                 total_usd=round(total, 10), settled=a.settled))
    return points


def tree(run_id: str, entries: Sequence[JournalEntry], live: LiveRun | None) -> TreeView:
    """The agent tree with depth and timing per node, and the queue this server sees live."""
    report = fold_tree(entries)
    running = {e.agent_id: e for e in entries if e.kind == "agent" and e.ref is None and e.agent_id is not None}
    ended = {e.agent_id: e for e in entries if e.kind == "agent" and e.ref is not None and e.agent_id is not None}
    depth: dict[int, int] = {}
    nodes: list[TreeNode] = []
    for node in report.agents:
        start = running[node.agent_id]
        d = 1 if node.parent_agent_id is None else depth.get(node.parent_agent_id, 1) + 1
        depth[node.agent_id] = d
        end = ended.get(node.agent_id)
        model = start.value.get("model") if isinstance(start.value, dict) else None
        nodes.append(TreeNode(
            **node.model_dump(), depth=d, agent_type=start.agent_type, model=model, seq=start.seq or 0,
            started_at=start.started_at, ended_at=end.ended_at if end is not None else None,
            transcript=f"/api/runs/{run_id}/agents/{node.agent_id}/transcript",
        ))
    first = genesis(entries)
    containment = first.value.get("containment") if first is not None and isinstance(first.value, dict) else None
    max_tokens = containment.get("max_tokens") if isinstance(containment, dict) else None
    if not isinstance(max_tokens, int):
        max_tokens = None
    return TreeView(run_id=run_id, agents=nodes, events=report.events,
                    queued=list(live.queued) if live is not None else [], max_tokens=max_tokens)


# -- run list paging: over `store.list_runs(limit=...)`, newest first, keyed (-created_at, run_id) --

def _order(meta: RunMeta) -> tuple[float, str]:
    return (-meta.created_at, meta.run_id)


def encode_cursor(meta: RunMeta) -> str:
    """A position in the listing, `<created_at>~<run_id>`: any well-formed cursor is a valid place to resume."""
    return f"{meta.created_at!r}~{meta.run_id}"


def decode_cursor(cursor: str) -> tuple[float, str]:
    created, _, run_id = cursor.partition("~")
    try:
        return (-float(created), run_id)
    except ValueError:
        raise ApiError(400, "invalid-cursor", "cursor is not one this server returned; pass the next_cursor of a "
                       "previous page, or omit it for the first page", cursor=cursor) from None


def page_after(metas: Sequence[RunMeta], after: tuple[float, str] | None, status: str | None,
               limit: int) -> tuple[list[RunMeta], bool]:
    """The next `limit` runs after the cursor position that match `status`, and whether more follow."""
    picked = [m for m in sorted(metas, key=_order)
              if (after is None or _order(m) > after) and (status is None or m.status == status)]
    return picked[:limit], len(picked) > limit


def fetch_size(limit: int, rounds: int) -> int:
    """How many runs to ask the store for on round `rounds` of filling a page (grows geometrically)."""
    return int(max(limit + 1, 100) * 4**rounds)

