"""Replaying a run cassette (`tether export-cassette`) as a test: install it in a fresh store, resume the workflow
replay-strict with the engine's adapters offline, and fail unless it replays exactly as recorded."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

from tether.audit.cassette import check_replay, install, offline_adapters, read_cassette, recorded_calls
from tether.contracts.errors import ConfigError
from tether.engine.targets import resolve


def replay_cassette(path: str | os.PathLike[str], *, workflow: str | None, app: str | None = None,
                    workdir: str | os.PathLike[str]) -> Any:
    """Replay the cassette at `path` strictly, adapters offline; raise `CassetteReplayError` unless it replays
    exactly as recorded. Returns the replay's `RunOutcome`."""
    doc = read_cassette(path)
    if not workflow:
        raise ConfigError(f"the cassette test for run {doc['run_id']!r} needs WORKFLOW = 'MODULE:WORKFLOW' (the "
                          f"workflow the run ran); set it in the test file, or export with --workflow")
    store_url = f"sqlite:///{Path(workdir).resolve() / 'cassette.db'}"
    resolved = resolve(app=app, workflow=workflow, store=store_url)
    engine = resolved.engine

    async def main() -> Any:
        try:
            run_id, entries = await install(doc, await engine.store())
            with offline_adapters(engine):
                outcome = await engine.resume(run_id, resolved.workflow, doc.get("args") or {}, dry_run=True)
            return outcome, entries
        finally:
            await engine.close()

    outcome, entries = asyncio.run(main())
    check_replay(doc, outcome, recorded_calls(entries))
    return outcome
