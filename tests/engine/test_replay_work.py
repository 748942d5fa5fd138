"""Replay does work linear in the journal: matching, repeated labels, and the decode of a long run.

These tests count work (candidates the matcher examines), never time.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import tether
from tether.journal.matching import JournalIndex


@tether.workflow(name="loop")
async def loop(ctx: tether.Ctx, n: int, label: str | None = None) -> int:
    total = 0
    for i in range(n):
        total += await ctx.step(label or f"s{i}", lambda i=i: i)
    return total


async def journal_of(tmp_path: Path, n: int, label: str | None) -> list[Any]:
    engine = tether.Engine(store=f"sqlite:///{tmp_path}/{n}-{label}.db")
    out = await engine.run(loop, {"n": n, "label": label}, run_id="r")
    assert out.status == "ok"
    entries = await engine.inspect("r")
    await engine.close()
    return entries


def replay_work(entries: list[Any], n: int, key: str) -> int:
    """Candidates examined to match every step of the journal again, in order."""
    index = JournalIndex.build(entries)
    for _ in range(n):
        found = index.match("", key)
        assert found is not None and found.terminal is not None
    assert index.match("", key) is None  # one more is a miss, after every candidate was consumed
    return index.examined


async def test_matching_ten_thousand_steps_that_share_one_label_examines_each_candidate_once(tmp_path: Path) -> None:
    n = 10_000
    entries = await journal_of(tmp_path, n, "again")
    key = next(e.key for e in entries if e.kind == "step")
    assert replay_work(entries, n, key) == n  # linear: a quadratic matcher would examine ~n*n/2 = 50,000,000


async def test_matching_work_grows_linearly_with_a_repeated_label(tmp_path: Path) -> None:
    small, big = 2_500, 10_000
    work = {}
    for n in (small, big):
        entries = await journal_of(tmp_path, n, "again")
        key = next(e.key for e in entries if e.kind == "step")
        work[n] = replay_work(entries, n, key)
    assert work[big] == 4 * work[small]  # four times the steps, four times the work (not sixteen)


async def test_a_resume_of_a_repeated_label_loop_replays_every_step_with_linear_matching(tmp_path: Path) -> None:
    n = 3_000
    engine = tether.Engine(store=f"sqlite:///{tmp_path}/t.db")
    await engine.run(loop, {"n": n, "label": "again"}, run_id="r")
    handle = engine.start(loop, {"n": n, "label": "again"}, run_id="r")
    driven: list[Any] = []
    handle.observe(driven.append)  # the test-harness seam: the segment that drives the run
    again = await handle
    assert (again.value, again.replay.hits, again.replay.misses) == (sum(range(n)), n, 0)
    [segment] = driven
    # each lookup examines its own candidate, plus the genesis and settle lookups: nothing rescans
    assert segment.index.examined <= n + 4
    await engine.close()


async def test_entries_a_segment_appends_are_never_matching_candidates(tmp_path: Path) -> None:
    engine = tether.Engine(store=f"sqlite:///{tmp_path}/t.db")
    handle = engine.start(loop, {"n": 2_000, "label": "again"}, run_id="r")
    driven: list[Any] = []
    handle.observe(driven.append)
    out = await handle
    assert out.status == "ok"
    [segment] = driven
    assert segment.index.examined == 0  # a live run matches nothing, and never walks what it wrote
    await engine.close()
