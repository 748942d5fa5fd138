"""Every example under examples/ runs to completion (docs are part of the feature)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = sorted((Path(__file__).parents[2] / "examples").glob("*.py"))


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_example_runs(path: Path) -> None:
    done = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip()


def test_cli_demo_kills_and_resumes(tmp_path: Path) -> None:
    exe = Path(sys.executable).with_name("tether")
    done = subprocess.run([str(exe), "demo", "--store", f"sqlite:///{tmp_path}/demo.db"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "child exited with -9" in done.stdout
    assert "outcome: ok" in done.stdout
