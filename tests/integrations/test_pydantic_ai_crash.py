"""A pydantic-ai agent SIGKILLed mid-run in a real child process resumes without paying any completed call again."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

import tether

CHILD = Path(__file__).with_name("pydantic_ai_crash_child.py")


def child(url: str, run_id: str, mode: str, logdir: Path) -> subprocess.CompletedProcess[str]:
    logdir.mkdir(exist_ok=True)
    return subprocess.run([sys.executable, str(CHILD), url, run_id, mode, str(logdir)],
                          capture_output=True, text=True, timeout=120)


def outcome(done: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    assert done.returncode == 0, done.stderr
    return dict(json.loads(done.stdout.splitlines()[-1]))


def names(tools: list[str]) -> list[str]:
    return [t.split()[0] for t in tools]


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


@pytest.fixture(scope="module")
def clean(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The same workflow run without a crash: what every resumed run must match."""
    tmp = tmp_path_factory.mktemp("clean")
    return outcome(child(f"sqlite:///{tmp}/t.db", "clean", "normal", tmp / "logs"))


@pytest.mark.parametrize("point", ["in-find-city", "in-temperature", "in-request", "in-validator"])
def test_a_killed_pydantic_ai_run_resumes_and_pays_no_completed_request_twice(
    tmp_path: Path, clean: dict[str, Any], point: str
) -> None:
    url, logs = f"sqlite:///{tmp_path}/t.db", tmp_path / "logs"
    crashed = child(url, "wx", point, logs)
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr
    paid_before = [line for line in lines(logs / "requests.log") if line.startswith("done")]

    resumed = outcome(child(url, "wx", "resume", logs))
    assert resumed["status"] == "ok"
    requests = lines(logs / "requests.log")
    done = Counter(line for line in requests if line.startswith("done"))
    assert sorted(done) == ["done 0", "done 1", "done 2", "done 3"] and set(done.values()) == {1}  # none paid twice
    assert requests[: 2 * len(paid_before)] == [x for n in range(len(paid_before)) for x in (f"start {n}", f"done {n}")]
    assert resumed["spent"] == pytest.approx(clean["spent"])  # what completed calls cost: paid once
    assert resumed["calls"] == 4 + (point == "in-request")  # plus the one the kill cut off
    assert resumed["value"]["forecast"]["temp_c"] == 21.5 and resumed["value"]["requests"] == 4

    tools = lines(logs / "tools.log")
    if point == "in-request":
        # the in-flight request is asked again (it never completed) and charged at its worst case as an orphan
        assert Counter(requests)["start 3"] == 2
        assert 0 < resumed["orphaned"] < 0.1
        assert resumed["value"] == clean["value"]
        assert names(tools) == ["find_city", "find_city", "temperature"]  # all replayed, none run again
    elif point == "in-validator":
        # every request and tool result replays from the checkpoint: the resume makes no call and runs no tool
        assert len(paid_before) == 4 and len(requests) == 8
        assert names(tools) == ["find_city", "find_city", "temperature"]
        assert resumed["value"] == clean["value"] and resumed["orphaned"] == 0.0
    elif point == "in-temperature":
        # the interrupted idempotent tool runs again, with the same idempotency key
        assert names(tools) == ["find_city", "find_city", "temperature", "temperature"]
        assert tools[2] == tools[3]
        assert resumed["value"] == clean["value"] and resumed["orphaned"] == 0.0
        assert resumed["replay"]["orphaned"] == [tools[2].split()[2]]
    else:
        # a tool that is not idempotent is not run again: the model is told its effect is unknown
        assert names(tools) == ["find_city", "find_city", "temperature"]
        assert resumed["value"]["forecast"]["note"].split(" | ")[1].startswith("[effect unknown]")
        assert resumed["replay"]["orphaned"] == [tools[1].split()[2]]

    ledger = asyncio.run(_ledger(url, "wx"))
    by_tool = Counter((r.tool, r.outcome) for r in ledger)
    # the retried call is in the ledger as an `error` outcome; an interrupted call as an orphan (no outcome)
    if point == "in-find-city":
        assert by_tool == {("find_city", "error"): 1, ("find_city", None): 1, ("temperature", "ok"): 1}
    elif point == "in-temperature":
        assert by_tool == {("find_city", "error"): 1, ("find_city", "ok"): 1, ("temperature", None): 1,
                           ("temperature", "ok"): 1}
    else:
        assert by_tool == {("find_city", "error"): 1, ("find_city", "ok"): 1, ("temperature", "ok"): 1}

    again = outcome(child(url, "wx", "resume", logs))  # a settled run replays from its terminal
    assert again["value"] == resumed["value"] and again["replay"]["hits"] == 1
    assert lines(logs / "requests.log") == requests and lines(logs / "tools.log") == tools


async def _ledger(url: str, run_id: str) -> list[tether.ToolEffectRecord]:
    engine = tether.Engine(store=url)
    try:
        return await engine.effect_ledger(run_id)
    finally:
        await engine.close()


SUBAGENT_CHILD = Path(__file__).with_name("pydantic_ai_subagent_child.py")


def test_a_sub_agent_that_answered_before_the_kill_is_served_from_the_journal_when_its_tool_runs_again(
    tmp_path: Path,
) -> None:
    url, logs = f"sqlite:///{tmp_path}/t.db", tmp_path / "logs"
    logs.mkdir()

    def run(mode: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, str(SUBAGENT_CHILD), url, "plan", mode, str(logs)],
                              capture_output=True, text=True, timeout=120)

    crashed = run("crash")
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr
    assert lines(logs / "requests.log") == ["done planner", "done expert"]
    resumed = outcome(run("resume"))
    assert resumed["status"] == "ok" and resumed["value"] == "Plan: monorepo."
    # the planner's first request replays; its idempotent tool runs again and finds the expert's run journaled
    assert lines(logs / "requests.log") == ["done planner", "done expert", "done planner"]
    assert resumed["spent"] == pytest.approx(0.02 + 0.03 + 0.02)
    assert resumed["agents"] == [["planner", None, "ok", 2], ["expert", 1, "ok", 1]]
