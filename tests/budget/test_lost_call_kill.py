"""A paid call lost to a real SIGKILL is shown as such (issue 40, item 7), the same on every store.

The child process runs one agent's tool loop and dies (SIGKILL) after its second turn's `budget_draw` is durable
and before that turn's checkpoint is written. A resume in another process restarts the agent from its first
checkpoint and sends the second turn again: the first copy was paid and its reply lost with the process.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from lost_call_child import TURNS, cost_of

import tether
from tether.journal.cost import REDISPATCH, decision_name

CHILD = Path(__file__).with_name("lost_call_child.py")
LOST_TURN = 1
"""The second turn (counted from 0): drawn, then lost to the kill before its checkpoint."""


def child(url: str, run_id: str, mode: str, log: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(CHILD), url, run_id, mode, str(log)], capture_output=True, text=True,
                          timeout=120)


async def killed_and_resumed(url: str, tmp_path: Path, name: str) -> tuple[tether.CostReport, tether.CostReport]:
    """Crash the run with a real SIGKILL, resume it in another process; (the resume's report, the store's)."""
    log = tmp_path / f"{name}.log"
    crashed = child(url, "r", "crash", log)
    assert crashed.returncode == -signal.SIGKILL, crashed.stdout + crashed.stderr
    before = log.read_text().split("\n")[:-1]
    assert before == ["turn 0", "turn 1"]  # the lost turn reached the provider once before the kill

    engine = tether.Engine(store=url)
    try:
        entries = await engine.inspect("r")
        assert [e.value["step"] for e in entries if e.kind == "tree" and isinstance(e.value, dict)
                and e.value.get("kind") == "budget_draw"] == [1, 2]  # both turns drawn: paid
        assert not any(decision_name(e) == REDISPATCH for e in entries)
    finally:
        await engine.close()

    resumed = child(url, "r", "resume", log)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    done = json.loads(resumed.stdout.splitlines()[-1])
    assert done["status"] == "ok" and done["value"] == "done"
    after = log.read_text().split("\n")[len(before):-1]
    assert after == [f"turn {t}" for t in range(LOST_TURN, TURNS)]  # the lost turn was sent again, then the rest

    engine = tether.Engine(store=url)
    try:
        entries = await engine.inspect("r")
        restarts = [e.value for e in entries if decision_name(e) == REDISPATCH]
        assert restarts == [{"decision": REDISPATCH, "through": 1}]  # the checkpoint held the first dispatch
        stored = await engine.cost("r")
    finally:
        await engine.close()
    return tether.CostReport.model_validate(done["cost"]), stored


async def test_a_turn_paid_then_lost_to_a_sigkill_is_listed_as_lost_alike_on_every_store(
    tmp_path: Path, pg_dsn: str, pg_schema: str,
) -> None:
    stores = {"sqlite": f"sqlite:///{tmp_path}/t.db", "jsonl": f"jsonl://{tmp_path}/j",
              "postgresql": f"{pg_dsn}?schema={pg_schema}"}
    reports: dict[str, Any] = {}
    for name, url in stores.items():
        resumed, stored = await killed_and_resumed(url, tmp_path, name)
        assert resumed == stored, name  # the outcome and every later read fold the same report
        lost = cost_of(LOST_TURN)
        assert [(c.agent_id, c.calls, c.model, c.charged) for c in stored.lost] == [(1, [2], "fake:m", "recorded")]
        assert stored.lost[0].usd == pytest.approx(lost, abs=1e-9)
        assert stored.lost_recorded_usd == pytest.approx(lost, abs=1e-9)
        # every turn once, plus the paid-and-lost copy of the second
        assert stored.spent_usd == pytest.approx(sum(cost_of(t) for t in range(TURNS)) + lost, abs=1e-9)
        assert stored.orphaned_usd == 0 and stored.orphaned_calls == 0  # no dispatch was left unsettled
        assert stored.total_usd == stored.spent_usd
        assert stored.provider_calls == TURNS + 1
        reports[name] = stored.model_dump(mode="json")
    assert reports["jsonl"] == reports["sqlite"] and reports["postgresql"] == reports["sqlite"]
