"""Archive and redact on SQLite, JSONL and PostgreSQL: the payloads go (a scan of the store's raw bytes finds no trace
of a redacted text), the chain, the costs and the digests stay (`tether verify` passes and names the entries without
payload), a bundle exported before still verifies offline, and resuming is refused with a typed error."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest
from retentionkit import make_engine, tree

from tether.audit.bundle import build_bundle, verify_bundle, write_bundle
from tether.audit.verify import verify_store
from tether.contracts.errors import RunRetainedError
from tether.engine import redaction
from tether.journal.chain import link_after
from tether.stores.jsonl import JsonlStore

SECRET = "tides"
FIXTURE = Path(__file__).parent.parent / "fixtures" / "unsealed_journal"


async def _runs(url: str) -> None:
    engine, _ = make_engine(url)
    try:
        assert (await engine.run(tree, {"topic": SECRET}, run_id="tree", budget_usd=1.0)).status == "ok"
        assert (await engine.run(tree, {"topic": "sand"}, run_id="other", budget_usd=1.0)).status == "ok"
    finally:
        await engine.close()


def _raw_hits(url: str, text: str) -> list[str]:
    """Where the store's raw bytes hold `text`: the SQLite file and its WAL (checkpointed), every file of a JSONL
    directory, every row of every table of a PostgreSQL schema (as text, blobs as bytes)."""
    needle = text.encode()
    if url.startswith("sqlite"):
        path = Path(url.removeprefix("sqlite:///"))
        with sqlite3.connect(path) as c:
            c.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        return [p.name for p in path.parent.iterdir() if p.name.startswith(path.name) and needle in p.read_bytes()]
    if url.startswith("jsonl"):
        root = Path(url.removeprefix("jsonl://"))
        return [str(p) for p in root.rglob("*") if p.is_file() and needle in p.read_bytes()]
    import psycopg

    schema = parse_qs(urlparse(url).query)["schema"][0]
    hits = []
    with psycopg.connect(url.split("?")[0]) as c:
        tables = [r[0] for r in c.execute("SELECT table_name FROM information_schema.tables WHERE table_schema = %s",
                                          (schema,))]
        for t in tables:
            (n,) = c.execute(f'SELECT count(*) FROM "{schema}"."{t}" AS r WHERE position(%s in r::text) > 0',
                             (text,)).fetchone() or (0,)
            if t == "blobs":
                (n,) = c.execute(f'SELECT count(*) FROM "{schema}".blobs WHERE position(%s::bytea in data) > 0',
                                 (needle,)).fetchone() or (0,)
            if n:
                hits.append(t)
    return hits


async def test_archive_empties_the_texts_and_keeps_the_chain_the_costs_and_the_digests(store_url: str) -> None:
    await _runs(store_url)
    engine, _ = make_engine(store_url)
    try:
        store = await engine.store()
        cost = (await engine.cost("other")).model_dump(mode="json")
        before = await verify_store(store, "other")
        report = await redaction.archive(engine, "other", why="older than a year")
        entries = await store.load("other")
        assert report.entries["other"] and report.blobs and report.metas == ["other"] and not report.kept
        assert all(e.value is None and e.error is None for e in entries if e.seq in report.entries["other"])
        assert all(e.kind not in redaction.ARCHIVED_KINDS or e.value is None for e in entries)
        after = await verify_store(store, "other")  # checksums, chain, cost fold, blobs, meta
        assert after.no_payload == report.entries["other"] and "carry no payload" in after.summary()
        assert (await engine.cost("other")).model_dump(mode="json") == cost  # to the cent, and every other figure
        assert after.cost.total_usd == before.cost.total_usd
        # the chained form of every entry is unchanged: each entry's link is the one it had before
        assert [e.prev for e in entries[:len(before.entries)]] == [e.prev for e in before.entries]
        decision = entries[-1]
        assert decision.value["decision"] == "archive" and decision.value["why"] == "older than a year"
        assert "sand" not in "".join(json.dumps(e.to_json_dict()) for e in entries)
        assert _raw_hits(store_url, "answer to root on sand") == []
        assert (await store.get_meta("other")).args is None  # type: ignore[union-attr]
        transcript = await engine.transcript("other", 1)  # its digests check; its messages are gone, and it says so
        assert transcript.redacted and transcript.messages == []
        assert (await verify_store(store, "tree")).no_payload == []  # another run untouched
        with pytest.raises(RunRetainedError, match=r"archived at seq .* cannot resume") as err:
            await engine.resume("other", tree)
        assert err.value.data["decision"] == "archive"
    finally:
        await engine.close()


async def test_redacting_a_prompt_leaves_no_byte_of_it_and_a_bundle_exported_before_still_verifies(
    store_url: str, tmp_path: Path,
) -> None:
    await _runs(store_url)
    engine, _ = make_engine(store_url)
    try:
        store = await engine.store()
        old_bundle = write_bundle(await build_bundle(store, "tree"), tmp_path / "before.bundle", None)
        cost = (await engine.cost("tree")).model_dump(mode="json")
        assert _raw_hits(store_url, SECRET)  # the prompt, the outputs, the args, the transcript hold it
        report = await redaction.redact(engine, "tree", match=SECRET, why="erasure request 42")
        assert report.entries["tree"] and report.blobs and report.metas == ["tree"]
        assert _raw_hits(store_url, SECRET) == []  # no table, file, blob or page holds it any more
        verified = await verify_store(store, "tree")
        assert verified.no_payload == report.entries["tree"]
        assert (await engine.cost("tree")).model_dump(mode="json") == cost
        # the bundle taken before still verifies offline, and the live chain still runs through its head
        old = verify_bundle(old_bundle)
        live = await store.load("tree")
        assert live[old.head.seq].prev == old.head.link
        after = verify_bundle(write_bundle(await build_bundle(store, "tree"), tmp_path / "after.bundle", None))
        assert after.no_payload == report.entries["tree"]  # a bundle of the redacted run verifies offline too
        assert SECRET.encode() not in (tmp_path / "after.bundle").read_bytes()
        decision = live[-1]
        assert decision.value["decision"] == "redact" and decision.value["why"] == "erasure request 42"
        assert decision.value["by"] and decision.value["at"] and SECRET not in json.dumps(decision.value)
        other = await verify_store(store, "other")
        assert other.no_payload == [] and (await store.get_meta("other")).args == {"topic": "sand"}  # type: ignore[union-attr]
        with pytest.raises(RunRetainedError, match="redacted at seq") as err:
            await engine.resume("tree", tree)
        assert err.value.data["decision"] == "redact" and err.value.data["why"] == "erasure request 42"
        with pytest.raises(RunRetainedError):
            await engine.fork("tree", "tree-fork", tree)
    finally:
        await engine.close()


async def test_redacting_one_seq_removes_that_payload_and_its_transcript_only(store_url: str) -> None:
    await _runs(store_url)
    engine, _ = make_engine(store_url)
    try:
        store = await engine.store()
        terminal = next(e for e in await store.load("tree") if e.kind == "agent" and e.ref is not None)
        report = await redaction.redact(engine, "tree", seq=terminal.seq, why="one answer")
        assert report.entries == {"tree": [terminal.seq]}
        assert {k.split("/m/")[0] for k in report.blobs} == {terminal.checkpoint_ref}
        verified = await verify_store(store, "tree")
        assert verified.no_payload == [terminal.seq] and verified.blobs > 0
        with pytest.raises(RunRetainedError) as err:
            await redaction.redact(engine, "tree", seq=len(verified.entries) + 5)
        assert err.value.data["why"] == "missing"
        with pytest.raises(RunRetainedError, match="would change the run's figures") as err:
            await redaction.redact(engine, "tree", seq=1)  # the genesis: the ceiling the cost fold reads
        assert err.value.data["why"] == "figures"
    finally:
        await engine.close()


async def test_a_journal_written_before_payloads_were_sealed_loads_verifies_and_refuses_redaction(
    tmp_path: Path,
) -> None:
    root = tmp_path / "journals"
    shutil.copytree(FIXTURE, root)
    store = JsonlStore(root)
    entries = await store.load("old")
    assert entries and all(e.payload_sha256 is None for e in entries)  # every link over the whole body
    verified = await verify_store(store, "old")
    assert verified.agents == 3 and verified.no_payload == []
    engine, _ = make_engine(f"jsonl://{root}")
    try:
        with pytest.raises(RunRetainedError, match="written before payloads were committed by digest") as err:
            await redaction.redact(engine, "old", match=SECRET)
        assert err.value.data["why"] == "unsealed"
        assert SECRET.encode() in (root / "old.jsonl").read_bytes()  # nothing was changed
        report = await redaction.archive(engine, "old")  # archive leaves the unsealed entries whole and says so
        assert report.kept["old"] and not report.entries["old"] and report.blobs  # (its digested blobs go)
        assert (await verify_store(store, "old")).agents == 3
    finally:
        await engine.close()
    # the archive decision, sealed, links to the last entry by the old rule (its whole body): both rules verify
    decision = (await store.load("old"))[-1]
    assert decision.payload_sha256 is not None and decision.prev == link_after(entries)


def _payload_members(text: str) -> list[str]:
    data: dict[str, Any] = json.loads(text)
    return list(data)[list(data).index("payload_sha256"):] if "payload_sha256" in data else []


async def test_a_sealed_entry_stores_its_payload_after_its_digest(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/t.db"
    await _runs(url)
    with sqlite3.connect(tmp_path / "t.db") as c:
        texts = [r[0] for r in c.execute("SELECT json FROM entries WHERE run_id = 'tree' ORDER BY seq")]
    sealed = [t for t in texts if "payload_sha256" in t]
    assert sealed and all(_payload_members(t)[0] == "payload_sha256" and _payload_members(t)[-1] == "checksum"
                          for t in sealed)


@pytest.mark.filterwarnings("ignore:tether MemoryStore")
async def test_the_memory_store_archives_and_redacts_alike() -> None:
    engine, _ = make_engine("memory://")
    try:
        assert (await engine.run(tree, {"topic": SECRET}, run_id="tree", budget_usd=1.0)).status == "ok"
        store = await engine.store()
        cost = (await engine.cost("tree")).model_dump(mode="json")
        report = await redaction.redact(engine, "tree", match=SECRET)
        assert report.entries["tree"] and (await verify_store(store, "tree")).no_payload == report.entries["tree"]
        assert SECRET not in json.dumps([e.to_json_dict() for e in await store.load("tree")])
        await redaction.archive(engine, "tree")
        assert (await engine.cost("tree")).model_dump(mode="json") == cost
    finally:
        await engine.close()
