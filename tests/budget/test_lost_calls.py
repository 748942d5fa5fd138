"""A turn paid and then lost to a kill (issue 40, item 7): drawn, not checkpointed, sent again by the redispatch.

The fold lists it apart (`CostReport.lost`, charged at its recorded usage) from the orphans (charged at their worst
case), counts it in `spent_usd` and never in `orphaned_usd`, the same way on every store.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import tether
from tether.contracts.entries import JournalEntry
from tether.journal.cost import REDISPATCH, fold_cost
from tether.stores import open_store

DRAW_USD = (0.0012, 0.0031, 0.0027)
WORST = 0.05


def crashed_and_redispatched() -> list[JournalEntry]:
    """An agent's turn 2 was drawn, the process died before its checkpoint, the redispatch sent it again as call 3;
    call 4 was cut off by a second kill (an orphan); then the agent settled."""
    genesis = JournalEntry(kind="decision", value={"decision": "genesis", "workflow": "w", "budget_usd": 1.0})
    running = JournalEntry(kind="agent", status="running", key="k", agent_id=1, label="a")

    def dispatch(call: int) -> JournalEntry:
        return JournalEntry(kind="decision", label="dispatch", agent_id=1, scope="agent:2",
                            value={"decision": "dispatch", "call": call, "model": "fake:m", "worst_usd": WORST})

    def draw(call: int, usd: float, step: int) -> JournalEntry:
        return JournalEntry(kind="tree", label="budget_draw", agent_id=1, costs={"fake:m": usd}, from_call=call,
                            through=call, value={"agent_id": 1, "step": step, "kind": "budget_draw", "tokens": 10,
                                                 "usd": usd})

    restart = JournalEntry(kind="decision", label=REDISPATCH, agent_id=1, scope="agent:2",
                           value={"decision": REDISPATCH, "through": 1})
    spent = sum(DRAW_USD)
    terminal = JournalEntry(kind="agent", status="ok", ref=2, key="k", agent_id=1, label="a",
                            costs={"fake:m": spent}, cost_usd=spent, orphaned={"fake:m": WORST},
                            orphaned_usd=WORST, cut=[4], provider_calls=4, value={"output": "done"})
    return [genesis, running, dispatch(1), draw(1, DRAW_USD[0], 1), dispatch(2), draw(2, DRAW_USD[1], 2), restart,
            dispatch(3), draw(3, DRAW_USD[2], 2), dispatch(4), terminal]


@pytest.fixture(params=["sqlite", "jsonl", "postgresql", "memory"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/t.db"
    if request.param == "jsonl":
        return f"jsonl://{tmp_path}/j"
    if request.param == "memory":
        return "memory://"
    return f"{request.getfixturevalue('pg_dsn')}?schema={request.getfixturevalue('pg_schema')}"


async def test_a_turn_drawn_then_sent_again_after_a_kill_is_listed_as_paid_and_lost_on_every_store(
    store_url: str,
) -> None:
    store = open_store(store_url)
    try:
        entries = crashed_and_redispatched()
        for seq, e in enumerate(entries, start=1):
            e.seq = seq
        await store.append_many("r", entries)
        report = fold_cost(await store.load("r"))
    finally:
        await store.close()
    assert report.spent_usd == pytest.approx(sum(DRAW_USD))  # the lost turn was billed: it is spend
    assert report.orphaned_usd == pytest.approx(WORST) and report.orphaned_calls == 1
    assert report.lost_recorded_usd == pytest.approx(DRAW_USD[1])
    assert [(lost.calls, lost.charged, lost.usd) for lost in report.lost] == [
        ([2], "recorded", pytest.approx(DRAW_USD[1])), ([4], "worst-case", pytest.approx(WORST))]


def test_without_the_restart_fact_a_journal_written_before_reads_as_it_did() -> None:
    entries = [e for e in crashed_and_redispatched() if e.label != REDISPATCH]
    for seq, e in enumerate(entries, start=1):
        e.seq = seq
    report = fold_cost(entries)
    assert report.spent_usd == pytest.approx(sum(DRAW_USD)) and report.lost_recorded_usd == 0
    assert [lost.charged for lost in report.lost] == ["worst-case"]


def test_the_public_report_names_its_lost_calls() -> None:
    assert "lost" in tether.CostReport.model_fields and "lost_recorded_usd" in tether.CostReport.model_fields
