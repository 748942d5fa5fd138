"""`StopReason`: why money stopped (or held back) an agent, a turn or a spawn, as a typed value.

Journaled in `AgentError.reason` and carried in `BudgetExhaustedError.data["reason"]`; replay, the CLI's
advice and the API decide on it, never on an error's words (journals written before it are read through
`tether.journal.stops`, the one place that knows the old wordings).
"""

from __future__ import annotations

from enum import StrEnum


class StopReason(StrEnum):
    """Why a budget stopped work. Values are stable: they are journaled."""

    USD_CEILING = "usd-ceiling"
    """A USD account (the run's or a child workflow's) is at its ceiling, or a reserve does not fit under it."""
    TOKEN_CEILING = "token-ceiling"
    """The agent tree's token ceiling (`Containment(max_tokens=...)`)."""
    TENANT_BUDGET = "tenant-budget"
    """A budget across runs (`tether.Budget`) cannot cover the call."""
    OUTPUT_FLOOR = "output-floor"
    """What is left buys fewer output tokens than the model's floor: the turn is refused before the wire."""
    IN_FLIGHT = "in-flight"
    """Hard ceiling: the call's worst case does not fit beside the calls in flight; it waits, nothing stops."""
    EXPOSURE_CAP = "exposure-cap"
    """The opt-in in-flight exposure cap refused the attempt (not a ceiling)."""
    EXPOSURE_DRAINED = "exposure-drained"
    """A waiting dispatch found nothing in flight to wait for, or none settled in time (not a ceiling)."""
    PROVIDER_CANCELLED = "provider-cancelled"
    """The stream ended cancelled with no ceiling fired (not a ceiling)."""
    SESSION_CEILING = "session-ceiling"
    """A session's USD ceiling across its turns (`engine.session(..., budget_usd=...)`) cannot cover the turn."""
    IDENTICAL_TOOL_CALLS = "identical-tool-calls"
    """Runaway brake: an agent asked for the same tool call (canonically equal arguments) past its limit."""
    SPEND_RATE = "spend-rate"
    """Runaway brake: the run's spend over the last minute passed `max_spend_rate_usd_per_min`."""
    REPEATED_SPAWN = "repeated-spawn"
    """Runaway brake: an orchestrator spawned a child goal again after it had finished."""

    @classmethod
    def parse(cls, value: object) -> StopReason | None:
        """`value` as a `StopReason` (a member, or its journaled text); None for anything else."""
        if isinstance(value, StopReason):
            return value
        if isinstance(value, str):
            try:
                return cls(value)
            except ValueError:
                return None
        return None

    @property
    def is_ceiling(self) -> bool:
        """Whether a ceiling stopped the work for good: the same money decides the same way on resume."""
        return self not in _NOT_CEILINGS

    @property
    def is_brake(self) -> bool:
        """A runaway brake (not a ceiling: more money does not release it); its stop replays on every resume."""
        return self in _BRAKES


_BRAKES = frozenset({StopReason.IDENTICAL_TOOL_CALLS, StopReason.SPEND_RATE, StopReason.REPEATED_SPAWN})
_NOT_CEILINGS = frozenset({
    StopReason.IN_FLIGHT, StopReason.EXPOSURE_CAP, StopReason.EXPOSURE_DRAINED, StopReason.PROVIDER_CANCELLED,
}) | _BRAKES

__all__ = ["StopReason"]
