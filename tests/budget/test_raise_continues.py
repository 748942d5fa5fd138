"""A raise continues the stopped agent across processes: a child runs an agent until its ceiling stops it (and is
SIGKILLed before the run settles, or settles `exhausted`), then `tether resume --raise-budget` in another process
goes on from the agent's checkpoint. The request log the fake provider writes shows no turn sent twice."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from raise_app import sent_turns

from crashkit import APP_DIR, cli


def env_for(tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "RAISE_STORE": f"sqlite:///{tmp_path}/t.db", "RAISE_LOG": str(tmp_path / "requests.log"),
            "PYTHONPATH": os.pathsep.join([str(APP_DIR), os.environ.get("PYTHONPATH", "")])}


def stop_at_the_ceiling(run_id: str, env: dict[str, str], *, kill: bool, mode: str = "exhausted") -> None:
    """Run the app in a child process until the ceiling stops its agent; with `kill`, SIGKILL it right after the
    stop is journaled (before the run settles)."""
    command = [sys.executable, str(APP_DIR / "raise_app.py"), run_id, mode]
    if not kill:
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stdout + done.stderr
        return
    marker = Path(env["RAISE_LOG"]).with_name("stopped")
    child = subprocess.Popen(command, env={**env, "RAISE_HANG": str(marker)}, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 60
    while not marker.exists():
        assert child.poll() is None, child.stdout.read().decode() if child.stdout else ""
        assert time.monotonic() < deadline, "the ceiling never stopped the agent"
        time.sleep(0.02)
    child.send_signal(signal.SIGKILL)
    child.wait(10)


@pytest.mark.parametrize("kill", [True, False], ids=["killed-before-the-settle", "settled-exhausted"])
def test_a_raise_in_another_process_continues_the_stopped_agent_without_sending_a_turn_twice(
    tmp_path: Path, kill: bool,
) -> None:
    env = env_for(tmp_path)
    stop_at_the_ceiling("r", env, kill=kill)
    assert sent_turns(env["RAISE_LOG"]) == [0, 1]

    raised = cli("resume", "r", "--app", "raise_app:engine", "--raise-budget", "1.0", "--reason", "approved",
                 "--json", env=env)
    doc = json.loads(raised.stdout)
    assert raised.returncode == 0 and doc["status"] == "ok" and doc["value"] == "done", raised.stdout + raised.stderr
    assert sent_turns(env["RAISE_LOG"]) == [0, 1, 2, 3]  # the provider saw no turn twice
    cost = doc["cost"]
    assert cost["provider_calls"] == 4 and cost["total_usd"] == pytest.approx(0.008)  # each paid turn once
    assert cost["ceiling_usd"] == 1.0 and cost["lost"] == [] and cost["orphaned_calls"] == 0

    again = cli("resume", "r", "--app", "raise_app:engine", "--json", env=env)
    assert again.returncode == 0 and json.loads(again.stdout)["status"] == "ok", again.stdout + again.stderr
    assert sent_turns(env["RAISE_LOG"]) == [0, 1, 2, 3]
    assert json.loads(again.stdout)["cost"]["total_usd"] == pytest.approx(0.008)
