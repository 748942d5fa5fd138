"""A toy foreign loop written only against the public seam (`toy_loop.py`) runs durably under a ceiling:
SIGKILLed mid-run in a real child process, it resumes without paying a completed turn again, and the
run's total stays under its USD ceiling."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from toy_loop_child import CEILING, build

import tether

CHILD = Path(__file__).with_name("toy_loop_child.py")
TURN_USD = 0.014  # 100 input and 10 output tokens at the child's price


def child(url: str, mode: str, logdir: Path) -> subprocess.CompletedProcess[str]:
    logdir.mkdir(exist_ok=True)
    return subprocess.run([sys.executable, str(CHILD), url, "toy", mode, str(logdir)],
                          capture_output=True, text=True, timeout=120)


def outcome(done: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    assert done.returncode == 0, done.stderr
    return dict(json.loads(done.stdout.splitlines()[-1]))


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


@pytest.mark.parametrize("point", ["in-tool", "in-request"])
def test_a_killed_foreign_loop_resumes_without_paying_a_completed_turn_again_and_under_its_ceiling(
    tmp_path: Path, point: str
) -> None:
    url, logs = f"sqlite:///{tmp_path}/t.db", tmp_path / "logs"
    crashed = child(url, point, logs)
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr
    paid_before = [line for line in lines(logs / "requests.log") if line.startswith("done")]
    assert paid_before == ["done 0", "done 1"]  # two turns paid before the kill

    resumed = outcome(child(url, "resume", logs))
    assert resumed["status"] == "ok" and resumed["value"] == {"answer": "It is 70F in Paris.", "turns": 3}
    done = Counter(line for line in lines(logs / "requests.log") if line.startswith("done"))
    assert done == {"done 0": 1, "done 1": 1, "done 2": 1}  # no completed turn is paid again
    assert resumed["spent"] == pytest.approx(3 * TURN_USD)
    assert resumed["total"] <= CEILING  # the ceiling holds, the orphan of a cut request included
    assert lines(logs / "tools.log") == ["lookup", "convert"]  # a recorded tool never runs again
    if point == "in-tool":
        # the tool that is not idempotent, cut off by the kill, is not run again: the model is told so
        assert lines(logs / "seen.log") == ["value unknown"]
        assert resumed["orphaned"] == 0.0 and resumed["calls"] == 3 and len(resumed["replay"]["orphaned"]) == 1
    else:
        # the request in flight is asked again, and charged at its worst case until it settles
        assert Counter(lines(logs / "requests.log"))["start 2"] == 2
        assert lines(logs / "seen.log") == ["value value"]
        assert resumed["orphaned"] > 0 and resumed["calls"] == 4

    requests, tools = lines(logs / "requests.log"), lines(logs / "tools.log")
    again = outcome(child(url, "resume", logs))  # a settled run replays from its terminal: nothing is sent
    assert again["value"] == resumed["value"] and again["replay"]["hits"] == 1
    assert lines(logs / "requests.log") == requests and lines(logs / "tools.log") == tools


async def test_a_foreign_loop_is_stopped_by_the_ceiling_before_the_turn_that_would_pass_it(tmp_path: Path) -> None:
    engine, toy = build("normal", tmp_path, f"sqlite:///{tmp_path}/t.db")
    out = await engine.run(toy, {"question": "How warm is Paris, in Fahrenheit?"}, run_id="tight", budget_usd=0.035)
    assert out.status == "exhausted"
    assert lines(tmp_path / "requests.log") == ["start 0", "done 0", "start 1", "done 1"]  # the third never left
    assert TURN_USD < out.cost.spent_usd <= 2 * TURN_USD  # the second turn's output clamped to what was left
    assert out.cost.total_usd <= 0.035
    assert isinstance(out.error, tether.BudgetExhaustedError)
    await engine.close()
