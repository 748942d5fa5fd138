"""Crash tests: a real child process is SIGKILLed at each crash point, then resumed in a new one."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import tether

CHILD = Path(__file__).with_name("crash_child.py")

# crash point -> how many times step "b" runs in total (crash + resume)
EXPECTED_B_RUNS = {
    "before-running": 1,
    "after-running": 1,  # running entry written, body never ran: redispatched once
    "after-body": 2,  # body ran, its terminal was lost: the one stated re-execution
    "after-terminal": 1,
    "after-settle": 1,
}


def run_child(url: str, run_id: str, point: str, log: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(CHILD), url, run_id, point, str(log)],
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize("point", list(EXPECTED_B_RUNS))
@pytest.mark.parametrize("kind", ["sqlite", "jsonl"])
async def test_sigkill_at_each_crash_point_resumes_to_the_same_value(tmp_path: Path, kind: str, point: str) -> None:
    url = f"sqlite:///{tmp_path}/t.db" if kind == "sqlite" else f"jsonl://{tmp_path}/j"
    log = tmp_path / "executions.log"
    crashed = run_child(url, "crash-run", point, log)
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr
    resumed = run_child(url, "crash-run", "resume", log)
    assert resumed.returncode == 0, resumed.stderr
    outcome = json.loads(resumed.stdout.strip().splitlines()[-1])
    assert outcome["status"] == "ok"
    assert outcome["value"]["steps"] == ["A", "B", "C"]

    runs = log.read_text().split()
    assert runs.count("a") == 1 and runs.count("c") == 1
    assert runs.count("b") == EXPECTED_B_RUNS[point]

    engine = tether.Engine(store=url)
    entries = await engine.inspect("crash-run")
    settles = [e for e in entries if e.kind == "decision" and (e.value or {}).get("decision") == "settle"]
    assert [s.value["status"] for s in settles] == ["ok"]
    # the same value again, now as a pure replay in this process
    again = await engine.resume("crash-run", _load_flow(log))
    assert again.value == outcome["value"] and again.replay.misses == 0
    await engine.close()


def _load_flow(log: Path) -> tether.Workflow:
    import importlib.util

    spec = importlib.util.spec_from_file_location("crash_child", CHILD)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.build(str(log))  # type: ignore[no-any-return]
