"""Tool processes die with the engine: after an engine SIGKILL nothing of the tool keeps running."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

CHILD = Path(__file__).with_name("engine_death_child.py")
GONE_WITHIN_S = 5.0


def tool_processes(token: str) -> list[int]:
    """Live (non-zombie) processes whose environment carries the test's token."""
    needle = f"TETHER_TEST_MARK={token}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        if state not in ("Z", "X") and needle in environ.split(b"\0"):
            found.append(int(entry.name))
    return found


def grandchild_started(token: str) -> bool:
    for pid in tool_processes(token):
        with contextlib.suppress(OSError):
            if b"while True" in Path(f"/proc/{pid}/cmdline").read_bytes():
                return True
    return False


@pytest.mark.parametrize("executor", ["subprocess", "sandbox"])
def test_a_killed_engine_leaves_no_tool_process_behind(tmp_path: Path, executor: str) -> None:
    token = uuid.uuid4().hex
    engine = subprocess.Popen(
        [sys.executable, str(CHILD), f"sqlite:///{tmp_path}/t.db", executor, token],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 60
        while not grandchild_started(token):
            assert engine.poll() is None, engine.stderr.read().decode() if engine.stderr else ""
            assert time.monotonic() < deadline, "the tool never started its grandchild"
            time.sleep(0.05)
        running = tool_processes(token)
        assert len(running) >= 2  # the tool and its grandchild (and wrappers: bwrap, the watchdog)
        engine.send_signal(signal.SIGKILL)
        assert engine.wait(timeout=10) == -signal.SIGKILL
        gone_by = time.monotonic() + GONE_WITHIN_S
        while tool_processes(token) and time.monotonic() < gone_by:
            time.sleep(0.05)
        assert tool_processes(token) == [], f"tool processes outlived the engine: {tool_processes(token)}"
    finally:
        engine.kill()
        engine.wait()
        for pid in tool_processes(token):  # never leave a failed run's processes behind
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
