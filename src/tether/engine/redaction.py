"""Archive and redact: remove a run's payloads while its record still verifies (docs/retention.md, docs/audit.md).

An entry tether's writers append is *sealed*: the chain hashes it with the digest of its payload (`value`,
`error`) in place of the payload (`tether.journal.chain`). Archive removes every text payload of a run and the
runs it owns (agent, step and child outputs, the settle decision's value, checkpoint transcripts, the meta's args);
redact removes the payloads holding one text (or one entry's). Each removal leaves `"redacted": <seq>` naming the
decision entry appended after it (who, when, why, what), so the chain holds and `tether verify` says which entries
carry no payload. Numbers, statuses, costs and every digest stay: `tether cost` is unchanged. Such a run cannot
resume (`RunRetainedError`): its journal no longer holds what a replay returns.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import Any, Literal

from pydantic import BaseModel, Field
from pydantic_core import to_json

from tether.contracts.entries import JournalEntry, RunMeta, payload_bytes
from tether.contracts.errors import ConfigError, RunActiveError, RunNotFoundError, RunRetainedError
from tether.contracts.protocols import JournalStore
from tether.contracts.retention import RewritingStore, RunRewrite
from tether.engine.retention import ALL_RUNS, _Runs
from tether.engine.runner import operator_decision
from tether.engine.seam import EngineSeam
from tether.journal.blobs import is_redacted_blob, redacted_blob, run_blob_keys
from tether.journal.chain import body_of, chained
from tether.stores.codec import entry_json

Decision = Literal["archive", "redact"]
ARCHIVED_KINDS = frozenset({"agent", "step", "child", "external", "approval", "resolution", "rand", "abandon"})
"""Entry kinds whose payload archive removes (besides the settle decision): what a run produced. Decisions the
folds read (genesis, budget, dispatch) and budget draws hold figures, not texts, and stay."""


class RetentionReport(BaseModel):
    """What `archive` or `redact` removed: by run, the entries whose payload is gone, the blobs, metas and rows."""

    run_id: str
    decision: Decision
    decisions: dict[str, int] = Field(default_factory=dict)
    """The seq of the decision entry journaled in each run changed (who, when, why, what)."""
    entries: dict[str, list[int]] = Field(default_factory=dict)
    blobs: list[str] = Field(default_factory=list)
    metas: list[str] = Field(default_factory=list)
    """Runs whose meta lost its args (their hash stays)."""
    effects: int = 0
    """Effect-ledger rows rewritten (redact: the rows holding the text)."""
    kept: dict[str, list[int]] = Field(default_factory=dict)
    """Entries written before payloads were committed by digest, left whole (archive): removing their payload
    would break the chain."""
    by: str = ""
    why: str | None = None


async def archive(engine: EngineSeam, run_id: str, *, why: str | None = None) -> RetentionReport:
    """Empty every text of `run_id` and the runs it owns; numbers, statuses, costs, digests and the chain stay."""
    return await _remove(engine, run_id, "archive", None, None, why)


async def redact(engine: EngineSeam, run_id: str, *, match: str | None = None, seq: int | None = None,
                 why: str | None = None) -> RetentionReport:
    """Remove the payloads holding `match` (in `run_id` and the runs it owns) or entry `seq`'s payload (and its
    checkpoint transcript), everywhere the store keeps them; journaled as a decision."""
    return await _remove(engine, run_id, "redact", match, seq, why)


def _needles(match: str | None) -> list[bytes]:
    """The bytes `match` takes in stored JSON: as it is and JSON-escaped (a quote, a newline, a non-ASCII text)."""
    if match is None:
        return []
    plain = match.encode()
    escaped = to_json(match)[1:-1]
    ascii_escaped = json.dumps(match)[1:-1].encode()
    return list(dict.fromkeys([plain, escaped, ascii_escaped]))


def _holds(data: bytes | None, needles: Sequence[bytes]) -> bool:
    return data is not None and any(n in data for n in needles)


def _archivable(e: JournalEntry) -> bool:
    if e.kind in ARCHIVED_KINDS:
        return True
    return e.kind == "decision" and isinstance(e.value, dict) and e.value.get("decision") == "settle"


def _scrubbed(value: Any, needles: Sequence[bytes], match: str) -> Any:
    """`value` (JSON data) with every text holding `match` replaced by "[redacted]"."""
    if isinstance(value, str):
        return "[redacted]" if _holds(value.encode(), needles) or match in value else value
    if isinstance(value, list):
        return [_scrubbed(v, needles, match) for v in value]
    if isinstance(value, dict):
        return {k: _scrubbed(v, needles, match) for k, v in value.items()}
    return value


async def _remove(engine: EngineSeam, run_id: str, decision: Decision, match: str | None, seq: int | None,
                  why: str | None) -> RetentionReport:
    store = await engine.store()
    if not isinstance(store, RewritingStore):
        raise ConfigError(f"the store {type(store).__name__} cannot rewrite a run's payloads (it does not implement "
                          f"tether's RewritingStore); archive and redact work on every store tether ships")
    runs = _Runs(store, await store.list_runs(limit=ALL_RUNS))
    if run_id not in runs.meta and not await store.load(run_id):
        raise RunNotFoundError(f"no run {run_id!r} in this store to {decision}; check the run id (tether runs lists "
                               f"them) and the store URL", run_id=run_id)
    if decision == "redact" and ((match is None) == (seq is None) or match == ""):
        raise ConfigError("redact takes one of match (a non-empty text) or seq (an entry's number)")
    ids = [run_id] if seq is not None else (await runs.tree(run_id, with_forks=False))[0]
    for rid in ids:
        meta = runs.meta.get(rid)
        if meta is not None and meta.status in ("running", "queued"):
            whose = "it" if rid == run_id else f"its run {rid!r}"
            raise RunActiveError(f"run {run_id!r} was not {decision}d: {whose} is {meta.status}. Let it settle (or "
                                 f"tether cancel it) first.",
                                 run_id=rid, status=meta.status)
    report = RetentionReport(run_id=run_id, decision=decision, why=why)
    now = engine.clock()
    plans = [await _plan(store, rid, decision, match, seq, why, report, now) for rid in ids]
    for plan in plans:  # every run planned (and refused) before any is written
        if plan is not None:
            await store.rewrite_run(plan)
    return report


async def _plan(store: JournalStore, rid: str, decision: Decision, match: str | None, seq: int | None,
                why: str | None, report: RetentionReport, now: float) -> RunRewrite | None:
    """What to write back for run `rid` (None: nothing of it holds what is removed); refuses what would break the
    chain before anything is written."""
    entries = await store.load(rid)
    needles = _needles(match)
    at = len(entries) + 1  # the decision entry's seq
    gone: list[int] = []
    kept: list[int] = []
    rewrite = RunRewrite(run_id=rid)
    targets: set[str] = set()
    for e in entries:
        if e.redacted is not None or e.seq is None:
            continue
        payload = payload_bytes(e)
        if decision == "archive":
            hit = payload is not None and _archivable(e)
        elif seq is not None:
            hit = e.seq == seq
            if hit and payload is None:
                raise RunRetainedError(f"seq {seq} of run {rid!r} holds no payload to redact (a {e.kind} entry "
                                       f"without value or error); pass the seq of the entry holding the text",
                                       run_id=rid, seq=seq, why="empty")
        else:
            hit = _holds(payload, needles)
            if _holds(body_of(e.replace(value=None, error=None)), needles):
                raise RunRetainedError(
                    f"the text is in members of seq {e.seq} of run {rid!r} the chain vouches for (its label, key or "
                    f"figures), not in its payload: removing it would break the chain. Nothing was changed; delete "
                    f"the run (tether delete) to erase it.", run_id=rid, seq=e.seq, why="chained")
        if not hit:
            continue
        if not _archivable(e) and e.kind in ("decision", "tree"):
            raise RunRetainedError(
                f"the text is in seq {e.seq} of run {rid!r}, a {_name(e)} record the run's folds read (its ceiling, "
                f"spend or dispatches): removing it would change the run's figures. Nothing was changed; delete the "
                f"run (tether delete) to erase it.", run_id=rid, seq=e.seq, why="figures")
        if e.payload_sha256 is None:
            if decision == "archive":
                kept.append(e.seq)
                continue
            raise RunRetainedError(
                f"seq {e.seq} of run {rid!r} was written before payloads were committed by digest, so removing its "
                f"payload would break the chain. Nothing was changed; delete the run (tether delete) to erase it.",
                run_id=rid, seq=e.seq, why="unsealed")
        rewrite.entries[e.seq] = entry_json(e.replace(value=None, error=None, redacted=at), e.seq)
        gone.append(e.seq)
        if seq is not None and e.checkpoint_ref:
            targets.add(e.checkpoint_ref)
    if seq is not None and not gone:
        raise RunRetainedError(f"run {rid!r} has no entry at seq {seq} to redact", run_id=rid, seq=seq,
                               why="missing")
    for key in await run_blob_keys(rid, entries, store.get_blob):
        data = await store.get_blob(key)
        if data is None or is_redacted_blob(data):
            continue
        head = key.split("/m/")[0]
        if decision == "archive" or _holds(data, needles) or head in targets:
            rewrite.blobs[key] = redacted_blob(data, at)
    rewrite.meta_json = _meta_json(await store.get_meta(rid), decision, needles, match, at)
    if match is not None:
        effects = await store.load_effects(rid)
        if any(_holds(to_json(row), needles) for row in effects):
            report.effects += sum(_holds(to_json(row), needles) for row in effects)
            rewrite.effects = [_scrubbed(row, needles, match) for row in effects]
    if not (gone or rewrite.blobs or rewrite.meta_json or rewrite.effects is not None):
        if kept:
            report.kept[rid] = kept
        return None
    what: dict[str, Any] = {"run_id": rid, "seqs": gone, "blobs": sorted(rewrite.blobs), "kept": kept,
                            "meta": rewrite.meta_json is not None, "effects": rewrite.effects is not None}
    if match is not None:
        what["match_sha256"] = hashlib.sha256(match.encode()).hexdigest()  # never the text itself
    entry = operator_decision(now, decision, why=why, **what)
    entry.seq = at
    rewrite.append.append((at, entry_json(chained(entries, entry), at)))
    report.decisions[rid], report.by = at, str(entry.value["by"])
    report.entries[rid] = gone
    report.blobs += sorted(rewrite.blobs)
    if rewrite.meta_json is not None:
        report.metas.append(rid)
    if kept:
        report.kept[rid] = kept
    return rewrite


def _name(e: JournalEntry) -> str:
    value = e.value if isinstance(e.value, dict) else {}
    return str(value.get("decision") or value.get("kind") or e.kind)


def _meta_json(meta: RunMeta | None, decision: Decision, needles: Sequence[bytes], match: str | None,
               at: int) -> str | None:
    """The meta with its args removed (archive, or redact when they hold the text) and texts holding `match`
    scrubbed from its other members; None when nothing of it changes."""
    if meta is None:
        return None
    data = meta.model_dump(mode="json")
    changed = False
    if data.get("args") is not None and (decision == "archive" or _holds(to_json(data["args"]), needles)):
        data["args"], data["args_redacted"], changed = None, at, True
    if match is not None:
        rest = {k: v for k, v in data.items() if k not in ("run_id", "workflow")}
        scrubbed = _scrubbed(rest, needles, match)
        if scrubbed != rest:
            data.update(scrubbed)
            changed = True
    return json.dumps(data, separators=(",", ":"), ensure_ascii=False) if changed else None

