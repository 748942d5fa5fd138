"""An engine's typed configuration: `Limits` (what it allows) and `Telemetry` (where its events go).

`Engine(limits=tether.Limits(...), telemetry=tether.Telemetry(...))` is the spelling; the loose keywords of
earlier releases (`max_spawns=`, `lease_ttl_s=`, `otel=`, `tracer_provider=`, ...) are still accepted and
laid over the objects by `configure`, so both spellings build the same configuration.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypedDict

from tether.budget.admission import LIFETIME_SPAWNS
from tether.budget.gate import DISPATCH_WAIT_S
from tether.contracts.errors import ConfigError
from tether.engine.event_log import EventLog
from tether.engine.events import EventSink


@dataclass(frozen=True, slots=True)
class Limits:
    """What one engine allows: agents at once per run, spawns per run, its lease TTL, how long a call waits
    under the hard ceiling for in-flight calls to settle (docs/budgets.md), and per-queue caps of runs held at
    once across all workers."""

    concurrency: int = 12
    max_spawns: int = LIFETIME_SPAWNS
    lease_ttl_s: float = 60.0
    dispatch_wait_s: float = DISPATCH_WAIT_S
    queues: Mapping[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.concurrency < 1:
            raise ConfigError(f"concurrency must be at least 1, got {self.concurrency}")
        for name, cap in self.queues.items():
            if isinstance(cap, bool) or not isinstance(cap, int) or cap < 1:
                raise ConfigError(f"queues[{name!r}] must be a positive int (runs at once across all workers), "
                                  f"got {cap!r}")
        if self.dispatch_wait_s <= 0:
            raise ConfigError(f"dispatch_wait_s must be > 0, got {self.dispatch_wait_s}")


@dataclass(frozen=True, slots=True)
class Telemetry:
    """Where every run's events go besides its handle: `sinks`, a JSONL `event_log` (`{run_id}` in the path: a
    file per run), and OpenTelemetry GenAI spans and metrics through `tracer_provider` / `meter_provider` (or
    `otel=True` for the global ones; extra `otel`), prompts and completions only with `capture_content=True`.
    docs/observability.md has the long form."""

    sinks: Sequence[EventSink] = ()
    event_log: str | os.PathLike[str] | None = None
    otel: bool = False
    tracer_provider: Any = None
    meter_provider: Any = None
    capture_content: bool = False

    def build_sinks(self) -> list[EventSink]:
        """The sinks every run of the engine writes to, the OpenTelemetry exporter last (built only when asked
        for: the extra is optional, so `tether.observability.otel` is imported here and nowhere earlier)."""
        sinks = [*self.sinks, *([EventLog(self.event_log)] if self.event_log is not None else [])]
        if self.otel or self.tracer_provider is not None or self.meter_provider is not None:
            from tether.observability.otel import OtelExporter

            sinks.append(OtelExporter(self.tracer_provider, self.meter_provider, capture_content=self.capture_content))
        return sinks


class EngineOptions(TypedDict, total=False):
    """The loose `Engine(...)` keywords of earlier releases: each is a field of `Limits` or `Telemetry`."""

    max_spawns: int
    lease_ttl_s: float
    dispatch_wait_s: float
    queues: Mapping[str, int]
    sinks: Sequence[EventSink]
    event_log: str | os.PathLike[str] | None
    otel: bool
    tracer_provider: Any
    meter_provider: Any
    capture_content: bool


LIMIT_KEYS = frozenset(f.name for f in dataclasses.fields(Limits))
TELEMETRY_KEYS = frozenset(f.name for f in dataclasses.fields(Telemetry))


def configure(
    concurrency: int | None, limits: Limits | None, telemetry: Telemetry | None, options: Mapping[str, Any]
) -> tuple[Limits, Telemetry]:
    """The engine's `Limits` and `Telemetry`: the objects given (or the defaults), with `concurrency` and the loose
    keywords laid over them."""
    unknown = sorted(set(options) - set(EngineOptions.__annotations__))
    if unknown:
        raise TypeError(f"Engine() got an unexpected keyword argument {unknown[0]!r}; limits are fields of "
                        f"tether.Limits and telemetry of tether.Telemetry")
    lim = {k: v for k, v in options.items() if k in LIMIT_KEYS}
    if concurrency is not None:
        lim["concurrency"] = concurrency
    tel = {k: v for k, v in options.items() if k in TELEMETRY_KEYS}
    return dataclasses.replace(limits or Limits(), **lim), dataclasses.replace(telemetry or Telemetry(), **tel)
