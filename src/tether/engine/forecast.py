"""`engine.forecast`, the service `Engine` delegates to, and the fork preview a forecast of new code rests on.

The figures, the estimator and the gate are `tether.engine.forecasting` (the runner uses them); this module adds
what needs the fork preview, which drives a run itself (docs/budgets.md, *Forecasts*).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tether.contracts.errors import TetherError
from tether.contracts.protocols import JournalStore
from tether.engine.forecasting import DEFAULT_RUNS, Forecast, forecast_from
from tether.engine.fork import plan_fork
from tether.engine.options import SegmentOptions
from tether.engine.seam import EngineSeam, WorkflowRef
from tether.engine.services import RunServices
from tether.engine.workflow import Workflow


async def forecast(engine: EngineSeam, workflow: WorkflowRef, args: Mapping[str, Any] | None = None, *,
                   runs: int = DEFAULT_RUNS) -> Forecast:
    """`engine.forecast`: the forecast of a run of `workflow` with `args` from the engine's store."""
    return await forecast_from(await engine.store(), engine.run_services(), engine.resolve_workflow(workflow), args,
                               runs=runs)


async def preview_cost(store: JournalStore, services: RunServices, wf: Workflow, args: Mapping[str, Any] | None,
                       source_run_id: str) -> float | None:
    """What a run of `wf` would cost by a fork preview of `source_run_id` (a run of older code) under it: what the
    calls it would reuse cost the source, plus the per-call forecast of the new ones (None: it cannot be previewed)."""
    from tether.engine.fork_preview import preview_fork  # imported when used, as `engine.fork(preview=True)` does

    try:
        plan = await plan_fork(store, source_run_id, f"{source_run_id}-forecast", wf, args, at=None, models={},
                               given=SegmentOptions(), now=services.clock())
        preview = await preview_fork(store, services, plan, await store.load(source_run_id))
    except TetherError:
        return None
    return preview.reused_usd + preview.forecast.expected_usd
