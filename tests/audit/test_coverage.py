"""What the chain covers beyond entries (issue 43, items 2 and 3): checkpoint blobs and the meta's figures are
checked against it, and a bundle's format is closed (no extra members, exact types)."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest
from audit_kit import RUN, Backend, rechecksummed
from test_bundle import keys  # noqa: F401  (the signing keys fixture)

from tether.audit import AuditError, build_bundle, verify_bundle, verify_store, write_bundle
from tether.audit.verify import verify_texts
from tether.contracts.errors import JournalCorruptError
from tether.journal.canonical import canonical_json

pytestmark = pytest.mark.parametrize("backend", ["sqlite", "jsonl"], indirect=True)


async def _checkpoint(backend: Backend) -> tuple[Any, str, int]:
    """The store, the checkpoint key of the agent that ran a tool turn, and that agent's id."""
    store = await backend.engine.store()
    entries = await store.load(RUN)
    terminal = next(e for e in entries if e.kind == "agent" and e.ref is not None and e.checkpoint_sha256)
    assert terminal.checkpoint_ref is not None and terminal.agent_id is not None
    return store, terminal.checkpoint_ref, terminal.agent_id


async def test_an_untouched_run_checks_its_blobs_and_meta_and_names_what_is_unchained(backend: Backend) -> None:
    verified = await verify_store(await backend.engine.store(), RUN)
    assert verified.blobs >= 2 and {"blobs", "meta"} <= set(verified.checks)  # a head and its chunks
    assert "effect-ledger rows" in verified.summary() and "not covered by the chain" in verified.summary()


async def test_a_forged_transcript_chunk_fails_verify_export_and_transcript(backend: Backend, tmp_path: Path) -> None:
    store, key, agent_id = await _checkpoint(backend)
    chunk = await store.get_blob(f"{key}/m/0")
    assert chunk is not None and b"Paris" in chunk
    await store.put_blob(f"{key}/m/0", chunk.replace(b"Paris", b"Tokyo"))
    with pytest.raises(AuditError) as err:
        await verify_store(store, RUN)
    assert err.value.why == "blob" and err.value.seq is not None
    with pytest.raises(AuditError, match=r"blob|transcript"):
        await backend.engine.export(RUN, tmp_path / "run.bundle")
    with pytest.raises(JournalCorruptError, match="not the one its terminal vouches for"):
        await backend.engine.transcript(RUN, agent_id)


async def test_a_forged_checkpoint_head_fails_verify(backend: Backend) -> None:
    store, key, _ = await _checkpoint(backend)
    head = json.loads(await store.get_blob(key) or b"{}")
    head["loop"]["turns"] = 99
    await store.put_blob(key, json.dumps(head).encode())
    with pytest.raises(AuditError, match="sha256") as err:
        await verify_store(store, RUN)
    assert err.value.why == "blob"


async def test_a_transcript_added_to_an_agent_that_wrote_none_fails_verify(backend: Backend) -> None:
    store, key, _ = await _checkpoint(backend)
    entries = await store.load(RUN)
    quiet = next(e for e in entries if e.kind == "agent" and e.ref is not None and e.checkpoint_sha256 == "")
    assert quiet.checkpoint_ref is not None
    await store.put_blob(quiet.checkpoint_ref, await store.get_blob(key) or b"")
    with pytest.raises(AuditError, match="wrote none") as err:
        await verify_store(store, RUN)
    assert err.value.why == "blob"


async def test_a_meta_budget_edited_to_999_fails_verify_and_export(backend: Backend, tmp_path: Path) -> None:
    store = await backend.engine.store()
    meta = await store.get_meta(RUN)
    assert meta is not None and meta.budget_usd == 1.0
    await store.put_meta(meta.model_copy(update={"budget_usd": 999.0}))
    with pytest.raises(AuditError, match="budget_usd is 999") as err:
        await verify_store(store, RUN)
    assert err.value.why == "meta"
    with pytest.raises(AuditError, match="budget_usd"):
        await backend.engine.export(RUN, tmp_path / "run.bundle")


async def _doc(backend: Backend) -> dict[str, Any]:
    return await build_bundle(await backend.engine.store(), RUN)


def _resigned(doc: dict[str, Any], path: Path, key: Path) -> Path:
    return write_bundle({k: v for k, v in doc.items() if k != "signature"}, path, key)


async def test_a_bundle_signed_over_a_forged_blob_or_meta_fails(
    backend: Backend, keys: dict[str, Path], tmp_path: Path,  # noqa: F811
) -> None:
    doc = await _doc(backend)
    chunk = next(k for k in doc["blobs"] if "/m/" in k)
    forged = base64.b64decode(doc["blobs"][chunk]).replace(b"Paris", b"Tokyo")
    blob_doc = {**doc, "blobs": {**doc["blobs"], chunk: base64.b64encode(forged).decode()}}
    with pytest.raises(AuditError) as err:
        verify_bundle(_resigned(blob_doc, tmp_path / "blob.bundle", keys["signer"]), keys["signer.pub"])
    assert err.value.why == "blob"
    meta_doc = {**doc, "meta": {**doc["meta"], "budget_usd": 999.0}}
    with pytest.raises(AuditError) as err:
        verify_bundle(_resigned(meta_doc, tmp_path / "meta.bundle", keys["signer"]), keys["signer.pub"])
    assert err.value.why == "meta"
    extra_doc = {**doc, "blobs": {**doc["blobs"], f"{RUN}/checkpoints/99": base64.b64encode(b"{}").decode()}}
    with pytest.raises(AuditError, match="referenced by no entry"):
        verify_bundle(_resigned(extra_doc, tmp_path / "extra.bundle", keys["signer"]), keys["signer.pub"])
    verified = verify_bundle(_resigned(doc, tmp_path / "ok.bundle", keys["signer"]), keys["signer.pub"])
    assert verified.blobs >= 2 and any("exported_at" in part for part in verified.not_covered)


async def test_a_signature_member_with_an_extra_member_is_refused(
    backend: Backend, keys: dict[str, Path], tmp_path: Path,  # noqa: F811
) -> None:
    path = _resigned(await _doc(backend), tmp_path / "run.bundle", keys["signer"])
    doc = json.loads(path.read_bytes())
    doc["signature"]["extra"] = 1
    path.write_bytes(canonical_json(doc))
    with pytest.raises(AuditError, match="signature member must be exactly") as err:
        verify_bundle(path, keys["signer.pub"])
    assert err.value.why == "signature"


@pytest.mark.parametrize("edit", [
    pytest.param(lambda d: d.update(version=True), id="version-true"),
    pytest.param(lambda d: d.update(extra=1), id="header-member"),
    pytest.param(lambda d: d["head"].update(extra=1), id="head-member"),
    pytest.param(lambda d: d["head"].update(seq=str(d["head"]["seq"])), id="head-seq-text"),
    pytest.param(lambda d: d.update(exported_at=True), id="exported_at-true"),
    pytest.param(lambda d: d.update(meta=[]), id="meta-list"),
])
async def test_a_signed_bundle_with_an_unknown_member_or_inexact_type_is_refused(
    backend: Backend, keys: dict[str, Path], tmp_path: Path, edit: Any,  # noqa: F811
) -> None:
    doc = await _doc(backend)
    edit(doc)
    path = _resigned(doc, tmp_path / "run.bundle", keys["signer"])  # signed as it is: only the format refuses it
    with pytest.raises(AuditError) as err:
        verify_bundle(path, keys["signer.pub"])
    assert err.value.why == "bundle"


async def test_a_signed_bundle_whose_entry_carries_an_unknown_member_is_refused(
    backend: Backend, keys: dict[str, Path], tmp_path: Path,  # noqa: F811
) -> None:
    doc = await _doc(backend)
    doc["entries"][-1] = rechecksummed(doc["entries"][-1], lambda e: e.update(extra=1))
    doc["head"] = verify_texts(RUN, doc["entries"], "test").head.to_json()  # a well-linked, re-signed forgery
    with pytest.raises(AuditError, match="'extra' this tether does not know") as err:
        verify_bundle(_resigned(doc, tmp_path / "run.bundle", keys["signer"]), keys["signer.pub"])
    assert err.value.why == "bundle" and err.value.seq == len(doc["entries"])


async def test_a_bundle_nested_100k_deep_is_a_typed_bundle_error(backend: Backend, tmp_path: Path) -> None:
    path = tmp_path / "deep.bundle"
    path.write_bytes(b"[" * 100_000 + b"]" * 100_000)
    with pytest.raises(AuditError, match="nests deeper") as err:
        verify_bundle(path)
    assert err.value.why == "bundle"
