"""`RunServices`: what one segment uses of its engine, and nothing else of it.

The engine builds one per segment; the segment and everything under it (ctx, agents, the loop host,
the tree) read time, randomness, models, profiles, prices and limits from it, never from the engine.
"""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass

from tether.contracts.prices import Price
from tether.engine.profiles import AgentProfile
from tether.engine.return_types import ReturnTypes
from tether.engine.tool_runner import ToolRunner
from tether.routing import ModelLike, Router
from tether.tools.permissions import Permissions

ForecastPreview = Callable[..., Awaitable[float | None]]
"""`(store, services, workflow, args, source_run_id) -> USD | None` (see `forecast_preview`)."""


@dataclass(frozen=True, slots=True)
class RunServices:
    """The engine's configuration and shared parts, as one segment sees them."""

    clock: Callable[[], float]
    rng: random.Random
    sleep: Callable[[float], Awaitable[None]]
    router: Router
    profiles: Mapping[str, AgentProfile]
    workflow_model: Callable[[str], ModelLike | None]
    price_of: Callable[[str], Price | None]
    tool_runner: ToolRunner
    permissions: Permissions | None
    max_spawns: int
    dispatch_wait_s: float
    concurrency: int
    lease_ttl_s: float
    return_types: ReturnTypes
    forecast_preview: ForecastPreview | None = None
    """What a fork preview says a run of new code costs (`tether.engine.forecast.preview_cost`), for forecasts."""
    preview: bool = False
    """A fork preview (docs/forks.md): models answer with placeholders, and a host step that would run live
    stops the body (`PreviewStopped`) instead of running."""
