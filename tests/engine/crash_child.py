"""Child process for the crash tests: runs a workflow and SIGKILLs itself at a named crash point.

Usage: python crash_child.py STORE_URL RUN_ID CRASH_POINT LOGFILE
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from typing import Any

import tether
from tether.contracts.entries import JournalEntry, Lease
from tether.stores import open_store


def die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


class CrashingStore:
    """Delegates to a real store and kills the process around one chosen append."""

    def __init__(self, inner: Any, point: str) -> None:
        self._inner = inner
        self._point = point

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def _matches(self, entry: JournalEntry, when: str) -> bool:
        p = self._point
        is_b = entry.kind == "step" and entry.label == "b"
        settle = entry.kind == "decision" and isinstance(entry.value, dict) and entry.value.get("decision") == "settle"
        return (
            (p == "before-running" and when == "before" and is_b and entry.status == "running")
            or (p == "after-running" and when == "after" and is_b and entry.status == "running")
            or (p == "after-body" and when == "before" and is_b and entry.status == "ok")
            or (p == "after-terminal" and when == "after" and is_b and entry.status == "ok")
            or (p == "after-settle" and when == "after" and settle)
        )

    async def append(self, run_id: str, entry: JournalEntry, lease: Lease | None = None) -> int:
        if self._matches(entry, "before"):
            die()
        seq = await self._inner.append(run_id, entry, lease)
        if self._matches(entry, "after"):
            die()
        return int(seq)


def build(log: str) -> tether.Workflow:
    def work(label: str) -> str:
        with open(log, "a") as f:
            f.write(label + "\n")
        return label.upper()

    @tether.workflow(name="crashy")
    async def crashy(ctx: tether.Ctx) -> dict[str, Any]:
        a = await ctx.step("a", lambda: work("a"))
        b = await ctx.step("b", lambda: work("b"))
        c = await ctx.step("c", lambda: work("c"))
        return {"steps": [a, b, c], "token": ctx.uuid()}

    return crashy


async def main(url: str, run_id: str, point: str, log: str) -> None:
    store = CrashingStore(open_store(url), point)
    engine = tether.Engine(store=store)  # type: ignore[arg-type]
    out = await engine.resume(run_id, build(log)) if point == "resume" else await engine.run(build(log), run_id=run_id)
    print(json.dumps({"status": out.status, "value": out.value, "replay": out.replay.model_dump()}))


if __name__ == "__main__":
    import warnings

    warnings.simplefilter("ignore")
    asyncio.run(main(*sys.argv[1:5]))
