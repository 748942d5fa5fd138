"""`EngineSeam`: what the engine's services (forks, schedules, operator actions, reads) use of an `Engine`.

Each service module takes the engine through this protocol, so none of them imports `engine.py` (which
delegates to them) and none reaches past the engine's public methods.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from tether.contracts.entries import JournalEntry
from tether.contracts.prices import Price
from tether.contracts.protocols import JournalStore
from tether.engine.config import Limits
from tether.engine.handle import RunHandle
from tether.engine.options import SegmentOptions
from tether.engine.services import RunServices
from tether.engine.workflow import Workflow
from tether.routing import Router

WorkflowRef = Workflow | Callable[..., Awaitable[Any]] | str
"""A workflow, the `async def` it wraps, or the name it was registered under."""


class EngineSeam(Protocol):
    """The public side of an `Engine` its services are written against."""

    @property
    def clock(self) -> Callable[[], float]: ...

    @property
    def limits(self) -> Limits: ...

    @property
    def router(self) -> Router: ...

    async def store(self) -> JournalStore: ...

    def price_of(self, ref: str) -> Price | None: ...

    async def inspect(self, run_id: str) -> list[JournalEntry]:
        """The run's journal; an unknown run is `RunNotFoundError`."""

    def resolve_workflow(self, wf: WorkflowRef) -> Workflow:
        """The workflow `wf` names (registering a function it has not seen)."""

    def run_services(self) -> RunServices:
        """What a segment may use of the engine, read afresh."""

    def launch(
        self, wf: Workflow, args: dict[str, Any] | None, run_id: str, opts: SegmentOptions,
        event_log: str | os.PathLike[str] | None = None,
    ) -> RunHandle:
        """Drive a segment of `run_id` in a task and return its handle."""
