"""The testing kit: the fake model, cassettes, replay-strict runs and conformance kits."""

from __future__ import annotations

from typing import Any

from tether.contracts.prices import Price
from tether.models.fake import FakeModel, Reply, ToolCall
from tether.testing.cassette import CassetteMissError, CassetteModel, cassette
from tether.testing.cassette_replay import replay_cassette

FIXTURE_PRICE = Price(input=1.0, output=2.0)
"""The price of every model the `fake_model` fixture serves: 1 USD per million input tokens, 2 per million output
(a test's `budget_usd=` ceiling holds as it would on a real model; docs/testing.md shows how to set another)."""


async def replay_strict(engine: Any, run_id: str, wf: Any = None, args: Any = None) -> Any:
    """Resume `run_id` replay-strict: any would-be-live call fails the run, nothing is written."""
    return await engine.resume(run_id, wf, args, dry_run=True)


__all__ = [
    "FIXTURE_PRICE", "CassetteMissError", "CassetteModel", "FakeModel", "Reply", "ToolCall", "cassette",
    "replay_cassette", "replay_strict",
]
