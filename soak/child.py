"""One segment of a soak run, in a child process: start the run (first segment) or resume it.

The driver forks these from a fork server that has already imported this module (and so tether and
the store drivers), which keeps a child's start-up to a few milliseconds. The child reports nothing: the
driver reads the outcome from the journal, the way any other process would after a crash.
"""

from __future__ import annotations

import asyncio
import os
import traceback
from dataclasses import dataclass
from typing import Any, Literal, cast

import tether
from soak.requestlog import RequestLog
from soak.scenarios import scenario_named
from soak.stores import StoreTarget
from tether.contracts.protocols import JournalStore

CHILD_ERROR_EXIT = 3

Sabotage = Literal["forget-checkpoints"]
"""Faults the soak can inject into its own children, to show that its checks catch them."""


@dataclass(frozen=True)
class SegmentOrder:
    """What the driver hands one child."""

    scenario: str
    store: StoreTarget
    run_id: str
    segment: int
    log_path: str
    error_path: str
    start: bool
    """True: `engine.run(...)` with the scenario's options; False: `engine.resume(run_id, ...)`."""
    sabotage: Sabotage | None = None


def run_segment(order: SegmentOrder) -> None:
    """The child's entry point; an exception is written to `order.error_path` and exits non-zero."""
    try:
        asyncio.run(_segment(order))
    except BaseException:
        with open(order.error_path, "w") as f:
            f.write(traceback.format_exc())
        os._exit(CHILD_ERROR_EXIT)


async def _segment(order: SegmentOrder) -> None:
    scenario = scenario_named(order.scenario)
    log = RequestLog(order.log_path, run=order.run_id, segment=order.segment)
    store = order.store.open()
    if order.sabotage == "forget-checkpoints":
        store = cast(JournalStore, ForgetfulStore(store))  # it delegates every other method
    engine = scenario.engine(store, log)
    workflow = scenario.build(log)
    args = dict(scenario.args)
    try:
        if order.start:
            await engine.run(workflow, args, run_id=order.run_id, budget_usd=scenario.budget_usd,
                             overshoot=scenario.overshoot)
            return
        try:
            await engine.resume(order.run_id, workflow, args)
        except tether.TetherError as exc:
            # The run never became durable (killed before its options were written): start it, as a user would.
            if type(exc).__name__ != "RunNotFoundError":
                raise
            await engine.run(workflow, args, run_id=order.run_id, budget_usd=scenario.budget_usd,
                             overshoot=scenario.overshoot)
    finally:
        await engine.close()
        log.close()


class ForgetfulStore:
    """Sabotage: a store that never finds an agent's checkpoint, so a resumed agent pays its turns again."""

    def __init__(self, inner: JournalStore) -> None:
        self._inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def get_blob(self, key: str) -> bytes | None:
        return None if "/checkpoints/" in key else await self._inner.get_blob(key)
