"""Diagnostic (not a figure): the objects the cycle collector tracks per agent in flight, by type.

Parks N one-turn agents inside the model call (all in flight at once, as `diag_agent_memory.py` does), runs
`gc.collect()`, and prints `gc.get_objects()` counted by type, less the count before the run started, per agent.
`--waiting` also counts a run whose `ctx.parallel` has N branches but lets only N/10 run at once.

    python bench/diag_agent_objects.py 2000
"""

from __future__ import annotations

import asyncio
import functools
import gc
import sys
import tempfile
from collections import Counter
from typing import Any

from diag_agent_memory import ParkedModel

import tether


def census() -> Counter[str]:
    return Counter(type(o).__qualname__ for o in gc.get_objects())


async def _park(tmp: str, n: int, bound: int | None) -> tuple[Counter[str], Counter[str]]:
    running = bound or n
    model = ParkedModel(running)
    engine = tether.Engine(models=[model], routing={"loop": "lat:m"}, store=f"sqlite:///{tmp}/m.db",
                           concurrency=running, max_spawns=n)

    @tether.workflow(name="fan")
    async def fan(ctx: tether.Ctx, n: int) -> int:
        async def one(i: int) -> Any:
            return await ctx.agent(f"task {i}")

        thunks = [functools.partial(one, i) for i in range(n)]
        kw: dict[str, Any] = {} if bound is None else {"concurrency": bound}
        return len(await ctx.parallel(thunks, **kw))

    model.release.set()
    await engine.run(fan, {"n": 10}, run_id="warm")  # imports, adapters, caches: made once
    model.calls = 0
    model.release.clear()
    gc.collect()
    before = census()
    task = asyncio.ensure_future(engine.run(fan, {"n": n}, run_id="fan"))
    await model.all_in.wait()
    gc.collect()
    during = census()
    model.release.set()
    assert (await task).status == "ok"
    await engine.close()
    return before, during


def main(n: int, bound: int | None = None) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        before, during = asyncio.run(_park(tmp, n, bound))
    per = bound or n
    made = {k: v - before.get(k, 0) for k, v in during.items()}
    total = sum(made.values())
    print(f"{total / per:.1f} gc-tracked objects per agent in flight ({n} branches, {per} in flight)")
    for k, v in sorted(made.items(), key=lambda kv: -kv[1]):
        if abs(v) / per >= 0.05:
            print(f"{v / per:7.2f}  {k}")


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    count = int(args[0]) if args else 2000
    main(count, count // 10 if "--waiting" in sys.argv else None)
