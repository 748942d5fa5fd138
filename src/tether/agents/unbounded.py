"""`UnboundedHooks`: the `BudgetHooks` of a caller without budgets (every answer is unbounded)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

from tether.contracts.protocols import ExposureWait
from tether.contracts.signal import Signal
from tether.contracts.usage import Usage


class UnboundedHooks:
    """No ceiling, no meter, no exposure cap; `signal` is an optional cancellation to honour."""

    def __init__(self, signal: Signal | None = None) -> None:
        self.signal = signal

    def before_turn(self) -> None:
        return None

    def max_affordable_output_tokens(self, served_by: str, est_input: int) -> int | None:
        return None

    def limited_by(self) -> Literal["usd", "tokens"] | None:
        return None

    def max_exposure_output_tokens(self, served_by: str, est_input: int) -> int | None:
        return None

    def admit_turn_exposure(
        self, served_by: str, est_input: int, planned_output: int
    ) -> Callable[[], None] | None:
        return None

    async def await_exposure_release(self, signal: Signal | None = None) -> ExposureWait:
        return "drained"

    def live_exposure_usd(self) -> float:
        return 0.0

    def open_call_meter(self, served_by: str) -> Callable[[Usage], None] | None:
        return None

    def remaining_usd(self) -> float | None:
        return None

    def assert_priced_dispatch(self, served_by: str) -> None:
        return None

    def on_usage(self, usage: Usage, served_by: str) -> None:
        return None
