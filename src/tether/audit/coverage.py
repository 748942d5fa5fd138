"""What the hash chain covers beyond the entries: the agents' checkpoint blobs and the run meta's figures.

A settled agent's terminal journals the sha256 of its checkpoint head (`checkpoint_sha256`), the head the sha256
of its last transcript chunk and each chunk that of the one before it, so every blob a terminal references is
checked against the chain. The
meta's ceiling, workflow and args are checked against the genesis and the `budget-raised` decisions the chain
holds. What nothing in the chain vouches for is named, never silently passed (`unchained_parts`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

from tether.audit.verify import AuditError, fail
from tether.contracts.entries import JournalEntry
from tether.contracts.protocols import JournalStore
from tether.journal.blobs import checkpoint_key, chunk_key, chunk_link_error, head_links, vouched_digest
from tether.journal.cost import CostReport
from tether.journal.keys import args_hash


async def referenced_blobs(store: JournalStore, run_id: str, entries: list[JournalEntry]) -> dict[str, bytes]:
    """The blobs the journal references: each agent's checkpoint head and the transcript chunks it lists."""
    keys = {e.checkpoint_ref for e in entries if e.checkpoint_ref}
    keys |= {checkpoint_key(run_id, e.seq) for e in entries if e.kind == "agent" and e.ref is None and e.seq}
    out: dict[str, bytes] = {}
    for key in sorted(keys):
        data = await store.get_blob(key)
        if data is None:
            continue
        out[key] = data
        for i in range(head_links(data)[0]):
            chunk = await store.get_blob(chunk_key(key, i))
            if chunk is not None:
                out[chunk_key(key, i)] = chunk
    return out


def check_blobs(run_id: str, entries: list[JournalEntry], blobs: Mapping[str, bytes]) -> tuple[int, list[str]]:
    """Check every blob a terminal vouches for against its digest; how many were checked, and what in `blobs`
    nothing vouches for (a blob no entry references at all is an `AuditError`: it was added)."""
    checked: set[str] = set()
    loose: list[str] = []  # blobs present that the chain does not cover
    settled: set[int] = set()
    for e in entries:
        if e.kind != "agent" or e.ref is None or not e.checkpoint_ref:
            continue
        settled.add(e.ref)
        key, want = e.checkpoint_ref, e.checkpoint_sha256
        if want is None:  # a terminal written before checkpoints were digested
            loose += [k for k in _with_chunks(key, blobs)]
            continue
        data = blobs.get(key)
        if want == "":
            if data is not None:
                raise _blob(run_id, e, f"a checkpoint head {key} exists although the agent's terminal journaled that "
                            f"it wrote none (a transcript was added after it settled)")
            continue
        if data is None:
            raise _blob(run_id, e, f"the checkpoint head {key} its terminal vouches for is missing")
        if vouched_digest(data) != want:
            raise _blob(run_id, e, f"the checkpoint head {key} has sha256 {vouched_digest(data)[:16]}.., not the "
                        f"{want[:16]}.. its terminal journaled: it was edited after the agent settled")
        checked.add(key)
        chunks, tip = head_links(data)
        names = [chunk_key(key, i) for i in range(chunks)]
        if tip is None:  # an older head: its chunks are not linked
            loose += [k for k in names if k in blobs]
            continue
        broken = chunk_link_error(tip, [blobs.get(k) for k in names])
        if broken is not None:
            raise _blob(run_id, e, f"the transcript under {key} is not the one its terminal vouches for: {broken}")
        checked.update(names)
    for e in entries:  # an agent still running (or parked): its checkpoint changes with every turn
        if e.kind == "agent" and e.ref is None and e.seq is not None and e.seq not in settled:
            loose += [k for k in _with_chunks(checkpoint_key(run_id, e.seq), blobs) if k not in checked]
    extra = sorted(set(blobs) - checked - set(loose))
    if extra:
        raise fail(run_id, "blob", f"the blob {extra[0]} is referenced by no entry of the run: it was added")
    return len(checked), loose


def _with_chunks(key: str, blobs: Mapping[str, bytes]) -> list[str]:
    data = blobs.get(key)
    if data is None:
        return []
    return [key, *(chunk_key(key, i) for i in range(head_links(data)[0]) if chunk_key(key, i) in blobs)]


def _blob(run_id: str, entry: JournalEntry, message: str) -> AuditError:
    return fail(run_id, "blob", f"agent #{entry.agent_id}'s terminal: {message}", entry.seq)


def check_meta(run_id: str, meta: Mapping[str, Any] | None, entries: list[JournalEntry], cost: CostReport) -> None:
    """Refuse a meta whose ceiling, workflow or args are not the ones the chained genesis and raises fix."""
    if meta is None:
        return
    if meta.get("run_id") != run_id:
        raise fail(run_id, "meta", f"the meta names run {meta.get('run_id')!r}")
    ceiling, recorded = cost.ceiling_usd, meta.get("budget_usd")
    same = (recorded is None and ceiling is None) or (
        isinstance(recorded, int | float) and not isinstance(recorded, bool) and ceiling is not None
        and math.isclose(float(recorded), ceiling, rel_tol=1e-12, abs_tol=1e-12))
    if not same:
        raise fail(run_id, "meta", f"the meta's budget_usd is {recorded!r}, but the chained genesis and "
                   f"budget-raised decisions fix the ceiling at {ceiling!r}: the meta was edited")
    genesis = next((e for e in entries if e.kind == "decision" and e.scope == "" and isinstance(e.value, dict)
                    and e.value.get("decision") == "genesis"), None)
    if genesis is None:
        return
    start: dict[str, Any] = genesis.value
    if meta.get("workflow") != start.get("workflow"):
        raise fail(run_id, "meta", f"the meta's workflow {meta.get('workflow')!r} is not the genesis's "
                   f"{start.get('workflow')!r}: the meta was edited", genesis.seq)
    want = start.get("args_hash")
    redacted = meta.get("args_redacted") is not None  # archive or redact removed the args: their hash stays
    if want is not None and "args" in meta and not redacted and (
            meta.get("args_hash") != want or _hash(meta.get("args")) != want):
        raise fail(run_id, "meta", "the meta's args (or their hash) are not the ones the genesis hashed: the meta "
                   "was edited", genesis.seq)


def _hash(args: Any) -> str | None:
    try:
        return args_hash(json.loads(json.dumps(args)))
    except (TypeError, ValueError, RecursionError):
        return None


def unchained_parts(loose: list[str], effects: int | None = None, prices: bool = False) -> list[str]:
    """What a verified record holds that the chain does not cover, said for people (`tether verify`)."""
    parts = ["the meta's status, timestamps and segments"]
    if loose:
        parts.append(f"{len(loose)} checkpoint blobs of agents still running or settled before blobs were "
                     f"digested")
    if effects:
        parts.append(f"{effects} effect-ledger rows")
    if prices:
        parts.append("the price rows")
    return parts
