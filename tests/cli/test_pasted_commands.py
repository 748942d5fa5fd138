"""The commands a suspended run prints are the ones to paste: each names the store the run went to."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from clikit import AppDir


def _printed(stdout: str, label: str) -> str:
    (line,) = [ln for ln in stdout.splitlines() if ln.strip().startswith(label)]
    return line.split(label, 1)[1].strip()


def test_the_printed_resume_names_the_store_the_pending_line_names_and_pasting_both_finishes_the_run(
    appdir: AppDir,
) -> None:
    elsewhere = f"sqlite:///{appdir.path}/other runs/app.db"  # not the module engine's own store; a space to quote
    (appdir.path / "other runs").mkdir()
    result = appdir("run", "flows:approve", "--run-id", "s1", "--store", elsewhere)
    assert result.exit_code == 4, result.stdout
    pending, then = _printed(result.stdout, "pending"), _printed(result.stdout, "then")
    assert pending == f"tether resolve s1 approve VALUE --store {shlex.quote(elsewhere)}"
    assert then == f"tether resume s1 --workflow flows:approve --store {shlex.quote(elsewhere)}"
    assert appdir.run_line(pending.replace("VALUE", "yes")).exit_code == 0
    finished = appdir.run_line(then)
    assert finished.exit_code == 0 and "run s1: ok" in finished.stdout, finished.stdout + finished.stderr
    doc: Any = appdir.json("run", "flows:approve", "--run-id", "s2", "--store", elsewhere)
    assert doc["resume"] == f"tether resume s2 --workflow flows:approve --store {shlex.quote(elsewhere)}"


def test_an_app_engine_resume_line_names_the_store_too(appdir: AppDir) -> None:
    elsewhere = f"sqlite:///{appdir.path}/app2.db"
    doc: Any = appdir.json("run", "flows:approve", "--app", "flows:engine", "--run-id", "a1", "--store", elsewhere)
    assert doc["resume"] == f"tether resume a1 --workflow flows:approve --app flows:engine --store {elsewhere}"
    assert appdir.run_line(doc["resolve"][0].replace("VALUE", "yes")).exit_code == 0
    assert appdir.run_line(doc["resume"]).exit_code == 0


def test_pasting_the_printed_lines_into_a_shell_finishes_the_run(tmp_path: Path) -> None:
    tether = shutil.which("tether", path=str(Path(sys.executable).parent))
    if tether is None:
        pytest.skip("no installed `tether` script next to this interpreter")
    from clikit import FLOWS

    (tmp_path / "flows.py").write_text(FLOWS)
    env = {**os.environ, "PATH": f"{Path(tether).parent}{os.pathsep}{os.environ.get('PATH', '')}",
           "FLOWS_STORE": "memory://"}
    env.pop("TETHER_STORE", None)
    store = f"sqlite:///{tmp_path}/pasted runs.db"

    def shell(line: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["bash", "-c", line], cwd=tmp_path, env=env, capture_output=True, text=True,
                              timeout=120)

    started = shell(f"tether run flows:approve --run-id p1 --store {shlex.quote(store)}")
    assert started.returncode == 4, started.stdout + started.stderr
    resolved = shell(_printed(started.stdout, "pending").replace("VALUE", "yes"))
    assert resolved.returncode == 0, resolved.stderr
    finished = shell(_printed(started.stdout, "then"))
    assert finished.returncode == 0 and "run p1: ok" in finished.stdout, finished.stdout + finished.stderr
