"""The export bundle: one self-contained, optionally signed file that proves a run's record offline.

The file is the RFC 8785 canonical JSON (`tether.journal.canonical`) of one object: the run's meta, its
journal entries as stored texts (checksums and chain links in them), its effect-ledger rows, the blobs
its agents' entries reference, its cost report, the price rows of the models it used and the chain's
head. A signature (Ed25519) covers the canonical bytes of everything but the `signature` member. The
file must be exactly canonical, so a byte changed anywhere (even in whitespace) fails verification.
"""

from __future__ import annotations

import base64
import json
import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from tether.audit.signing import sign, signature_holds
from tether.audit.verify import AuditError, Verified, check_cost, fail, verify_entries, verify_texts
from tether.contracts.entries import JournalEntry
from tether.contracts.prices import Price
from tether.contracts.protocols import JournalStore
from tether.journal.blobs import checkpoint_key, chunk_key
from tether.journal.canonical import canonical_json
from tether.stores.codec import entry_json

FORMAT = "tether-audit-bundle"
VERSION = 1


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
        try:
            chunks = int(json.loads(data).get("chunks", 0))
        except (ValueError, AttributeError, TypeError):
            chunks = 0
        for i in range(chunks):
            chunk = await store.get_blob(chunk_key(key, i))
            if chunk is not None:
                out[chunk_key(key, i)] = chunk
    return out


async def build_bundle(
    store: JournalStore, run_id: str, price_of: Callable[[str], Price | None] | None = None, *,
    allow_unchained: bool = False,
) -> dict[str, Any]:
    """The bundle of `run_id` as a JSON object (unsigned), after verifying the live record it is made of."""
    entries = await store.load(run_id)
    verified = verify_entries(run_id, entries, allow_unchained=allow_unchained)
    meta = await store.get_meta(run_id)
    models = sorted({m for e in entries for m in (e.costs or {}) | (e.usage_by_model or {})})
    rows = {m: p.model_dump(mode="json") for m in models if price_of is not None and (p := price_of(m)) is not None}
    return {
        "format": FORMAT, "version": VERSION, "run_id": run_id, "exported_at": time.time(),
        "meta": None if meta is None else meta.model_dump(mode="json"),
        "entries": [entry_json(e, e.seq or 0) for e in entries],
        "effects": await store.load_effects(run_id),
        "blobs": {k: base64.b64encode(v).decode() for k, v in (await referenced_blobs(store, run_id, entries)).items()},
        "cost": verified.cost.model_dump(mode="json"),
        "prices": rows,
        "head": verified.head.to_json(),
    }


def signed_bytes(doc: Mapping[str, Any]) -> bytes:
    """What a signature covers: the canonical JSON of the bundle without its `signature` member."""
    return canonical_json({k: v for k, v in doc.items() if k != "signature"})


def write_bundle(doc: dict[str, Any], path: str | os.PathLike[str], sign_key: str | os.PathLike[str] | None) -> Path:
    """Write `doc` (signed with the Ed25519 private key at `sign_key` when given) as canonical JSON."""
    if sign_key is not None:
        doc = {**doc, "signature": sign(signed_bytes(doc), sign_key)}
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.tmp")
    tmp.write_bytes(canonical_json(doc))
    os.replace(tmp, target)
    return target


def read_bundle(path: str | os.PathLike[str]) -> tuple[dict[str, Any], bytes]:
    """The bundle at `path` as JSON and its bytes; anything not a tether bundle is an `AuditError`."""
    where = Path(path)
    try:
        raw = where.read_bytes()
    except OSError as exc:
        raise AuditError(f"cannot read the bundle {where}: {exc.strerror or exc}", path=str(where),
                         why="bundle") from None
    try:
        doc = json.loads(raw)
    except ValueError as exc:
        raise AuditError(f"{where} is not a tether bundle: it is not JSON ({exc}); a byte of it was changed, or "
                         f"it is not a file tether export wrote", path=str(where), why="bundle") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise AuditError(f"{where} is not a tether audit bundle (no format {FORMAT!r}); make one with tether export",
                         path=str(where), why="bundle")
    return doc, raw


def verify_bundle(
    path: str | os.PathLike[str], public_key: str | os.PathLike[str] | None = None, *, allow_unchained: bool = False
) -> Verified:
    """Check a bundle offline: its bytes, signature, every entry's checksum and link, its head and its cost fold."""
    doc, raw = read_bundle(path)
    run_id = str(doc.get("run_id", "?"))
    if doc.get("version") != VERSION:
        raise fail(run_id, "bundle", f"the bundle is version {doc.get('version')!r}; this tether reads "
                   f"version {VERSION}")
    texts = doc.get("entries")
    if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
        raise fail(run_id, "bundle", "the bundle's entries are not a list of stored entry texts")
    verified = verify_texts(run_id, texts, str(path), allow_unchained=allow_unchained)
    checks = verified.checks
    if canonical_json(doc) != raw.rstrip(b"\n"):
        raise fail(run_id, "bundle", "the file is not the canonical form tether export writes: it was edited "
                   "after export (a changed byte that still parses)")
    _check_signature(run_id, doc, public_key, checks)
    head = doc.get("head") or {}
    if head != verified.head.to_json():
        raise fail(run_id, "head", f"the entries end at seq {verified.head.seq} with link {verified.head.link[:16]}.., "
                   f"but the bundle's head is {head!r}: entries were removed from or added to its end, or the "
                   f"newest one was changed", verified.head.seq)
    checks.append("head")
    recorded = doc.get("cost")
    check_cost(run_id, verified.cost, recorded if isinstance(recorded, dict) else {})
    checks.append("recorded totals")
    return verified


def _check_signature(run_id: str, doc: dict[str, Any], public_key: str | os.PathLike[str] | None,
                     checks: list[str]) -> None:
    member = doc.get("signature")
    if member is None:
        if public_key is not None:
            raise fail(run_id, "signature", f"the bundle is not signed, but --key {public_key} asks for a "
                       f"signature by that key")
        checks.append("unsigned")
        return
    if not isinstance(member, dict):
        raise fail(run_id, "signature", "the bundle's signature member is not an object")
    why = signature_holds(signed_bytes(doc), member, public_key)
    if why is not None:
        raise fail(run_id, "signature", f"{why}: the bundle was changed after it was signed, or signed by "
                   f"someone else")
    checks.append("signature" + ("" if public_key is not None else " (by the key it names: pass --key to pin it)"))
