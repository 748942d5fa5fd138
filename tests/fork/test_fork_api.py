"""engine.fork: a ten-call run, edited at its 7th call, previewed and forked on SQLite and PostgreSQL."""

from __future__ import annotations

import pytest
from forkkit import chain_workflow, fake_model, make_engine, store_digest

ARGS = {"topic": "tides"}


async def _source(url: str) -> float:
    fake = fake_model()
    engine = make_engine(url, fake)
    try:
        outcome = await engine.run(chain_workflow(), ARGS, run_id="src", budget_usd=1.0)
        assert outcome.status == "ok" and fake.calls == 10
        return outcome.cost.total_usd
    finally:
        await engine.close()


async def test_a_preview_of_an_edited_7th_call_lists_6_reused_and_4_new_and_writes_nothing(store_url: str) -> None:
    await _source(store_url)
    before = store_digest(store_url)
    fake = fake_model()
    engine = make_engine(store_url, fake)
    try:
        preview = await engine.fork("src", "fork-1", chain_workflow(changed=7), preview=True)
    finally:
        await engine.close()
    assert fake.calls == 0  # a preview sends nothing
    assert store_digest(store_url) == before
    assert [r.label for r in preview.reused] == [f"c{i}" for i in range(1, 7)]
    assert [c.label for c in preview.new_calls] == ["c7", "c8", "c9", "c10"]
    assert [(i.label, i.reason) for i in preview.invalidated] == [(f"c{i}", "prompt") for i in range(7, 11)]
    assert all(c.forecast.basis == "label" for c in preview.new_calls)
    assert preview.ceiling_usd == 1.0 and preview.fits is True


async def test_the_fork_sends_only_the_new_calls_and_bills_nothing_for_the_reused_ones(store_url: str) -> None:
    source_usd = await _source(store_url)
    engine = make_engine(store_url, fake_model())
    try:
        preview = await engine.fork("src", "fork-1", chain_workflow(changed=7), preview=True)
    finally:
        await engine.close()
    fake = fake_model()
    engine = make_engine(store_url, fake)
    try:
        outcome = await engine.fork("src", "fork-1", chain_workflow(changed=7))
        again = await engine.cost("fork-1")
        meta = await engine.run_meta("fork-1")
        source_after = await engine.cost("src")
    finally:
        await engine.close()
    assert outcome.status == "ok"
    sent = [r.messages[-1].text_content.split(":")[0] for r in fake.requests]
    assert sent == ["step 7 (edited)", "step 8", "step 9", "step 10"]
    assert outcome.replay.hits == 6 and outcome.replay.misses == 4
    assert outcome.cost.reused_calls == 6
    assert outcome.cost.reused_usd == pytest.approx(preview.reused_usd)
    assert outcome.cost.reused_usd + sum(i.usd for i in preview.invalidated) == pytest.approx(source_usd)
    assert outcome.cost.provider_calls == 4
    actual = outcome.cost.total_usd
    assert actual > 0
    assert abs(preview.forecast.expected_usd - actual) <= 0.15 * actual
    assert preview.forecast.min_usd <= preview.forecast.expected_usd <= preview.forecast.max_usd
    assert again == outcome.cost  # the cost report is a fold: the same read back from the store
    kept = {k: v for k, v in (meta.model_extra or {}).items() if k not in ("code_hash", "settled_cost")}
    assert meta.parent_run_id == "src" and kept == {"fork_at": None}  # (a forecast's figures besides)
    assert source_after.total_usd == pytest.approx(source_usd)  # the source is never written


async def test_a_fork_at_an_earlier_seq_reruns_from_there(store_url: str) -> None:
    await _source(store_url)
    engine = make_engine(store_url, fake_model())
    try:
        journal = await engine.inspect("src")
        third = next(e.seq for e in journal if e.kind == "agent" and e.ref is None and e.label == "c4")
        preview = await engine.fork("src", "fork-at", chain_workflow(), at=third, preview=True)
    finally:
        await engine.close()
    assert [r.label for r in preview.reused] == ["c1", "c2", "c3"]
    assert preview.invalidated == []  # nothing from seq `at` on was copied
    fake = fake_model()
    engine = make_engine(store_url, fake)
    try:
        outcome = await engine.fork("src", "fork-at", chain_workflow(), at=third)
        meta = await engine.run_meta("fork-at")
    finally:
        await engine.close()
    assert outcome.status == "ok" and fake.calls == 7 and outcome.replay.hits == 3
    assert {k: v for k, v in (meta.model_extra or {}).items() if k not in ("code_hash", "settled_cost")} == {
        "fork_at": third}


async def test_an_unchanged_fork_replays_everything_for_free(store_url: str) -> None:
    source_usd = await _source(store_url)
    fake = fake_model()
    engine = make_engine(store_url, fake)
    try:
        outcome = await engine.fork("src", "same", chain_workflow())
    finally:
        await engine.close()
    assert outcome.status == "ok" and fake.calls == 0
    assert outcome.cost.total_usd == 0 and outcome.cost.reused_usd == pytest.approx(source_usd)


async def test_a_forks_journal_is_hash_chained_from_its_own_genesis(store_url: str) -> None:
    from tether.audit.verify import verify_entries

    await _source(store_url)
    engine = make_engine(store_url, fake_model())
    try:
        await engine.fork("src", "chained", chain_workflow(changed=7))
        entries = await engine.inspect("chained")
    finally:
        await engine.close()
    verify_entries("chained", entries)  # raises on a broken or missing link
    assert all(e.prev for e in entries)
