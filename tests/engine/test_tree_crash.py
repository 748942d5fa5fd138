"""SIGKILL of an orchestrator after two of four spawns completed: resume adopts them, runs only the rest."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import tether

CHILD = Path(__file__).with_name("tree_crash_child.py")


def child(url: str, run_id: str, mode: str, log: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(CHILD), url, run_id, mode, str(log)], capture_output=True, text=True,
                          timeout=60)


async def test_resume_adopts_finished_children_and_spawns_only_the_rest(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/t.db"
    clean = child(url, "clean", "clean", tmp_path / "clean.log")
    assert clean.returncode == 0, clean.stderr
    expected = json.loads(clean.stdout.splitlines()[-1])["value"]

    log = tmp_path / "crash.log"
    crashed = child(url, "tree", "crash", log)
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr
    before = log.read_text().split()
    assert {"c0:0", "c1:0"} <= set(before)

    resumed = child(url, "tree", "resume", log)
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads(resumed.stdout.splitlines()[-1]) == {"status": "ok", "value": expected}
    after = log.read_text().split()[len(before):]
    assert "c0:0" not in after and "c1:0" not in after  # finished children are adopted, never asked again
    assert "orch:0" not in after  # the orchestrator's spawning turn is not repeated (its checkpoint holds it)
    assert sorted(a for a in after if a.startswith("c")) == ["c2:0", "c3:0"]

    engine = tether.Engine(store=url)
    events = await engine.agent_events("tree")
    assert len([e for e in events if e.kind == "spawn"]) == 4  # adopted children were not spawned again
    await engine.close()
