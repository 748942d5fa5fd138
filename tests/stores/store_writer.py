"""A child process appending entries to one run of the store a URL names (multi-process tests)."""

from __future__ import annotations

import asyncio
import sys

from tether.contracts.entries import JournalEntry
from tether.stores import open_store


async def main(url: str, run_id: str, tag: str, count: int, batch: int) -> None:
    store = open_store(url)
    for i in range(0, count, batch):
        entries = [
            JournalEntry(kind="step", status="ok", key=f"{tag}-{j}")
            for j in range(i, min(i + batch, count))
        ]
        await store.append_many(run_id, entries)
    await store.close()


if __name__ == "__main__":
    url, run_id, tag, count, batch = sys.argv[1:6]
    asyncio.run(main(url, run_id, tag, int(count), int(batch)))
