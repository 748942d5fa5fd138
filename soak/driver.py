"""Drives one soak run to its settle: child segments SIGKILLed at random moments, resumed, resolved.

After every segment the driver records which effect tags the store holds (what a resume may never pay
for again), so the checks can tell a re-sent journaled call from a re-sent in-flight one.
"""

from __future__ import annotations

import asyncio
import random
import signal
import time
from dataclasses import dataclass, field
from multiprocessing.context import ForkServerContext
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Any

import tether
from soak.child import Sabotage, SegmentOrder, run_segment
from soak.requestlog import TAG
from soak.scenarios import Scenario
from soak.stores import StoreTarget
from tether.contracts.entries import JournalEntry
from tether.journal.cost import fold_cost

MAX_SEGMENTS = 60
"""A run still unsettled after this many segments is reported as such."""
MAX_KILLS_PER_RUN = 20
"""After this many kills a run finishes unkilled: a run that does far more work than a clean one (a lost
ceiling, say) would otherwise be killed forever; its other checks still report why it did."""
SEGMENT_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class SegmentRecord:
    """One child process: how it ended, and the effect tags durable in the store once it had."""

    number: int
    exit_code: int | None
    killed: bool
    """Ended by the driver's SIGKILL."""
    seconds: float
    kill_at: float | None
    """The drawn kill moment (seconds after start); None for a clean run."""
    durable: frozenset[str]
    error: str | None = None
    """A child's traceback, or why the driver gave up on it."""
    reported_usd: float = 0.0
    """The run's `cost.total_usd` (orphans at their worst case included) once the segment had ended."""


@dataclass
class RunRecord:
    """Everything the driver saw of one run."""

    scenario: str
    run_id: str
    store: str
    segments: list[SegmentRecord] = field(default_factory=list)
    resolutions: int = 0
    settled: bool = False
    error: str | None = None

    @property
    def kills(self) -> int:
        return sum(1 for s in self.segments if s.killed)

    @property
    def resumes(self) -> int:
        return max(0, len(self.segments) - 1)

    @property
    def seconds(self) -> float:
        return sum(s.seconds for s in self.segments)


def settle_decisions(entries: list[JournalEntry]) -> list[dict[str, Any]]:
    """The values of the run's `settle` decisions, in journal order."""
    return [
        e.value for e in entries
        if e.kind == "decision" and isinstance(e.value, dict) and e.value.get("decision") == "settle"
    ]


class Driver:
    """Runs soak runs against one store; the parent's own engine reads journals and resolves suspensions."""

    def __init__(
        self, target: StoreTarget, workdir: Path, processes: ForkServerContext, rng: random.Random,
        sabotage: Sabotage | None = None,
    ) -> None:
        self.target = target
        self.sabotage = sabotage
        self.workdir = workdir
        self.log_path = workdir / "requests.jsonl"
        (workdir / "errors").mkdir(parents=True, exist_ok=True)
        self._processes = processes
        self._rng = rng
        self.engine = tether.Engine(store=target.open())

    async def close(self) -> None:
        await self.engine.close()

    async def drive(self, scenario: Scenario, run_id: str, kill_window_s: float | None) -> RunRecord:
        """Segments until the run settles; each is SIGKILLed after U(0, kill_window_s) unless it ends first."""
        record = RunRecord(scenario.name, run_id, str(self.target))
        while len(record.segments) < MAX_SEGMENTS:
            number = len(record.segments) + 1
            kill_at = None
            if kill_window_s and record.kills < MAX_KILLS_PER_RUN:
                kill_at = self._rng.uniform(0.0, kill_window_s)
            segment = await self._segment(scenario, run_id, number, kill_at)
            record.segments.append(segment)
            if segment.error is not None:
                record.error = segment.error
                return record
            if segment.killed:
                continue
            settles = settle_decisions(await self.engine.inspect(run_id))
            last = settles[-1] if settles else None
            if last is None:
                record.error = f"segment {number} exited 0 without a settle decision"
                return record
            if last.get("status") != "suspended":
                record.settled = True
                return record
            record.resolutions += await self._resolve(scenario, run_id, list(last.get("pending") or []))
        record.error = f"not settled after {MAX_SEGMENTS} segments"
        return record

    async def _segment(self, scenario: Scenario, run_id: str, number: int, kill_at: float | None) -> SegmentRecord:
        error_path = self.workdir / "errors" / f"{run_id}-{number}.txt"
        order = SegmentOrder(scenario=scenario.name, store=self.target, run_id=run_id, segment=number,
                             log_path=str(self.log_path), error_path=str(error_path), start=number == 1,
                             sabotage=self.sabotage)
        proc = self._processes.Process(target=run_segment, args=(order,), daemon=True)
        started = time.monotonic()
        proc.start()
        try:
            await asyncio.wait_for(_exited(proc), kill_at if kill_at is not None else SEGMENT_TIMEOUT_S)
        except TimeoutError:
            proc.kill()
            await _exited(proc)
        seconds = time.monotonic() - started
        killed = proc.exitcode == -signal.SIGKILL
        error = None
        if killed and kill_at is None:
            error = f"segment {number} hung for {SEGMENT_TIMEOUT_S:.0f} s and was killed"
        elif not killed and proc.exitcode != 0:
            error = error_path.read_text() if error_path.exists() else f"segment {number} exited {proc.exitcode}"
        return SegmentRecord(number, proc.exitcode, killed and kill_at is not None, seconds, kill_at,
                             await self.durable_tags(run_id), error, await self.reported_usd(run_id))

    async def reported_usd(self, run_id: str) -> float:
        """What the run reports it cost right now (0 for a run killed before anything was durable)."""
        store = await self.engine.store()
        return fold_cost(await store.load(run_id)).total_usd

    async def _resolve(self, scenario: Scenario, run_id: str, pending: list[str]) -> int:
        for key in pending:
            if key not in scenario.resolutions:
                raise KeyError(f"scenario {scenario.name!r} has no resolution for suspension {key!r}")
            await self.engine.resolve_external(run_id, key, scenario.resolutions[key])
        return len(pending)

    async def durable_tags(self, run_id: str) -> frozenset[str]:
        """Every effect tag in the run's journal and in its agents' checkpoints."""
        store = await self.engine.store()
        entries = await store.load(run_id)  # raw: a run killed before anything was durable has no journal yet
        texts = [e.model_dump_json() for e in entries]
        agents = {e.agent_id for e in entries if e.kind == "agent" and e.ref is None and e.agent_id is not None}
        transcripts = await asyncio.gather(*(self.engine.transcript(run_id, a) for a in sorted(agents)))
        texts += [t.model_dump_json() for t in transcripts if t.checkpointed]
        return frozenset(t for text in texts for t in TAG.findall(text))


async def _exited(proc: BaseProcess) -> None:
    """Wait, without blocking the loop, until `proc` has exited (and reap it)."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[None] = loop.create_future()

    def ready() -> None:
        if not done.done():
            done.set_result(None)

    loop.add_reader(proc.sentinel, ready)
    try:
        await done
    finally:
        loop.remove_reader(proc.sentinel)
    proc.join()
