"""`tether.Context` end to end: a 300-turn conversation under an 8,000-token limit, on SQLite and PostgreSQL, with
a real SIGKILL right after a compaction (tests/engine/context_child.py)."""

from __future__ import annotations

import asyncio
import collections
import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tether.stores import open_store

CHILD = Path(__file__).with_name("context_child.py")
LIMIT = 8_000


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/t.db"
    return f"{request.getfixturevalue('pg_dsn')}?schema={request.getfixturevalue('pg_schema')}"


def child(url: str, run_id: str, mode: str, strategy: str, log: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(CHILD), url, run_id, mode, strategy, str(log)],
                          capture_output=True, text=True, timeout=300)


def finished(done: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    assert done.returncode == 0, done.stderr[-3000:]
    out = dict(json.loads(done.stdout.splitlines()[-1]))
    assert out["status"] == "ok" and out["value"] == "done after 299 lookups", out
    return out


def requests(log: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in log.read_text().splitlines()]


def compactions(url: str, run_id: str) -> list[dict[str, Any]]:
    async def load() -> list[dict[str, Any]]:
        store = open_store(url)
        try:
            entries = await store.load(run_id)
        finally:
            await store.close()
        return [e.value["payload"] for e in entries if e.kind == "decision" and isinstance(e.value, dict)
                and e.value.get("decision") == "context-compaction"]

    return asyncio.run(load())


@pytest.mark.parametrize("strategy", ["drop-oldest", "summarize"])
def test_every_request_of_a_300_turn_conversation_fits_the_limit_and_compactions_are_journaled_and_costed(
    store_url: str, strategy: str, tmp_path: Path
) -> None:
    log = tmp_path / "requests.log"
    out = finished(child(store_url, "long", "normal", strategy, log))
    sent = requests(log)
    turns = [r for r in sent if r["kind"] == "turn"]
    summaries = [r for r in sent if r["kind"] == "summary"]
    assert len(turns) == 300  # 299 lookups and the answer: nothing dropped a turn
    assert max(r["est"] for r in sent) <= LIMIT  # every request, summarize calls included
    assert all(r["paired"] for r in sent)  # no tool call parted from its result
    assert {r["first"] for r in turns} == {"Look up facts 1 to 299, one call each, t"}  # the first message stays
    decided = compactions(store_url, "long")
    assert len(decided) >= 10 and [d["n"] for d in decided] == list(range(1, len(decided) + 1))
    assert {d["strategy"] for d in decided} == {strategy}
    cost = out["cost"]
    if strategy == "summarize":
        assert len(summaries) == len(decided) == cost["compaction_calls"]
        assert all(d["summary"].startswith("Looked up facts") for d in decided)
        assert 0 < cost["compaction_usd"] < cost["total_usd"]
        assert cost["provider_calls"] == 300 + len(summaries)
    else:
        assert summaries == [] and all(d["summary"] is None for d in decided)
        assert (cost["compaction_calls"], cost["compaction_usd"], cost["provider_calls"]) == (0, 0.0, 300)


@pytest.mark.parametrize("strategy", ["summarize", "drop-oldest"])
def test_a_kill_right_after_a_compaction_resumes_without_paying_any_summary_again(
    store_url: str, strategy: str, tmp_path: Path
) -> None:
    clean_log, log = tmp_path / "clean.log", tmp_path / "crash.log"
    clean = finished(child(store_url, "clean", "normal", strategy, clean_log))

    killed = child(store_url, "crashy", "kill", strategy, log)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    before = requests(log)
    # killed right after the second compaction's decision
    assert sum(r["kind"] == "summary" for r in before) == (2 if strategy == "summarize" else 0)
    assert len(compactions(store_url, "crashy")) == 2

    resumed = finished(child(store_url, "crashy", "resume", strategy, log))
    sent = requests(log)
    summaries = [r["key"] for r in sent if r["kind"] == "summary"]
    assert len(summaries) == len(set(summaries))  # no summarize request was sent twice, across the kill
    decided = compactions(store_url, "crashy")
    paid = len(decided) if strategy == "summarize" else 0
    assert len(summaries) == paid == resumed["cost"]["compaction_calls"]
    assert [d["n"] for d in decided] == list(range(1, len(decided) + 1))  # the replayed one was not decided again
    assert [d["cut"] for d in decided] == [d["cut"] for d in compactions(store_url, "clean")]  # the same messages
    repeated = [k for k, n in collections.Counter(r["key"] for r in sent).items() if n > 1]
    assert repeated == []  # nor any turn: the kill came after the checkpoint of the turn before
    assert max(r["est"] for r in sent) <= LIMIT
    # what the crashed run paid is what the uninterrupted one paid: the replayed summary was read from the journal
    for figure in ("total_usd", "compaction_usd", "compaction_calls", "provider_calls", "orphaned_usd"):
        assert resumed["cost"][figure] == clean["cost"][figure], figure
