"""Sessions on SQLite and PostgreSQL: one winner per head, the session ceiling across turns, typed refusals."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from session_app import build, requests

import tether


async def test_two_concurrent_sends_on_one_head_give_exactly_one_winner(store_url: str, tmp_path: Path) -> None:
    log = str(tmp_path / "requests.jsonl")
    engine, support = build(store_url, log)
    first = await engine.session("race").send("hello", workflow=support)
    assert first.status == "ok"
    a, b = engine.session("race"), engine.session("race")
    results = await asyncio.gather(a.send("left", workflow=support), b.send("right", workflow=support),
                                   return_exceptions=True)
    won = [r for r in results if isinstance(r, tether.Turn)]
    lost = [r for r in results if isinstance(r, tether.SessionConflictError)]
    assert len(won) == 1 and len(lost) == 1, results
    assert won[0].index == 2 and won[0].parent == "race.1"
    assert "branch" in lost[0].message
    turns = await a.turns()
    assert [(t.index, t.parent, t.status) for t in turns] == [(1, None, "ok"), (2, "race.1", "ok")]
    asked = [r["messages"][-1][1] for r in requests(log)]
    assert sorted(asked) == sorted(["hello", won[0].answer.removeprefix("re: ")])  # the loser sent nothing
    await engine.close()


async def test_a_session_ceiling_bounds_twenty_turns_and_the_refusing_turn_says_why(
    store_url: str, tmp_path: Path
) -> None:
    log = str(tmp_path / "requests.jsonl")
    engine, support = build(store_url, log)
    session = engine.session("capped", budget_usd=0.10)
    turns = [await session.send(f"question {i}", workflow=support) for i in range(20)]
    billed = sum(r["usd"] for r in requests(log))
    assert billed <= 0.10 + 1e-12
    assert billed >= 0.05  # most of the ceiling was used: turns were refused only near it
    stopped = [t for t in turns if t.status != "ok"]
    assert stopped, [t.status for t in turns]
    first = stopped[0]
    assert first.stop is tether.StopReason.SESSION_CEILING
    assert first.why is not None and "session" in first.why and "capped" in first.why
    assert all(t.stop is tether.StopReason.SESSION_CEILING for t in stopped)
    assert sum(t.cost_usd for t in turns) == pytest.approx(billed)
    assert await session.spent_usd() == pytest.approx(billed)

    await session.raise_budget(0.2)  # raisable: the next turn fits again
    assert (await session.send("after the raise", workflow=support)).status == "ok"
    with pytest.raises(tether.ConfigError, match="only raised"):
        await session.raise_budget(0.1)
    await engine.close()


async def test_a_send_on_an_unsettled_head_is_a_conflict_and_a_branch_starts_a_new_line(
    store_url: str, tmp_path: Path
) -> None:
    engine, support = build(store_url, str(tmp_path / "requests.jsonl"))
    session = engine.session("lines", workspace="acme")
    for p in ("one", "two", "three"):
        await session.send(p, workflow=support)
    await session.branch(1)
    fourth = await session.send("four", workflow=support)
    assert (fourth.index, fourth.parent) == (4, "lines.1")
    assert [t.index for t in await session.line()] == [1, 4]
    assert [t.index for t in await session.line(3)] == [1, 2, 3]  # the old line stays readable
    with pytest.raises(tether.SessionNotFoundError, match="no turn 9"):
        await session.branch(9)
    with pytest.raises(tether.ConfigError, match="workspace"):
        await engine.session("lines", workspace="other").turns()
    await engine.close()


async def test_a_send_naming_an_unknown_workflow_or_option_claims_no_turn(tmp_path: Path) -> None:
    engine, support = build(f"sqlite:///{tmp_path}/t.db", str(tmp_path / "requests.jsonl"))
    session = engine.session("s")
    with pytest.raises(tether.ConfigError, match="nope"):
        await session.send("hello", workflow="nope")
    with pytest.raises(TypeError, match="budgt_usd"):
        await session.send("hello", workflow=support, budgt_usd=1.0)  # type: ignore[call-arg]
    assert await session.turns() == [] and (await session.record()).head is None
    assert (await session.send("hello", workflow=support)).index == 1
    await engine.close()


async def test_a_raise_of_a_turn_run_stays_under_its_session_ceiling(store_url: str, tmp_path: Path) -> None:
    engine, support = build(store_url, str(tmp_path / "requests.jsonl"))
    try:
        session = engine.session("raised", budget_usd=0.05)
        for prompt in ("one", "two"):
            assert (await session.send(prompt, workflow=support)).status == "ok"
        with pytest.raises(tether.BudgetExhaustedError) as refused:
            await engine.raise_budget("raised.2", 1.0)
        assert refused.value.data["reason"] == tether.StopReason.SESSION_CEILING
        assert refused.value.data["room_usd"] == pytest.approx(0.05 - 0.0055)  # the ceiling less turn 1's spend
        assert "tether session raise raised" in refused.value.message
        await session.raise_budget(0.06)  # the turn's ceiling was all the session had left: raise the session first
        assert (await engine.raise_budget("raised.2", 0.05)).ceiling_usd == pytest.approx(0.05)  # within the room
        with pytest.raises(tether.BudgetExhaustedError):
            await engine.raise_budget("raised.2", 0.06)  # 0.0545 is the room now
        await session.raise_budget(2.0)
        assert (await engine.raise_budget("raised.2", 1.0)).ceiling_usd == pytest.approx(1.0)
    finally:
        await engine.close()
