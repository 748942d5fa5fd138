"""Forks: a new run whose journal starts as a copy of another run's, so edited code pays only for what changed.

A fork copies the source's entries (those before `at`, when given), renumbered from 2 behind its own
genesis, which records the lineage (`tether.journal.lineage`). The source is only read. Calls whose
identity is unchanged replay from the copy; the cost folds report them as `reused_usd`, never as the
fork's spend. See docs/forks.md.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tether.contracts.entries import TWO_PHASE_KINDS, JournalEntry, RunMeta
from tether.contracts.errors import ConfigError, RunNotFoundError
from tether.contracts.protocols import JournalStore
from tether.engine.options import (
    DURABLE_OPTIONS,
    Containment,
    SegmentOptions,
    durable_options,
    genesis_entry,
    genesis_of,
)
from tether.engine.workflow import Workflow
from tether.journal.canonical import to_jsonable
from tether.journal.chain import relinked
from tether.journal.cost import BUDGET_RAISED, ORPHANS_SETTLED, UNPRICED_ALLOWED, decision_name
from tether.journal.keys import args_hash
from tether.journal.lineage import FORK_MEMBER, Lineage
from tether.journal.matching import CONTINUES, JournalIndex, continued_seq
from tether.journal.retained import refuse_retained
from tether.journal.scope import is_under

NOT_COPIED_DECISIONS = frozenset({"genesis", "settle", "budget-refusal", BUDGET_RAISED, ORPHANS_SETTLED,
                                  UNPRICED_ALLOWED})
"""Decisions a fork decides afresh: its own genesis and settles, admission under its own ceiling, and the
operator's money decisions about the source."""
CHAIN_MEMBERS = ("prev", "checksum")
"""Members that tie an entry to its place in the source's stored journal: a copy gets its own."""


@dataclass(frozen=True)
class ForkPlan:
    """What a fork writes: its journal (genesis first), its meta, and how it runs."""

    run_id: str
    workflow: Workflow
    args: dict[str, Any]
    opts: SegmentOptions
    lineage: Lineage
    entries: list[JournalEntry]
    meta: RunMeta


def parse_models(models: Mapping[str, str] | Sequence[str] | None) -> dict[str, str]:
    """`{"critic": "openai:gpt-5-mini"}`, or the CLI's `["critic=openai:gpt-5-mini"]`, as label -> model."""
    if models is None:
        return {}
    if isinstance(models, Mapping):
        pairs = list(models.items())
    else:
        pairs = []
        for item in models:
            label, sep, ref = item.partition("=")
            if not sep or not label or not ref:
                raise ConfigError(f"a model swap is LABEL=ADAPTER:MODEL (e.g. critic=openai:gpt-5-mini), got {item!r}")
            pairs.append((label, ref))
    for label, ref in pairs:
        if ":" not in ref:
            raise ConfigError(f"the swap of {label!r} must name adapter:model (e.g. openai:gpt-5-mini), got {ref!r}")
    return dict(pairs)


def copy_journal(source: Sequence[JournalEntry], at: int | None) -> tuple[list[JournalEntry], dict[int, int]]:
    """The entries a fork starts from (renumbered from 2: its genesis is 1) and the map fork seq -> source seq.

    Kept: every entry before `at` but the decisions a fork makes afresh, and every dispatch whose terminal is
    kept too. A dispatch that never settled before the cut (running, or parked on an approval) is left out
    with everything it did, so the fork runs it again from its start.
    """
    cut = [e for e in source if at is None or (e.seq or 0) < at]
    index = JournalIndex.build(cut)
    dropped: set[int] = set()
    dropped_scopes: list[str] = []
    dropped_agents: set[int] = set()
    for e in cut:
        seq = e.seq or 0
        if e.kind == "decision" and (decision_name(e) == "budget-refusal" or (
            e.scope == "" and decision_name(e) in NOT_COPIED_DECISIONS
        )):
            dropped.add(seq)
        elif e.kind in TWO_PHASE_KINDS and e.ref is None and seq not in index.terminal_of:
            dropped.add(seq)
            inner = JournalIndex.inner_scope(e)
            if inner is not None:
                dropped_scopes.append(inner)
            if e.agent_id is not None:
                dropped_agents.add(e.agent_id)
    kept: list[JournalEntry] = []
    for e in cut:
        seq = e.seq or 0
        gone = seq in dropped or (e.ref is not None and e.ref in dropped) or (
            e.agent_id is not None and e.agent_id in dropped_agents
        ) or any(is_under(e.scope, s) for s in dropped_scopes)
        if gone:
            dropped.add(seq)
        else:
            kept.append(e)
    renumber = {e.seq or 0: n for n, e in enumerate(kept, start=2)}
    copies = [_renumbered(e, renumber) for e in kept]
    return copies, {new: old for old, new in renumber.items()}


def _renumbered(e: JournalEntry, renumber: Mapping[int, int]) -> JournalEntry:
    data = {k: v for k, v in e.to_json_dict().items() if k not in CHAIN_MEMBERS}
    data["seq"] = renumber[e.seq or 0]
    if e.ref is not None:
        data["ref"] = renumber[e.ref]
    data["scope"] = _scope(e.scope, renumber)
    if isinstance(data.get("value"), dict) and isinstance(data["value"].get("inner_scope"), str):
        data["value"] = {**data["value"], "inner_scope": _scope(data["value"]["inner_scope"], renumber)}
    before = continued_seq(e)
    if before is not None:  # the invocation it continues, by its fork seq (none: not copied, so nothing to follow)
        value = {k: v for k, v in data["value"].items() if k != CONTINUES}
        data["value"] = {**value, CONTINUES: renumber[before]} if before in renumber else value
    return JournalEntry.from_json_dict(data)


def _scope(scope: str, renumber: Mapping[int, int]) -> str:
    """A scope path with every `agent:<seq>` segment pointing at the fork's seq of that agent."""
    if "agent:" not in scope:
        return scope
    parts = []
    for part in scope.split("/"):
        name, _, n = part.partition(":")
        if name == "agent" and n.isdigit() and int(n) in renumber:
            part = f"agent:{renumber[int(n)]}"
        parts.append(part)
    return "/".join(parts)


def fork_options(source_id: str, given: SegmentOptions, source: Sequence[JournalEntry]) -> SegmentOptions:
    """The fork's options: each one given wins; the rest are the source's (its ceiling as last raised)."""
    genesis = genesis_of(source)
    stored = durable_options(source_id, SegmentOptions(), genesis, JournalIndex.build(source).decision_entries)
    inherited: dict[str, Any] = {}
    for name in DURABLE_OPTIONS:
        if getattr(given, name) is None:
            value = getattr(stored, name)
            if name == "containment" and isinstance(value, dict):
                value = Containment(**value)
            if name == "budget_usd" and stored.raised_usd is not None:
                value = stored.raised_usd
            inherited[name] = value
    return dataclasses.replace(given, **inherited, raised_usd=None)


async def plan_fork(
    store: JournalStore, source_id: str, new_id: str, wf: Workflow, args: Mapping[str, Any] | None,
    *, at: int | None, models: Mapping[str, str], given: SegmentOptions, now: float,
) -> ForkPlan:
    """Read the source and lay out the fork (nothing is written): its journal, meta, options and lineage."""
    source = await store.load(source_id)
    source_meta = await store.get_meta(source_id)
    if not source:
        raise RunNotFoundError(f"no run {source_id!r} in this store to fork; check the run id (tether runs lists "
                               f"them) and the store URL", run_id=source_id)
    refuse_retained(source_id, source)  # its copied entries would replay without their payloads
    if new_id == source_id:
        raise ConfigError(f"a fork needs a new run id, not its source's {source_id!r}; pass another new_run_id")
    last = source[-1].seq or 0
    if at is not None and not 2 <= at <= last + 1:
        raise ConfigError(f"at={at} is outside run {source_id!r}, whose entries are seq 1..{last}; pick a seq in "
                          f"2..{last + 1} (tether inspect {source_id} lists them)", run_id=source_id, at=at)
    if args is None:
        args = dict(source_meta.args) if source_meta is not None and isinstance(source_meta.args, dict) else {}
    args_json = to_jsonable(dict(args), what="workflow args")
    opts = fork_options(source_id, given, source)
    copies, seq_map = copy_journal(source, at)
    lineage = Lineage(forked_from=source_id, at=at, reused_through=len(copies) + 1, models=dict(models),
                      seq_map=seq_map)
    genesis = genesis_entry(now, wf.name, args_json, opts, code_hash=wf.code_hash)
    genesis.value[FORK_MEMBER] = lineage.to_json()
    genesis.seq = 1
    meta = RunMeta(run_id=new_id, workflow=wf.name, status="running", args_hash=args_hash(args_json), args=args_json,
                   budget_usd=opts.ceiling, created_at=now, updated_at=now, parent_run_id=source_id, segments=0,
                   fork_at=at)
    return ForkPlan(new_id, wf, dict(args), opts, lineage, [genesis, *copies], meta)


async def write_fork(store: JournalStore, plan: ForkPlan) -> None:
    """Write the fork's journal, hash-chained from its genesis, and its meta (a new run id only: an existing run
    is never overwritten)."""
    if await store.load(plan.run_id) or await store.get_meta(plan.run_id) is not None:
        raise ConfigError(f"run {plan.run_id!r} already exists; a fork needs a new run id (pick another --new-id)",
                          run_id=plan.run_id)
    await store.append_many(plan.run_id, relinked(plan.entries))  # chained anew: the fork's own hash chain
    await store.put_meta(plan.meta)
