"""`tether run --on-exhausted suspend`: the run parks on a budget suspension (exit 4, `tether runs` lists it
suspended, the printout says how to raise), and resolving it by a raise lets `tether resume` continue the
stopped agent from its checkpoint: the request log shows no turn sent twice."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from crashkit import APP_DIR, cli

sys.path.insert(0, str(APP_DIR))
from raise_app import sent_turns  # the app lives beside the budget tests


def env_for(tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "RAISE_STORE": f"sqlite:///{tmp_path}/t.db", "RAISE_LOG": str(tmp_path / "requests.log"),
            "PYTHONPATH": os.pathsep.join([str(APP_DIR), os.environ.get("PYTHONPATH", "")])}


@pytest.mark.parametrize("how", ["resolve", "resume --raise-budget"])
def test_on_exhausted_suspend_parks_the_run_and_a_raise_from_the_cli_continues_it(tmp_path: Path, how: str) -> None:
    env = env_for(tmp_path)
    store = env["RAISE_STORE"]
    parked = cli("run", "raise_app:stopping", "--budget", "0.005", "--on-exhausted", "suspend", "--run-id", "s",
                 env=env)
    assert parked.returncode == 4, parked.stdout + parked.stderr
    printed = " ".join(parked.stdout.split())
    assert "run s: suspended" in printed and "tether resolve s budget:1 0.01" in printed
    assert sent_turns(env["RAISE_LOG"]) == [0, 1]
    listed = json.loads(cli("runs", "--json", "--store", store, env=env).stdout)
    assert [(r["run_id"], r["status"]) for r in listed] == [("s", "suspended")]

    refused = cli("resolve", "s", "budget:1", "0.004", "--store", store, env=env)
    assert refused.returncode != 0 and "new ceiling in USD" in " ".join(refused.stdout.split() + refused.stderr.split())
    if how == "resolve":
        resolved = cli("resolve", "s", "budget:1", "1.0", "--store", store, env=env)
        assert resolved.returncode == 0 and "resolved" in resolved.stdout, resolved.stdout + resolved.stderr
        done = cli("resume", "s", "--app", "raise_app:engine", "--json", env=env)
    else:
        done = cli("resume", "s", "--app", "raise_app:engine", "--raise-budget", "1.0", "--json", env=env)
    doc = json.loads(done.stdout)
    assert done.returncode == 0 and doc["status"] == "ok" and doc["pending"] == [], done.stdout + done.stderr
    assert sent_turns(env["RAISE_LOG"]) == [0, 1, 2, 3]
    assert doc["cost"]["provider_calls"] == 4 and doc["cost"]["ceiling_usd"] == 1.0


def test_on_exhausted_takes_exhausted_or_suspend(tmp_path: Path) -> None:
    bad = cli("run", "raise_app:stopping", "--budget", "0.005", "--on-exhausted", "park", env=env_for(tmp_path))
    assert bad.returncode == 2 and "--on-exhausted must be one of exhausted, suspend" in bad.stdout + bad.stderr
