"""A SIGKILL in the middle of a five-turn tool loop re-pays at most one turn on resume."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

CHILD = Path(__file__).with_name("agent_crash_child.py")


def child(url: str, run_id: str, mode: str, log: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(CHILD), url, run_id, mode, str(log)], capture_output=True, text=True, timeout=60
    )


def test_crash_mid_tool_loop_restores_the_checkpoint_and_repeats_at_most_one_turn(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/t.db"
    clean_log = tmp_path / "clean.log"
    clean = child(url, "clean", "normal", clean_log)
    assert clean.returncode == 0, clean.stderr
    expected = json.loads(clean.stdout.splitlines()[-1])

    log = tmp_path / "crash.log"
    crashed = child(url, "crashy", "crash", log)
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr
    turns_before = log.read_text().split()
    assert turns_before == ["turn1", "turn2", "turn3"]

    resumed = child(url, "crashy", "resume", log)
    assert resumed.returncode == 0, resumed.stderr
    outcome = json.loads(resumed.stdout.splitlines()[-1])
    assert outcome["status"] == "ok" and outcome["value"] == expected["value"]
    # the checkpointed spend of the turns before the crash is carried into the terminal: nothing is lost,
    # and at most the one repeated turn is paid twice
    one_turn = expected["cost"] / 6
    assert expected["cost"] - 1e-12 <= outcome["cost"] <= expected["cost"] + one_turn + 1e-12
    turns = log.read_text().split()
    assert len(turns) - 6 <= 1, turns  # six model turns in an uninterrupted run
    # the checkpoint of turn 3 (or of turn 2) is restored: at most turn 3 is asked again
    assert turns[3:] in (["turn4", "turn5", "turn6"], ["turn3", "turn4", "turn5", "turn6"])
