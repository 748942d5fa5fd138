"""A SIGKILL right after a tool-budget decision: the resume reads it back, never re-decides or re-announces."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tether.stores import open_store

CHILD = Path(__file__).with_name("tool_budget_crash_child.py")


def child(url: str, run_id: str, mode: str, log: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(CHILD), url, run_id, mode, str(log)], capture_output=True, text=True, timeout=60
    )


def decisions(url: str, run_id: str) -> dict[str, int]:
    async def load() -> dict[str, int]:
        store = open_store(url)
        try:
            entries = await store.load(run_id)
        finally:
            await store.close()
        counts: dict[str, int] = {}
        for e in entries:
            # dispatch records are spend facts written per provider attempt, not policy decisions
            if e.kind == "decision" and isinstance(e.value, dict) and e.value.get("decision") != "dispatch":
                name = str(e.value.get("decision"))
                counts[name] = counts.get(name, 0) + 1
        return counts

    return asyncio.run(load())


def last_json(done: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    assert done.returncode == 0, done.stderr
    return dict(json.loads(done.stdout.splitlines()[-1]))


@pytest.mark.parametrize(
    ("point", "ran_before_kill"),
    [
        # the grant is decided at probe3's gate, before probe3 runs
        ("tool-grant", ["probe1", "record2"]),
        # the window opens at turn 1's batch boundary, after probe1 ran
        ("finalization-window", ["probe1"]),
    ],
)
def test_a_kill_right_after_a_budget_decision_resumes_without_redeciding_or_reannouncing(
    tmp_path: Path, point: str, ran_before_kill: list[str]
) -> None:
    url = f"sqlite:///{tmp_path}/t.db"
    clean_log = tmp_path / "clean.log"
    clean = last_json(child(url, "clean", "normal", clean_log))
    assert clean["status"] == "ok" and clean["value"] == "done after 3 batches"
    assert clean["summary"] == {"used": 3, "cap": 4, "extensions_granted": 1, "notices_fired": [0.5],
                                "finalization_window_entered": True}
    assert (clean["grant_messages"], clean["window_messages"], clean["notice_messages"]) == (1, 1, 1)
    assert decisions(url, "clean") == {"genesis": 1, "tool-grant": 1, "finalization-window": 1, "settle": 1}

    log = tmp_path / "crash.log"
    crashed = child(url, "crashy", point, log)
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr
    assert log.read_text().split() == ran_before_kill
    assert decisions(url, "crashy").get(point) == 1

    resumed = last_json(child(url, "crashy", "resume", log))
    assert resumed["status"] == "ok" and resumed["value"] == clean["value"]
    assert resumed["summary"] == clean["summary"]  # the same summary as the uninterrupted run
    # neither re-granted nor re-announced: one decision each, one message each in the conversation
    assert decisions(url, "crashy") == decisions(url, "clean")
    assert (resumed["grant_messages"], resumed["window_messages"], resumed["notice_messages"]) == (1, 1, 1)
    # no tool ran twice: the resumed agent continued from the checkpoint taken before the decision
    assert log.read_text().split() == clean_log.read_text().split() == ["probe1", "record2", "probe3"]
