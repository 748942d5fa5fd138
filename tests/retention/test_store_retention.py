"""`RetentionStore` on every store: several runs' rows at once, the blobs asked for kept, lease epochs kept."""

from __future__ import annotations

import warnings
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tether.contracts.entries import JournalEntry, RunMeta
from tether.contracts.retention import RetentionStore
from tether.stores import open_store
from tether.stores.leases import current_owner


@pytest.fixture(params=["memory", "sqlite", "jsonl", "postgres"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Any]:
    url = {"memory": "memory://", "sqlite": f"sqlite:///{tmp_path}/t.db", "jsonl": f"jsonl://{tmp_path}/j"}.get(
        request.param)
    if url is None:
        url = f"{request.getfixturevalue('pg_dsn')}?schema={request.getfixturevalue('pg_schema')}"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        s = open_store(url)
    assert isinstance(s, RetentionStore)
    yield s
    await s.close()


async def _run(s: Any, run_id: str) -> None:
    await s.append_many(run_id, [JournalEntry(kind="decision", value={"decision": "genesis"}),
                                 JournalEntry(kind="step", value="x" * 100)])
    await s.put_meta(RunMeta(run_id=run_id, workflow="wf", status="ok", created_at=1.0, updated_at=1.0))
    await s.append_effect(run_id, {"phase": "intent"})
    for key in ("checkpoints/2", "checkpoints/2/m/0"):
        await s.put_blob(f"{run_id}/{key}", b"blob")


async def test_delete_runs_removes_every_row_but_the_kept_blobs_and_the_epochs(store: Any) -> None:
    s = store
    for run_id in ("a", "b", "c"):
        await _run(store, run_id)
    lease = await s.acquire("a", current_owner(), 30.0)
    rows = await store.delete_runs(["a", "b"], keep_blobs={"a/checkpoints/2"})
    assert rows["entries"] == 4 and rows["meta"] == 2 and rows["effects"] == 2 and rows["leases"] == 1
    assert rows["blobs"] == 3  # a's chunk and both of b's; a's head was asked for
    for run_id in ("a", "b"):
        assert await s.load(run_id) == [] and await s.get_meta(run_id) is None
        assert await s.load_effects(run_id) == []
    assert await s.get_blob("a/checkpoints/2") == b"blob"
    assert await s.get_blob("b/checkpoints/2") is None
    assert len(await s.load("c")) == 2 and await s.get_blob("c/checkpoints/2/m/0") == b"blob"
    again = await s.acquire("a", current_owner(), 30.0)
    assert again.epoch > lease.epoch  # the epoch outlived the run: a zombie's lease can never be current again
    stats = await store.store_stats()
    assert stats.runs == 1 and stats.entries == 2 and stats.blobs == 3 and stats.effects == 1
    assert [r.run_id for r in stats.largest] == ["c"]


async def test_a_jsonl_run_whose_journal_is_damaged_is_deleted_all_the_same(tmp_path: Path) -> None:
    from tether.stores.jsonl import JsonlStore

    s = JsonlStore(tmp_path / "j")
    await _run(s, "bad")
    path = tmp_path / "j" / "bad.jsonl"
    path.write_bytes(b"not json\n" + path.read_bytes())
    rows = await s.delete_runs(["bad"])
    assert rows["entries"] == 3 and rows["blobs"] == 2 and rows["meta"] == 1
    assert not path.exists() and await s.get_meta("bad") is None
