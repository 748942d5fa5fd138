"""SIGKILL of the engine while a subprocess tool runs: orphans are itemized and never blindly re-run."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import tether

CHILD = Path(__file__).with_name("ledger_crash_child.py")


def child(url: str, mode: str, log: Path, kind: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(CHILD), url, "ledger-run", mode, str(log), kind],
                          capture_output=True, text=True, timeout=90)


def wait_for_lines(log: Path, n: int) -> list[str]:
    for _ in range(100):  # the orphaned tool process may still be finishing its write
        lines = log.read_text().splitlines() if log.exists() else []
        if len(lines) >= n:
            return lines
        time.sleep(0.05)
    return log.read_text().splitlines() if log.exists() else []


@pytest.mark.parametrize("kind", ["plain", "idempotent"])
async def test_engine_killed_mid_tool_leaves_an_orphan_that_resume_handles(tmp_path: Path, kind: str) -> None:
    url = f"sqlite:///{tmp_path}/t.db"
    log = tmp_path / "effects.log"
    crashed = child(url, "run", log, kind)
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr
    assert len(wait_for_lines(log, 1)) == 1

    engine = tether.Engine(store=url)
    ledger = await engine.effect_ledger("ledger-run")
    assert len(ledger) == 1 and ledger[0].outcome is None and ledger[0].duration_ms is None
    await engine.close()

    resumed = child(url, "resume", log, kind)
    assert resumed.returncode == 0, resumed.stderr
    out = json.loads(resumed.stdout.splitlines()[-1])
    assert out["status"] == "ok"
    lines = wait_for_lines(log, 2 if kind == "idempotent" else 1)
    if kind == "plain":
        assert len(lines) == 1  # not run again
        assert out["value"].startswith("tool said: [effect unknown]")
        assert out["orphaned"] == [lines[0]]
    else:
        assert len(lines) == 2 and lines[0] == lines[1] != ""  # re-run with the same idempotency key
        assert out["value"] == "tool said: effect done"
    engine = tether.Engine(store=url)
    rows = await engine.effect_ledger("ledger-run")
    assert rows[0].outcome is None  # the orphaned attempt stays visible
    if kind == "idempotent":
        assert rows[-1].outcome == "ok" and rows[-1].idempotency_key == rows[0].idempotency_key
    await engine.close()
