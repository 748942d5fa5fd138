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

from tether.audit.coverage import check_blobs, check_meta, referenced_blobs, unchained_parts
from tether.audit.signing import sign, signature_holds
from tether.audit.verify import (
    AuditError,
    Verified,
    check_beyond_entries,
    check_cost,
    fail,
    verify_entries,
    verify_texts,
)
from tether.contracts.prices import Price
from tether.contracts.protocols import JournalStore
from tether.journal.canonical import canonical_json
from tether.stores.codec import entry_json

FORMAT = "tether-audit-bundle"
VERSION = 1
MEMBERS = frozenset({"format", "version", "run_id", "exported_at", "meta", "entries", "effects", "blobs", "cost",
                     "prices", "head", "signature"})
"""A bundle's members: any other is refused (the format is closed)."""
SIGNATURE_MEMBERS = frozenset({"alg", "public_key", "signature"})
HEAD_MEMBERS = frozenset({"seq", "link"})

__all__ = ["build_bundle", "read_bundle", "referenced_blobs", "signed_bytes", "verify_bundle", "write_bundle"]


async def build_bundle(
    store: JournalStore, run_id: str, price_of: Callable[[str], Price | None] | None = None, *,
    allow_unchained: bool = False,
) -> dict[str, Any]:
    """The bundle of `run_id` as a JSON object (unsigned), after verifying the live record it is made of."""
    entries = await store.load(run_id)
    verified = verify_entries(run_id, entries, allow_unchained=allow_unchained)
    blobs = await check_beyond_entries(store, verified)  # a forged meta or blob is refused, never signed
    meta = await store.get_meta(run_id)
    models = sorted({m for e in entries for m in (e.costs or {}) | (e.usage_by_model or {})})
    rows = {m: p.model_dump(mode="json") for m in models if price_of is not None and (p := price_of(m)) is not None}
    return {
        "format": FORMAT, "version": VERSION, "run_id": run_id, "exported_at": time.time(),
        "meta": None if meta is None else meta.model_dump(mode="json"),
        "entries": [entry_json(e, e.seq or 0) for e in entries],
        "effects": await store.load_effects(run_id),
        "blobs": {k: base64.b64encode(v).decode() for k, v in blobs.items()},
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
    except RecursionError:
        raise AuditError(f"{where} is not a tether bundle: its JSON nests deeper than any bundle tether writes",
                         path=str(where), why="bundle") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise AuditError(f"{where} is not a tether audit bundle (no format {FORMAT!r}); make one with tether export",
                         path=str(where), why="bundle")
    return doc, raw


def verify_bundle(
    path: str | os.PathLike[str], public_key: str | os.PathLike[str] | None = None, *, allow_unchained: bool = False
) -> Verified:
    """Check a bundle offline: its bytes, signature, every entry's checksum and link, its head and its cost fold."""
    doc, raw = read_bundle(path)
    run_id = doc["run_id"] if isinstance(doc.get("run_id"), str) else "?"
    version = doc.get("version")
    if type(version) is not int or version != VERSION:
        raise fail(run_id, "bundle", f"the bundle is version {version!r}; this tether reads version {VERSION}")
    _check_shape(run_id, doc)
    texts: list[str] = doc["entries"]
    verified = verify_texts(run_id, texts, str(path), allow_unchained=allow_unchained)
    _check_entry_members(run_id, verified)
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
    blobs = {k: _blob_bytes(run_id, k, v) for k, v in doc["blobs"].items()}
    verified.blobs, loose = check_blobs(run_id, verified.entries, blobs)
    check_meta(run_id, doc["meta"], verified.entries, verified.cost)
    checks += ["blobs", "meta"]
    verified.not_covered = [*unchained_parts(loose, len(doc["effects"]), prices=bool(doc["prices"])),
                            "exported_at (the signature alone vouches for these)"]
    return verified


def _check_shape(run_id: str, doc: dict[str, Any]) -> None:
    """The bundle's members and their JSON types, exactly: the format is closed (an added member, `true` for a
    number, is refused rather than carried under the signature unread)."""
    extra = sorted(set(doc) - MEMBERS)
    if extra:
        raise fail(run_id, "bundle", f"the bundle has a member {extra[0]!r} this format does not define: it was "
                   f"added after export")
    expected: dict[str, tuple[type, ...]] = {
        "run_id": (str,), "exported_at": (int, float), "entries": (list,), "effects": (list,), "blobs": (dict,),
        "cost": (dict,), "prices": (dict,), "head": (dict,), "meta": (dict, type(None)),
    }
    for name, types in expected.items():
        if name not in doc or type(doc[name]) not in types:
            raise fail(run_id, "bundle", f"the bundle's {name!r} is {type(doc.get(name)).__name__}, not "
                       f"{' or '.join(t.__name__ for t in types)} (or it is missing)")
    if not all(type(t) is str for t in doc["entries"]):
        raise fail(run_id, "bundle", "the bundle's entries are not a list of stored entry texts")
    if not all(type(r) is dict for r in doc["effects"]) or not all(
            type(k) is str and type(v) is dict for k, v in doc["prices"].items()):
        raise fail(run_id, "bundle", "the bundle's effects or prices are not JSON objects")
    head = doc["head"]
    if set(head) != HEAD_MEMBERS or type(head["seq"]) is not int or type(head["link"]) is not str:
        raise fail(run_id, "bundle", f"the bundle's head must be exactly {{seq: integer, link: text}}, not {head!r}")
    member = doc.get("signature")
    if member is not None and (type(member) is not dict or set(member) != SIGNATURE_MEMBERS
                               or not all(type(v) is str for v in member.values())):
        found = sorted(member) if type(member) is dict else member
        raise fail(run_id, "signature", f"the bundle's signature member must be exactly "
                   f"{{{', '.join(sorted(SIGNATURE_MEMBERS))}}} (texts), not {found!r}")


def _check_entry_members(run_id: str, verified: Verified) -> None:
    """A bundle's entries hold only members this version writes (a live store keeps a newer one's; a bundle is
    checked whole, so a member nothing here reads is refused)."""
    for e in verified.entries:
        if e.unknown:
            raise fail(run_id, "bundle", f"the entry has a member {sorted(e.unknown)[0]!r} this tether does not "
                       f"know: it was written by a newer tether (verify with it) or forged", e.seq)


def _blob_bytes(run_id: str, key: str, text: Any) -> bytes:
    if type(text) is str:
        try:
            data = base64.b64decode(text, validate=True)
        except ValueError:
            pass
        else:
            if base64.b64encode(data).decode() == text:
                return data
    raise fail(run_id, "bundle", f"the bundle's blob {key!r} is not canonical base64")


def _check_signature(run_id: str, doc: dict[str, Any], public_key: str | os.PathLike[str] | None,
                     checks: list[str]) -> None:
    member = doc.get("signature")
    if member is None:
        if public_key is not None:
            raise fail(run_id, "signature", f"the bundle is not signed, but --key {public_key} asks for a "
                       f"signature by that key")
        checks.append("unsigned")
        return
    why = signature_holds(signed_bytes(doc), member, public_key)
    if why is not None:
        raise fail(run_id, "signature", f"{why}: the bundle was changed after it was signed, or signed by "
                   f"someone else")
    checks.append("signature" + ("" if public_key is not None else " (by the key it names: pass --key to pin it)"))
