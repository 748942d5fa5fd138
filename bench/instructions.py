"""Instructions per one-turn agent, counted by callgrind: a figure that does not move with the machine's load.

Wall-clock figures on a shared 2-core box swing by a quarter between runs, which hides a change of a few
percent; instructions do not (repeated counts agree within about 0.5%). Each count runs a fresh process
under `valgrind --tool=callgrind` with `FEW` and then `MANY` sequential one-turn agents in one run (the
same script, the same warm-up), and the difference over `MANY - FEW` is one agent's: start-up, imports
and the warm-up cancel out.

    python bench/instructions.py                  # memory and SQLite journals
    python bench/instructions.py --store sqlite   # one of them
    python bench/instructions.py --replay         # also a replayed step (a resume's cost per entry pair)
    python bench/instructions.py --peer           # also pydantic-ai's Agent.run on TestModel, the reference
    PYTHONPATH=/other/checkout/src python bench/instructions.py   # the same count for another checkout

Needs valgrind (Debian's package). Nothing here is a pass/fail test.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

FEW, MANY = 50, 250

SCRIPT = """
import asyncio, sys, tempfile, warnings
warnings.simplefilter("ignore")
import tether
from tether.testing import Reply

async def main(store: str, n: int) -> None:
    reply = Reply(text="ok", input_tokens=5, output_tokens=1)
    engine = tether.Engine(models=[tether.models.fake("fake", script=lambda r: reply)], routing={"loop": "fake:m"},
                           store=store)

    @tether.workflow(name="many")
    async def many(ctx: tether.Ctx, n: int) -> int:
        for i in range(n):
            await ctx.agent(f"task {i}")
        return n

    await engine.run(many, {"n": 20}, run_id="warm")
    out = await engine.run(many, {"n": n}, run_id="bench")
    assert out.status == "ok"
    await engine.close()

kind, n = sys.argv[1], int(sys.argv[2])
with tempfile.TemporaryDirectory() as tmp:
    asyncio.run(main("memory://" if kind == "memory" else f"sqlite:///{tmp}/bench.db", n))
"""


PEER_SCRIPT = """
import asyncio, sys, warnings
warnings.simplefilter("ignore")
from pydantic_ai import Agent
from pydantic_ai.models.test import TestModel

async def main(n: int) -> None:
    agent = Agent(TestModel(custom_output_text="ok"))
    for i in range(20):
        await agent.run(f"warm {i}")
    for i in range(n):
        await agent.run(f"task {i}")

asyncio.run(main(int(sys.argv[1])))
"""


REPLAY_SCRIPT = """
import asyncio, sys, warnings
warnings.simplefilter("ignore")
import tether

@tether.workflow(name="steps")
async def steps(ctx: tether.Ctx, n: int) -> int:
    for i in range(n):
        await ctx.step(f"s{i}", lambda: i)
    return n

async def main(phase: str, url: str, n: int) -> None:
    engine = tether.Engine(store=url)
    if phase == "write":
        assert (await engine.run(steps, {"n": n}, run_id="bench")).status == "ok"
    else:
        out = await engine.resume("bench", steps)
        assert out.status == "ok" and out.replay.hits == n, out
    await engine.close()

asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3])))
"""
REPLAY_FEW, REPLAY_MANY = 500, 2500


def _callgrind(script: str, *argv: str) -> int:
    """Instructions of one process running `script` with `argv`, counted by callgrind."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "callgrind.out"
        subprocess.run(
            ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", sys.executable, "-c", script, *argv],
            check=True, capture_output=True, env={**os.environ, "PYTHONHASHSEED": "0"},
        )
        summary = re.search(rb"^summary:\s+(\d+)", out.read_bytes(), re.MULTILINE)
        assert summary is not None, "callgrind wrote no summary"
        return int(summary.group(1))


def count(kind: str, n: int) -> int:
    """Instructions of one process running `n` one-turn agents on the `kind` journal."""
    return _callgrind(SCRIPT, kind, str(n))


def per_agent(kind: str) -> float:
    return (count(kind, MANY) - count(kind, FEW)) / (MANY - FEW)


def per_peer_run() -> float:
    """Instructions of one pydantic-ai `Agent.run` on `TestModel` (journals nothing): the one-turn agent's reference."""
    return (_callgrind(PEER_SCRIPT, str(MANY)) - _callgrind(PEER_SCRIPT, str(FEW))) / (MANY - FEW)


def replay_count(n: int) -> int:
    """Instructions of one process resuming an `n`-step SQLite run (written beforehand, not counted)."""
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{tmp}/replay.db"
        subprocess.run([sys.executable, "-c", REPLAY_SCRIPT, "write", url, str(n)], check=True,
                       env={**os.environ, "PYTHONHASHSEED": "0"})
        return _callgrind(REPLAY_SCRIPT, "resume", url, str(n))


def per_replayed_step() -> float:
    return (replay_count(REPLAY_MANY) - replay_count(REPLAY_FEW)) / (REPLAY_MANY - REPLAY_FEW)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--store", choices=("memory", "sqlite"), action="append")
    parser.add_argument("--replay", action="store_true", help="also count a replayed step (a resume on SQLite)")
    parser.add_argument("--peer", action="store_true", help="also count pydantic-ai's Agent.run on TestModel")
    args = parser.parse_args()
    import tether

    print(f"tether from {Path(tether.__file__).parent}")
    for kind in args.store or ("memory", "sqlite"):
        print(f"instructions per one-turn agent, {kind} journal: {per_agent(kind) / 1000:,.0f}k")
    if args.peer:
        print(f"instructions per pydantic-ai Agent.run on TestModel (the reference): {per_peer_run() / 1000:,.0f}k")
    if args.replay:
        per_step = per_replayed_step() / 1000
        print(f"instructions per replayed step (resume on SQLite: load, match, replay): {per_step:,.1f}k")
    return 0


if __name__ == "__main__":
    sys.exit(main())
