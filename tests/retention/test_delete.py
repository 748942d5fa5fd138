"""engine.delete and sweep on SQLite, JSONL and PostgreSQL: a three-level tree goes whole, every table counted;
its fork and another run stay untouched (the fork still verifies, resumes, and costs the same)."""

from __future__ import annotations

from pathlib import Path

import pytest
from retentionkit import NOT_A_RUNS_ROWS, blob_keys, gated, make_engine, rows_of, tree

from tether.audit.verify import verify_store
from tether.contracts.errors import LeaseHeldError, RunActiveError, RunNotFoundError
from tether.engine import retention

ARGS = {"topic": "tides"}


async def _setup(url: str) -> None:
    """Runs `tree` and `other` (the same three-level workflow) and forks `tree` into `tree-fork`."""
    engine, fake = make_engine(url)
    try:
        assert (await engine.run(tree, ARGS, run_id="tree", budget_usd=1.0)).status == "ok"
        assert (await engine.run(tree, {"topic": "sand"}, run_id="other", budget_usd=1.0)).status == "ok"
        assert (await engine.fork("tree", "tree-fork", tree)).status == "ok"
    finally:
        await engine.close()
    assert fake.calls == 8  # 4 for each run (the root's two turns, mid, leaf); the fork replays all


def _live(counts: dict[str, int]) -> dict[str, int]:
    """The counts a delete must bring to zero (the tables it leaves are named in NOT_A_RUNS_ROWS)."""
    return {t: n for t, n in counts.items() if t not in NOT_A_RUNS_ROWS and t not in (".lock", ".epoch")}


async def test_deleting_a_tree_removes_every_row_it_owns_and_leaves_its_fork_and_other_runs_whole(
    store_url: str,
) -> None:
    await _setup(store_url)
    before = rows_of(store_url, {"tree"})
    held = (".jsonl", ".meta.json", ".effects.jsonl") if store_url.startswith("jsonl") else ("entries", "meta", "effects")
    assert all(before[t] > 0 for t in (*held, "blobs")), before  # the tree wrote to every kind of row
    engine, fake = make_engine(store_url)
    try:
        store = await engine.store()
        fork_cost, other_cost = await engine.cost("tree-fork"), await engine.cost("other")
        other_rows = rows_of(store_url, {"other"})
        fork_journal = await engine.inspect("tree-fork")
        report = await engine.delete("tree")
        assert report.deleted == ["tree"] and report.forks_kept == ["tree-fork"]
        after = rows_of(store_url, {"tree"})
        # Only the checkpoint blobs the fork's copied agent terminals vouch for are left, kept for the fork.
        assert blob_keys(store_url, "tree") == set(report.kept_blobs)
        vouched = {e.checkpoint_ref for e in fork_journal if e.checkpoint_ref and e.checkpoint_sha256}
        assert vouched and vouched <= set(report.kept_blobs)
        assert {k.split("/m/")[0] for k in report.kept_blobs} == vouched
        assert {t: n for t, n in _live(after).items() if t != "blobs"} == dict.fromkeys(
            [t for t in _live(after) if t != "blobs"], 0)
        with pytest.raises(RunNotFoundError):
            await engine.inspect("tree")
        verified = await verify_store(store, "tree-fork")  # the fork still verifies, blobs and all
        assert verified.blobs >= len(vouched)
        assert await engine.cost("tree-fork") == fork_cost
        assert await engine.cost("other") == other_cost
        assert rows_of(store_url, {"other"}) == other_rows
        resumed = await engine.resume("tree-fork", tree)  # and resumes alone, paying nothing again
        assert resumed.status == "ok" and fake.calls == 0
    finally:
        await engine.close()


async def test_with_forks_the_forks_rows_go_too(store_url: str) -> None:
    await _setup(store_url)
    engine, _ = make_engine(store_url)
    try:
        other_cost = await engine.cost("other")
        report = await engine.delete("tree", with_forks=True)
        assert report.deleted == ["tree", "tree-fork"] and report.forks_kept == [] and report.kept_blobs == []
        assert set(_live(rows_of(store_url, {"tree", "tree-fork"})).values()) == {0}
        assert await engine.cost("other") == other_cost
        assert [m.run_id for m in await engine.runs()] == ["other"]
    finally:
        await engine.close()


async def test_a_suspended_run_is_refused_unless_forced_and_a_sweep_skips_it_and_says_so(store_url: str) -> None:
    engine, _ = make_engine(store_url)
    try:
        assert (await engine.run(gated, {}, run_id="parked")).status == "suspended"
        assert (await engine.run(tree, ARGS, run_id="done")).status == "ok"
        with pytest.raises(RunActiveError) as refused:
            await engine.delete("parked")
        assert refused.value.data["status"] == "suspended" and "--force" in refused.value.message
        assert (await engine.run_meta("parked")).status == "suspended"  # nothing was deleted

        store = await engine.store()
        dry = await retention.sweep(store, before=4e9, dry_run=True)
        assert dry.deleted == ["done"] and [s.run_id for s in dry.skipped] == ["parked"]
        assert "suspended" in dry.skipped[0].reason and "resume" in dry.skipped[0].reason
        assert {m.run_id for m in await engine.runs()} == {"parked", "done"}  # a dry run removes nothing

        swept = await retention.sweep(store, before=4e9)
        assert swept.deleted == ["done"] and swept.rows["entries"] > 0
        assert [m.run_id for m in await engine.runs()] == ["parked"]
        assert set(_live(rows_of(store_url, {"done"})).values()) == {0}

        forced = await engine.delete("parked", force=True)
        assert forced.deleted == ["parked"] and await engine.runs() == []
    finally:
        await engine.close()


async def test_a_sweep_keeps_runs_updated_since_the_cutoff_and_filters_by_status(store_url: str) -> None:
    engine, _ = make_engine(store_url)
    try:
        await engine.run(tree, ARGS, run_id="old")
        cutoff = (await engine.run_meta("old")).updated_at + 0.001
        store = await engine.store()
        assert (await retention.sweep(store, before=cutoff, statuses={"error"}, dry_run=True)).deleted == []
        assert (await retention.sweep(store, before=cutoff - 3600)).deleted == []
        assert (await retention.sweep(store, before=cutoff, statuses={"ok"})).deleted == ["old"]
    finally:
        await engine.close()


async def test_stats_count_the_runs_and_compact_runs_the_backends_step(store_url: str) -> None:
    await _setup(store_url)
    engine, _ = make_engine(store_url)
    try:
        store = await engine.store()
        stats = await retention.store_stats(store, largest=2)
        assert stats.runs == 3 and stats.blobs > 0 and stats.entries >= 3 * 4
        assert len(stats.largest) == 2 and stats.largest[0].bytes >= stats.largest[1].bytes
        total = sum([len(await engine.inspect(r)) for r in ("tree", "other", "tree-fork")])
        assert stats.entries == total
        await engine.delete("other")
        result = await retention.compact(store)
        assert result.store == stats.store
        assert (await retention.store_stats(store)).runs == 2
        if stats.store == "jsonl":
            assert result.action.startswith("nothing to do")
        else:
            assert result.action.startswith("VACUUM") and result.after_bytes is not None
    finally:
        await engine.close()


async def test_a_child_run_goes_with_its_parent_and_a_fork_of_it_stays() -> None:
    """A run whose meta names a parent and that is no fork (no `fork_at`, no lineage) is the parent's: deleting the
    parent deletes it, down the levels; the fork of a child stays."""
    import warnings

    from tether.contracts.entries import RunMeta
    from tether.stores.memory import MemoryStore

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        store = MemoryStore()

    def meta(run_id: str, parent: str | None = None, **extra: object) -> RunMeta:
        return RunMeta(run_id=run_id, workflow="wf", status="ok", created_at=1.0, updated_at=1.0, parent_run_id=parent,
                       **extra)

    for m in (meta("root"), meta("child", "root"), meta("grandchild", "child"), meta("fork", "child", fork_at=None),
              meta("stranger")):
        await store.put_meta(m)
        await store.put_blob(f"{m.run_id}/checkpoints/1", b"{}")
    report = await retention.delete(store, "root")
    assert report.deleted == ["root", "child", "grandchild"] and report.forks_kept == ["fork"]
    assert sorted(m.run_id for m in await store.list_runs()) == ["fork", "stranger"]
    assert await store.get_blob("grandchild/checkpoints/1") is None and await store.get_blob("fork/checkpoints/1")


async def test_a_running_run_is_refused_and_a_forced_delete_stops_its_driver_at_its_next_write(tmp_path: Path) -> None:
    import asyncio

    import tether

    gate, started = asyncio.Event(), asyncio.Event()

    @tether.workflow(name="slow")
    async def slow(ctx: tether.Ctx) -> str:
        await ctx.step("first", lambda: "one")

        async def wait() -> str:
            started.set()
            await gate.wait()
            return "two"

        return await ctx.step("second", wait)

    url = f"sqlite:///{tmp_path}/t.db"
    engine, _ = make_engine(url)
    try:
        handle = engine.start(slow, {}, run_id="busy")
        await started.wait()
        with pytest.raises(RunActiveError) as refused:
            await engine.delete("busy")
        assert refused.value.data["status"] == "running"
        await engine.delete("busy", force=True)
        gate.set()
        with pytest.raises(LeaseHeldError) as lost:  # its lease went with the run: nothing it writes lands
            await handle
        assert "deleted" in lost.value.message
        assert rows_of(url, {"busy"})["entries"] == 0 and rows_of(url, {"busy"})["meta"] == 0
    finally:
        await engine.close()


async def test_a_queued_run_is_refused_and_forcing_it_removes_its_queue_row(pg_dsn: str, pg_schema: str) -> None:
    url = f"{pg_dsn}?schema={pg_schema}"
    engine, _ = make_engine(url)
    try:
        await engine.enqueue(tree, ARGS, run_id="waiting")
        assert rows_of(url, {"waiting"})["queue"] == 1
        with pytest.raises(RunActiveError):
            await engine.delete("waiting")
        assert rows_of(url, {"waiting"})["queue"] == 1
        await engine.delete("waiting", force=True)
        assert set(_live(rows_of(url, {"waiting"})).values()) == {0}
    finally:
        await engine.close()


async def test_jsonl_finds_the_blobs_it_stored_under_a_hashed_name(tmp_path: Path) -> None:
    """A JSONL blob whose quoted key is too long for a file name is stored under a hash of it: the delete finds it
    from the run's journal (its agents' checkpoint keys and the chunks their heads list), not from the name."""
    import json

    from tether.contracts.entries import JournalEntry, RunMeta
    from tether.journal.blobs import checkpoint_key, chunk_key
    from tether.stores.jsonl import JsonlStore

    store = JsonlStore(tmp_path / "j")
    run_id = "r" * 190
    await store.append_many(run_id, [JournalEntry(kind="decision", value={"decision": "genesis"}),
                                     JournalEntry(kind="agent", agent_id=1)])
    await store.put_meta(RunMeta(run_id=run_id, workflow="wf", status="ok", created_at=1.0, updated_at=1.0))
    head = checkpoint_key(run_id, 2)
    await store.put_blob(head, json.dumps({"chunks": 2}).encode())
    for i in range(3):  # the third chunk was written before a head that never landed
        await store.put_blob(chunk_key(head, i), b"chunk")
    names = sorted(p.name for p in (tmp_path / "j" / "blobs").iterdir())
    assert len(names) == 4 and all(n.startswith("h-") for n in names)
    rows = await store.delete_runs([run_id])
    assert rows["blobs"] == 4 and not list((tmp_path / "j" / "blobs").iterdir())
    assert rows["entries"] == 2 and rows["meta"] == 1
