"""The same recorded journal folds to the same outcome on every embedded store."""

from __future__ import annotations

import warnings
from pathlib import Path

import tether
from tether.contracts.entries import JournalEntry
from tether.stores import open_store


@tether.workflow(name="recorded")
async def recorded(ctx: tether.Ctx) -> dict[str, object]:
    a = await ctx.step("a", lambda: 1)
    par = await ctx.parallel([lambda i=i: ctx.step("p", lambda i=i: i) for i in range(3)])
    child = await ctx.workflow(leaf, {"x": 5})
    return {"a": a, "par": par, "child": child, "r": ctx.random()}


@tether.workflow(name="leaf")
async def leaf(ctx: tether.Ctx, x: int) -> int:
    return await ctx.step("leaf", lambda: x * 3)


async def test_one_journal_folds_to_one_outcome_on_memory_jsonl_and_sqlite(tmp_path: Path) -> None:
    source = tether.Engine(store=f"sqlite:///{tmp_path}/source.db")
    first = await source.run(recorded, run_id="rec")
    journal: list[JournalEntry] = await source.inspect("rec")
    outcomes = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for url in ("memory://", f"jsonl://{tmp_path}/j", f"sqlite:///{tmp_path}/copy.db"):
            store = open_store(url)
            await store.append_many("rec", [e.model_copy(update={"seq": None}) for e in journal])
            engine = tether.Engine(store=store)
            out = await engine.resume("rec", recorded, dry_run=True)
            outcomes.append((out.status, out.value, out.cost.total_usd, out.replay.hits, out.replay.misses))
    assert outcomes == [("ok", first.value, 0.0, 6, 0)] * 3
