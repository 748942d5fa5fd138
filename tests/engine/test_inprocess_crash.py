"""SIGKILL of the engine inside an in-process tool: the ledger holds the orphan, resume honours it."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import tether

CHILD = Path(__file__).with_name("inprocess_crash_child.py")


def child(url: str, mode: str, log: Path, kind: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(CHILD), url, "inproc-run", mode, str(log), kind],
                          capture_output=True, text=True, timeout=90)


@pytest.mark.parametrize("kind", ["plain", "idempotent"])
async def test_an_inprocess_tool_interrupted_by_a_crash_is_an_orphan_resume_honours(tmp_path: Path, kind: str) -> None:
    url = f"sqlite:///{tmp_path}/t.db"
    log = tmp_path / "effects.log"
    crashed = child(url, "run", log, kind)
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr
    assert len(log.read_text().splitlines()) == 1

    engine = tether.Engine(store=url)
    [orphan] = await engine.effect_ledger("inproc-run")
    assert (orphan.executor, orphan.tool, orphan.outcome) == ("inprocess", "effect", None)
    await engine.close()

    resumed = child(url, "resume", log, kind)
    assert resumed.returncode == 0, resumed.stderr
    out = json.loads(resumed.stdout.splitlines()[-1])
    assert out["status"] == "ok"
    lines = log.read_text().splitlines()
    if kind == "plain":
        assert len(lines) == 1, "a non-idempotent in-process tool ran again after the crash"
        assert out["value"].startswith("tool said: [effect unknown]")
        assert out["orphaned"] == [orphan.idempotency_key]
    else:
        assert len(lines) == 2 and lines[0] == lines[1] == orphan.idempotency_key  # same key on the re-run
        assert out["value"] == "tool said: effect done"
    engine = tether.Engine(store=url)
    rows = await engine.effect_ledger("inproc-run")
    assert rows[0].outcome is None  # the orphaned attempt stays visible
    if kind == "idempotent":
        assert [r.outcome for r in rows] == [None, "ok"] and rows[1].idempotency_key == orphan.idempotency_key
    else:
        assert len(rows) == 1
    await engine.close()
