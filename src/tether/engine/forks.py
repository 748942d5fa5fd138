"""`engine.fork`: plan a fork of a stored run, then preview it (nothing runs or is written) or launch it.

The plan and its write are `tether.engine.fork`; the preview is `tether.engine.fork_preview`. This module
is the service `Engine.fork` delegates to: it checks the swaps, finds the workflow, and picks the path.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Unpack

from tether.contracts.errors import RunNotFoundError
from tether.engine.fork import parse_models, plan_fork, write_fork
from tether.engine.options import RunOptions, segment_options
from tether.engine.outcome import RunOutcome
from tether.engine.seam import EngineSeam, WorkflowRef

if TYPE_CHECKING:
    from tether.engine.fork_preview import ForkPreview


async def fork(
    engine: EngineSeam, run_id: str, new_run_id: str, workflow: WorkflowRef | None = None,
    args: Mapping[str, Any] | None = None, *, at: int | None = None, preview: bool = False,
    models: Mapping[str, str] | Sequence[str] | None = None, event_log: str | os.PathLike[str] | None = None,
    **options: Unpack[RunOptions],
) -> RunOutcome | ForkPreview:
    """`Engine.fork` (docs/forks.md): the source run is only read."""
    store = await engine.store()
    swaps = parse_models(models)
    for ref in swaps.values():
        engine.router.resolve_ref(ref)  # an unknown adapter is refused before anything is read or written
    meta = await store.get_meta(run_id)
    wf = workflow if workflow is not None else (meta.workflow if meta is not None else None)
    if wf is None:
        raise RunNotFoundError(f"no run {run_id!r} in this store to fork; check the run id (tether runs lists "
                               f"them) and the store URL", run_id=run_id)
    plan = await plan_fork(store, run_id, new_run_id, engine.resolve_workflow(wf), args, at=at, models=swaps,
                           given=segment_options(options, "fork()"), now=engine.clock())
    if preview:
        from tether.engine.fork_preview import preview_fork

        return await preview_fork(store, engine.run_services(), plan, await store.load(run_id))
    await write_fork(store, plan)
    return await engine.launch(plan.workflow, plan.args, new_run_id, plan.opts, event_log)
