"""Run `store_writer.py` in several processes at once and check the journal they share."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tether.contracts.protocols import JournalStore

WRITER = Path(__file__).with_name("store_writer.py")


def run_writers(url: str, run_id: str, tags: list[str], count: int, batch: int = 1) -> None:
    """Start one writer per tag, all appending `count` entries to `run_id`; wait for all of them."""
    procs = [
        subprocess.Popen([sys.executable, str(WRITER), url, run_id, tag, str(count), str(batch)])
        for tag in tags
    ]
    for p in procs:
        assert p.wait(timeout=60) == 0


async def assert_interleaved(store: JournalStore, run_id: str, tags: list[str], count: int) -> None:
    """Seqs are 1..N with no gap or duplicate, and each writer's entries keep their own order."""
    entries = await store.load(run_id)
    assert [e.seq for e in entries] == list(range(1, len(tags) * count + 1))
    for tag in tags:
        mine = [e.key for e in entries if e.key.startswith(f"{tag}-")]
        assert mine == [f"{tag}-{i}" for i in range(count)]
