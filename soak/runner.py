"""One soak per store: a clean run of each scenario, then killed runs until the kill target is met."""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import multiprocessing
import random
import statistics
import time
from dataclasses import dataclass, field
from multiprocessing.context import ForkServerContext
from pathlib import Path
from typing import Any

from soak.checks import Baseline, Verdict, check_run
from soak.child import Sabotage
from soak.driver import Driver, RunRecord, settle_decisions
from soak.requestlog import LogReader
from soak.scenarios import Scenario
from soak.stores import StoreKind, StoreTarget

# What the fork server imports once, so a child starts in milliseconds instead of re-importing tether.
PRELOAD = ("soak.child", "tether.stores.sqlite", "tether.stores.jsonl", "tether.stores.postgres", "psycopg",
           "psycopg_pool")


CLEAN_RUNS = 3
"""Clean runs per scenario and store: the value every killed run must reproduce, and the kill window."""


def process_context() -> ForkServerContext:
    """Children come from a fork server (single-threaded, tether already imported), started here.

    Starting it up front keeps its boot out of the first clean run's duration, which sets the kill window.
    """
    processes = multiprocessing.get_context("forkserver")
    processes.set_forkserver_preload(list(PRELOAD))
    warm = processes.Process(target=time.sleep, args=(0,))
    warm.start()
    warm.join()
    return processes


@dataclass
class StoreResult:
    """Every checked run of one store's soak."""

    store: str
    workdir: Path
    verdicts: list[Verdict] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def kills(self) -> int:
        return sum(v.kills for v in self.verdicts)


async def soak_store(
    kind: StoreKind,
    scenarios: list[Scenario],
    *,
    kills: int,
    jobs: int,
    rng: random.Random,
    workdir: Path,
    processes: ForkServerContext,
    pg_dsn: str,
    keep: bool = False,
    sabotage: Sabotage | None = None,
) -> StoreResult:
    """Clean runs first (the values and durations to compare with), then `jobs` killed runs at a time."""
    started = time.monotonic()
    target = StoreTarget.fresh(kind, workdir, pg_dsn)
    driver = Driver(target, workdir, processes, rng, sabotage)
    log = LogReader(driver.log_path)
    result = StoreResult(kind, workdir)
    opened = False
    try:
        await driver.engine.runs(limit=1)  # a store that cannot be opened fails here, with its own message
        opened = True
        baselines: dict[str, Baseline] = {}
        for scenario in scenarios:
            records = [await driver.drive(scenario, f"{scenario.name}-clean-{i}", None) for i in range(CLEAN_RUNS)]
            first = await _baseline(driver, records[0])
            # The median duration: one clean run slowed by a busy machine would stretch every kill window.
            baselines[scenario.name] = dataclasses.replace(first, seconds=statistics.median(r.seconds for r in records))
            for record in records:
                result.verdicts.append(await _check(driver, log, scenario, record, first))
        numbers = itertools.count()

        async def worker() -> None:
            while result.kills < kills:
                n = next(numbers)
                scenario = scenarios[n % len(scenarios)]
                base = baselines[scenario.name]
                record = await driver.drive(scenario, f"{scenario.name}-{n:04d}", base.seconds)
                result.verdicts.append(await _check(driver, log, scenario, record, base))

        await asyncio.gather(*(worker() for _ in range(jobs)))
    finally:
        await driver.close()
        if opened and not keep:
            target.dispose()
    result.seconds = time.monotonic() - started
    return result


async def _baseline(driver: Driver, record: RunRecord) -> Baseline:
    settles = settle_decisions(await driver.engine.inspect(record.run_id))
    last: dict[str, Any] = next((s for s in reversed(settles) if s.get("status") != "suspended"), {})
    return Baseline(last.get("status"), last.get("value"), record.seconds)


async def _check(driver: Driver, log: LogReader, scenario: Scenario, record: RunRecord, base: Baseline) -> Verdict:
    engine = driver.engine
    entries = await engine.inspect(record.run_id)
    meta = await (await engine.store()).get_meta(record.run_id)
    cost = await engine.cost(record.run_id)
    # settled spend: the orphan estimates (worst cases of calls a kill cut off) are checked as billed spend (d)
    return check_run(record, scenario, log.take(record.run_id), entries, cost.total_usd - cost.orphaned_usd,
                     meta.budget_usd if meta is not None else None, base)
