"""The testing kit: the fake model, cassettes, replay-strict runs and conformance kits."""

from __future__ import annotations

from typing import Any

from tether.models.fake import FakeModel, Reply, ToolCall
from tether.testing.cassette import CassetteMissError, CassetteModel, cassette
from tether.testing.cassette_replay import replay_cassette


async def replay_strict(engine: Any, run_id: str, wf: Any = None, args: Any = None) -> Any:
    """Resume `run_id` replay-strict: any would-be-live call fails the run, nothing is written."""
    return await engine.resume(run_id, wf, args, dry_run=True)


__all__ = [
    "CassetteMissError", "CassetteModel", "FakeModel", "Reply", "ToolCall", "cassette", "replay_cassette",
    "replay_strict",
]
