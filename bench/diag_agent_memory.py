"""Diagnostic (not a figure): what each in-flight agent holds, by the innermost tether frame that allocated it.

Parks N one-turn agents inside the model call (all in flight at once), takes a tracemalloc snapshot
and prints bytes and blocks per agent, grouped by the innermost `src/tether` frame.

    python bench/diag_agent_memory.py 2000
"""

from __future__ import annotations

import asyncio
import functools
import gc
import sys
import tempfile
import tracemalloc
from typing import Any

import genai_prices.data  # noqa: F401  (a large module: imported before tracing starts)
from agent_loop import LatencyModel

import tether


class ParkedModel(LatencyModel):
    """Every call waits for `release` once `n` calls are in (`all_in`); calls after the release pass."""

    def __init__(self, n: int) -> None:
        super().__init__(0.0)
        self.n = n
        self.release = asyncio.Event()
        self.all_in = asyncio.Event()

    async def stream(self, request: Any, signal: Any = None) -> Any:
        from tether.contracts.stream import Finish, TextDelta
        from tether.contracts.usage import Usage

        self.calls += 1
        if self.calls == self.n:
            self.all_in.set()
        if not self.release.is_set():
            await self.release.wait()
        yield TextDelta(text="ok")
        yield Finish(reason="stop", usage=Usage(input_tokens=5, output_tokens=1))


async def _park(tmp: str, n: int) -> tracemalloc.Snapshot:
    model = ParkedModel(n)
    engine = tether.Engine(models=[model], routing={"loop": "lat:m"}, store=f"sqlite:///{tmp}/m.db",
                           concurrency=n, max_spawns=n)

    @tether.workflow(name="fan")
    async def fan(ctx: tether.Ctx, n: int) -> int:
        async def one(i: int) -> Any:
            return await ctx.agent(f"task {i}")

        return len(await ctx.parallel([functools.partial(one, i) for i in range(n)]))

    task = asyncio.ensure_future(engine.run(fan, {"n": n}, run_id="fan"))
    await model.all_in.wait()
    gc.collect()
    snap = tracemalloc.take_snapshot()
    model.release.set()
    assert (await task).status == "ok"
    await engine.close()
    return snap


def main(n: int) -> None:
    tracemalloc.start(12)
    base = tracemalloc.take_snapshot()
    with tempfile.TemporaryDirectory() as tmp:
        snap = asyncio.run(_park(tmp, n))
    stats = snap.compare_to(base, "traceback")
    by_frame: dict[str, list[int]] = {}
    for s in stats:
        frames = [f for f in s.traceback if "/src/tether/" in f.filename]
        key = f"{frames[-1].filename.split('/src/')[-1]}:{frames[-1].lineno}" if frames else "(outside tether)"
        row = by_frame.setdefault(key, [0, 0])
        row[0] += s.size_diff
        row[1] += s.count_diff
    total = sum(s.size_diff for s in stats)
    print(f"{total / n:.0f} B per agent in flight ({n} agents)")
    for key, (size, count) in sorted(by_frame.items(), key=lambda kv: -kv[1][0])[:40]:
        print(f"{size / n:8.0f} B {count / n:6.2f} blocks  {key}")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 2000)
