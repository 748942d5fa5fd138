"""Calls a crash cut off: charged at their worst case, shown apart, settled by an operator or covered by a
raised ceiling, with the decision journaled (issue: money a user can read and act on after a crash)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import tether
from crashkit import cli, crash_with_two_calls_in_flight, env_for
from crashkit import provider as local_provider
from tether.journal.cost import BUDGET_RAISED, ORPHANS_SETTLED, decision_name


@pytest.fixture
def provider() -> Iterator[str]:
    with local_provider() as url:
        yield url


@pytest.mark.parametrize("act", ["settle-orphans", "raise-budget", "both"])
def test_a_killed_run_with_two_cut_calls_finishes_after_the_operator_settles_or_raises(
    tmp_path: Path, provider: str, act: str,
) -> None:
    store = f"sqlite:///{tmp_path}/t.db"
    env = env_for(store, provider)
    crash_with_two_calls_in_flight("r", env)

    resumed = cli("resume", "r", "--app", "orphan_app:engine", "--json", env=env)
    doc = json.loads(resumed.stdout)
    assert resumed.returncode == 3 and doc["status"] == "exhausted", resumed.stdout + resumed.stderr
    cost = doc["cost"]
    # both cut calls charged at their worst case (4,096 tokens each, nobody set max_output_tokens), within the ceiling
    assert cost["orphaned_calls"] == 2 and cost["orphaned_usd"] == pytest.approx(0.164, abs=0.002)
    assert cost["total_usd"] <= 0.20 + 1e-9
    assert doc["error"]["code"] == "budget-exhausted" and "settle-orphans" in doc["error"]["message"]

    if act in ("settle-orphans", "both"):
        settled = cli("settle-orphans", "r", "--usd", "0.0008", "--reason", "provider usage export, 2 calls",
                      "--store", store, env=env)
        assert settled.returncode == 0, settled.stderr
        assert "settled 2 cut calls of r at 0.0008 USD (was 0.16" in " ".join(settled.stdout.split())
    if act == "settle-orphans":
        finished = cli("resume", "r", "--app", "orphan_app:engine", "--json", env=env)
    else:
        finished = cli("resume", "r", "--app", "orphan_app:engine", "--raise-budget", "0.50", "--reason",
                       "approved by finance", "--json", env=env)
    done = json.loads(finished.stdout)
    assert finished.returncode == 0 and done["status"] == "ok", finished.stdout + finished.stderr
    assert [v.split()[-1] for v in done["value"]] == ["done"] * 4

    async def decisions() -> list[dict[str, Any]]:
        engine = tether.Engine(store=store)
        try:
            return [e.value for e in await engine.inspect("r") if decision_name(e) in (ORPHANS_SETTLED, BUDGET_RAISED)]
        finally:
            await engine.close()

    journaled = {d["decision"]: d for d in asyncio.run(decisions())}
    assert set(journaled) == {"settle-orphans": {ORPHANS_SETTLED}, "raise-budget": {BUDGET_RAISED},
                              "both": {ORPHANS_SETTLED, BUDGET_RAISED}}[act]
    assert all(d["by"] and d["at"] for d in journaled.values())
    if ORPHANS_SETTLED in journaled:
        settled_by = journaled[ORPHANS_SETTLED]
        assert settled_by["usd"] == 0.0008 and settled_by["calls"] == 2
        assert settled_by["old_usd"] == pytest.approx(0.164, abs=0.002)
        assert settled_by["reason"] == "provider usage export, 2 calls"
        assert done["cost"]["orphaned_usd"] == pytest.approx(0.0008)
    else:
        assert done["cost"]["orphaned_usd"] == pytest.approx(0.164, abs=0.002)  # still charged at their worst
    if BUDGET_RAISED in journaled:
        raised = journaled[BUDGET_RAISED]
        assert (raised["old_usd"], raised["new_usd"], raised["reason"]) == (0.2, 0.5, "approved by finance")
        assert done["budget_usd"] == 0.5 and done["cost"]["ceiling_usd"] == 0.5
