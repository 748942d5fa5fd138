"""Child process: an agent calls an in-process tool that SIGKILLs this engine mid-call.

Usage: python inprocess_crash_child.py STORE_URL RUN_ID (run|resume) EFFECT_LOG (idempotent|plain)
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

from ledger_crash_child import drive

import tether


def effect(path: str, idempotency_key: str = "") -> str:
    """Append one line per execution; the first execution kills the engine (this very process)."""
    with open(path, "a") as f:
        f.write(f"{idempotency_key}\n")
    marker = Path(path + ".killed")
    if not marker.exists():
        marker.write_text("x")
        os.kill(os.getpid(), signal.SIGKILL)
    return "effect done"


async def main(url: str, run_id: str, mode: str, log: str, kind: str) -> None:
    tool = tether.tool(idempotent=(kind == "idempotent"))(effect)  # in-process: the default executor
    await drive(url, run_id, mode, tool)


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:6]))
