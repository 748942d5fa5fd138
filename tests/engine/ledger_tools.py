"""Tool functions the ledger crash test runs in a subprocess executor (importable by module:qualname)."""

from __future__ import annotations

import os
import signal
from pathlib import Path


def effect(path: str, idempotency_key: str = "") -> str:
    """Append one line per execution; the first execution kills the engine process (its parent)."""
    marker = Path(path + ".killed")
    with open(path, "a") as f:
        f.write(f"{idempotency_key}\n")
    if not marker.exists():
        marker.write_text("x")
        os.kill(os.getppid(), signal.SIGKILL)
    return "effect done"


def write_note(name: str, text: str, cwd: str = ".") -> str:
    """Write a file in the tool's working directory (the agent's worktree under isolation)."""
    (Path(cwd) / name).write_text(text)
    return f"wrote {name}"
