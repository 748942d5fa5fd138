"""Tool budgets (SPEC §6): the per-invocation config and the gate every tool call passes.

All opt-in via `ctx.agent(..., tool_budget=tether.ToolBudget(...))`. The gate counts executed
calls and weighted units, grants extensions, runs the finalization window and writes the notes the
model reads at batch boundaries. Grants, grant refusals and the window entry are journaled decisions
(`host.decide`) appended before their effect and read back on resume; everything else rides the
loop's checkpoint. docs/tool-budgets.md holds the long form.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from tether.agents.host import LoopHost
from tether.agents.state import LoopState, ToolBudgetState
from tether.contracts.errors import ConfigError
from tether.contracts.messages import ToolCallPart, ToolResultPart
from tether.contracts.money import usd
from tether.contracts.protocols import BudgetHooks
from tether.contracts.results import ToolBudgetSummary
from tether.tools.definition import Tool

Limiter = Literal["max_tool_calls", "tool_units"]
DEFAULT_NOTICES = (0.5, 0.8)
"""The thresholds `notices=True` stands for (SPEC §17)."""
GRANT_DECISION = "tool-grant"
WINDOW_DECISION = "finalization-window"
_EPS = 1e-9


def _fail(what: str, value: Any, rule: str) -> ConfigError:
    return ConfigError(f"tool budget: {what} must be {rule}, got {value!r}", field=what, value=value)


def _int_at_least(value: Any, what: str, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise _fail(what, value, f"an integer >= {minimum}")


def _number_at_least(value: Any, what: str, minimum: float) -> None:
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    if not ok or value < minimum:
        raise _fail(what, value, f"a finite number >= {minimum:g}")


@dataclass(frozen=True)
class ToolUnits:
    """A weighted tool budget: `costs` per tool name, else the tool's own `units=`, else `default`."""

    max: float
    costs: Mapping[str, float] = field(default_factory=dict)
    default: float = 1

    def __post_init__(self) -> None:
        _number_at_least(self.max, "tool_units.max", 0)
        _number_at_least(self.default, "tool_units.default", 0)
        if not isinstance(self.costs, Mapping):
            raise _fail("tool_units.costs", self.costs, "a mapping of tool name to cost")
        for name, cost in self.costs.items():
            _number_at_least(cost, f"tool_units.costs[{name!r}]", 0)
        object.__setattr__(self, "costs", dict(self.costs))

    def cost_of(self, tool: Tool) -> float:
        if tool.name in self.costs:
            return float(self.costs[tool.name])
        return float(tool.units if tool.units is not None else self.default)


@dataclass(frozen=True)
class ToolBudgetExtension:
    """At `max_tool_calls` expiry, grant `increment` more calls, at most `max_extensions` times."""

    increment: int
    max_extensions: int
    min_headroom_usd: float | None = None
    """Grant only while the run's remaining USD is at least this (default: anything above zero)."""

    def __post_init__(self) -> None:
        _int_at_least(self.increment, "extension.increment", 1)
        _int_at_least(self.max_extensions, "extension.max_extensions", 0)
        if self.min_headroom_usd is not None:
            _number_at_least(self.min_headroom_usd, "extension.min_headroom_usd", 0)


@dataclass(frozen=True)
class FinalizationReserve:
    """At expiry, one extra tool-less summary turn whose text becomes the output."""

    max_output_tokens: int | None = None

    def __post_init__(self) -> None:
        if self.max_output_tokens is not None:
            _int_at_least(self.max_output_tokens, "finalization_reserve.max_output_tokens", 1)


@dataclass(frozen=True)
class FinalizationWindow:
    """When at most `reserve_calls` remain, only the tools named in `allow` execute."""

    reserve_calls: int
    allow: Sequence[str] = ()

    def __post_init__(self) -> None:
        _int_at_least(self.reserve_calls, "finalization_window.reserve_calls", 1)
        if isinstance(self.allow, str) or not all(isinstance(n, str) for n in self.allow):
            raise _fail("finalization_window.allow", self.allow, "a sequence of tool names")
        object.__setattr__(self, "allow", tuple(self.allow))


@dataclass(frozen=True)
class ToolBudget:
    """A per-invocation tool budget; every option is off by default. Never part of agent identity.

    `notices`: None (off), True (thresholds 0.5 and 0.8), or fractions of the base cap in (0, 1].
    """

    max_tool_calls: int | None = None
    tool_units: ToolUnits | None = None
    notices: bool | Sequence[float] | None = None
    extension: ToolBudgetExtension | None = None
    finalization_reserve: FinalizationReserve | None = None
    finalization_window: FinalizationWindow | None = None

    def __post_init__(self) -> None:
        if self.max_tool_calls is not None:
            _int_at_least(self.max_tool_calls, "max_tool_calls", 0)
        for name, cls in (
            ("tool_units", ToolUnits),
            ("extension", ToolBudgetExtension),
            ("finalization_reserve", FinalizationReserve),
            ("finalization_window", FinalizationWindow),
        ):
            value = getattr(self, name)
            if value is not None and not isinstance(value, cls):
                raise _fail(name, value, f"a tether.{cls.__name__} or None")
        object.__setattr__(self, "notices", _thresholds(self.notices))
        capped = self.max_tool_calls is not None or self.tool_units is not None
        needs_cap = {
            "notices": self.notices,
            "finalization_reserve": self.finalization_reserve,
            "finalization_window": self.finalization_window,
        }
        for name, value in needs_cap.items():
            if value is not None and not capped:
                raise ConfigError(f"tool budget: {name} needs max_tool_calls or tool_units to measure against")
        if self.extension is not None and self.max_tool_calls is None:
            raise ConfigError("tool budget: extension grants raise max_tool_calls; set max_tool_calls too")

    @property
    def configured(self) -> bool:
        return self.max_tool_calls is not None or self.tool_units is not None

    @property
    def thresholds(self) -> tuple[float, ...]:
        return tuple(self.notices) if isinstance(self.notices, tuple) else ()


def _thresholds(notices: Any) -> tuple[float, ...] | None:
    if notices is None or notices is False:
        return None
    if notices is True:
        return DEFAULT_NOTICES
    if isinstance(notices, str) or not isinstance(notices, Sequence):
        raise _fail("notices", notices, "None, True, or a sequence of fractions")
    for t in notices:
        _number_at_least(t, "notices[]", 0)
        if not 0 < t <= 1:
            raise _fail("notices[]", t, "a fraction in (0, 1]")
    return tuple(sorted({float(t) for t in notices}))


@dataclass(frozen=True)
class Verdict:
    """The gate's answer for one call: run it, refuse it (typed result, not counted), or expire."""

    action: Literal["run", "refuse", "expire"]
    message: str = ""


RUN = Verdict("run")
EXPIRE = Verdict("expire")


class ToolBudgetGate:
    """The tool budget of one invocation; a no-op when the invocation has none."""

    __slots__ = ("budget", "hooks", "host", "state", "window_refusals")

    def __init__(self, budget: Any, host: LoopHost, hooks: BudgetHooks, state: LoopState) -> None:
        if budget is not None and not isinstance(budget, ToolBudget):
            raise ConfigError(f"tool_budget= must be a tether.ToolBudget or None, not {type(budget).__name__}")
        self.budget = budget if budget is not None and budget.configured else None
        self.host, self.hooks, self.state = host, hooks, state
        self.window_refusals = 0
        """Calls the window refused in this process (the loop's no-progress check reads it)."""

    @property
    def s(self) -> ToolBudgetState:
        return self.state.tool_budget

    @property
    def expired(self) -> Limiter | None:
        return self.s.expired

    # -- the counts ------------------------------------------------------------------------------
    def cost(self, tool: Tool) -> float:
        units = self.budget.tool_units if self.budget is not None else None
        return units.cost_of(tool) if units is not None else 0.0

    def calls_cap(self) -> int | None:
        """The effective executed-call cap: `max_tool_calls` plus every granted extension."""
        b = self.budget
        if b is None or b.max_tool_calls is None:
            return None
        increment = b.extension.increment if b.extension is not None else 0
        return b.max_tool_calls + self.s.grants * increment

    def _left(self, calls: int = 0, units: float = 0.0) -> float | None:
        """What the window measures: calls left when calls are capped, else units left."""
        b = self.budget
        cap = self.calls_cap()
        if cap is not None:
            return cap - (self.state.tool_calls + calls)
        if b is not None and b.tool_units is not None:
            return b.tool_units.max - (self.s.units_used + units)
        return None

    def charge(self, tool: Tool) -> None:
        """An executed call: count it and its units (the loop's own counter lives in `LoopState`)."""
        self.state.tool_calls += 1
        self.s.units_used += self.cost(tool)

    # -- the gate --------------------------------------------------------------------------------
    async def admit(self, tool: Tool, in_flight: Sequence[Tool] = ()) -> Verdict:
        """Decide one call; `in_flight` are calls of the same group admitted but not executed yet."""
        b = self.budget
        if b is None:
            return RUN
        calls, units = len(in_flight), sum(self.cost(t) for t in in_flight)
        cap = self.calls_cap()
        while cap is not None and self.state.tool_calls + calls >= cap:
            if not await self._grant():
                return self._expire("max_tool_calls")
            cap = self.calls_cap()
        window = b.finalization_window
        if window is not None and await self._in_window(calls, units) and tool.name not in window.allow:
            allowed = ", ".join(window.allow) or "none"
            left = _fmt(self._left(calls, units))
            self.window_refusals += 1
            return Verdict(
                "refuse",
                f"[refused] finalization window: '{tool.name}' does not run with {left} tool budget left "
                f"(allowed now: {allowed}). It was not executed and did not count; finish with what you have.",
            )
        if b.tool_units is not None and self.s.units_used + units + self.cost(tool) > b.tool_units.max + _EPS:
            return self._expire("tool_units")
        return RUN

    def _expire(self, limiter: Limiter) -> Verdict:
        self.s.expired = limiter
        return EXPIRE

    def skipped(self, call: ToolCallPart) -> ToolResultPart:
        """The typed result of a call the expiry left unexecuted."""
        limiter = self.s.expired or "max_tool_calls"
        if limiter == "max_tool_calls":
            spent = f"{self.state.tool_calls} of {self.calls_cap()} tool calls used"
        else:
            units = self.budget.tool_units if self.budget is not None else None
            spent = f"{_fmt(self.s.units_used)} of {_fmt(units.max if units else 0)} tool units used"
        content = f"[skipped] tool budget exhausted ({limiter}: {spent}); this call was not executed."
        return ToolResultPart(call_id=call.id, name=call.name, content=content, is_error=True)

    async def _grant(self) -> bool:
        """At `max_tool_calls` expiry: journal a grant (or its refusal) before the cap lifts."""
        b = self.budget
        ext = b.extension if b is not None else None
        if b is None or ext is None or self.s.grants >= ext.max_extensions:
            return False
        number = self.s.grants + 1
        remaining = self.hooks.remaining_usd()
        granted, reason = _money_check(remaining, ext.min_headroom_usd)
        base = b.max_tool_calls or 0
        payload = {
            "grant": number,
            "granted": granted,
            "increment": ext.increment,
            "cap": base + (number if granted else number - 1) * ext.increment,
            "used": self.state.tool_calls,
            "remaining_usd": remaining,
            "reason": reason,
        }
        decided = await self._decide(GRANT_DECISION, payload, number)
        if not decided.get("granted"):
            return False
        self.s.grants = number
        self.s.notes.append(
            f"Tool budget extended: {ext.increment} more tool calls granted (extension {number} of "
            f"{ext.max_extensions}); the cap is now {self.calls_cap()} and {self.state.tool_calls} are used."
        )
        return True

    async def _decide(self, name: str, payload: dict[str, Any], number: int) -> dict[str, Any]:
        """Journal a numbered decision; on resume, pass over entries a restored checkpoint already holds.

        The checkpoint may already carry grants 1..n-1 whose entries this segment has not consumed
        yet (matching takes the first unconsumed entry), so older numbers are read past, never reused.
        """
        await self.host.save_checkpoint(self.state)  # the decision's context is durable before it
        decided = payload
        for _ in range(number):
            decided = await self.host.decide(name, payload)
            if int(decided.get("grant", number)) >= number:
                return decided
        return decided

    async def _in_window(self, calls: int = 0, units: float = 0.0) -> bool:
        """Whether the window is active now; its first activation is a journaled decision."""
        b = self.budget
        window = b.finalization_window if b is not None else None
        left = self._left(calls, units)
        if window is None or left is None or left > window.reserve_calls + _EPS:
            return False
        if not self.s.window_entered:
            await self.host.save_checkpoint(self.state)
            await self.host.decide(
                WINDOW_DECISION,
                {
                    "used": self.state.tool_calls,
                    "cap": self.calls_cap(),
                    "units_used": self.s.units_used,
                    "left": left,
                    "reserve_calls": window.reserve_calls,
                },
            )
            self.s.window_entered = True
            allowed = ", ".join(window.allow) or "none"
            self.s.notes.append(
                f"Finalization window: {_fmt(left)} tool budget left; from now on only these tools run: "
                f"{allowed}. Wrap up your work."
            )
        return True

    # -- the batch boundary ------------------------------------------------------------------------
    async def batch_note(self) -> str | None:
        """The one plain message that follows a batch's tool results (notices, grants, the window)."""
        if self.budget is None:
            return None
        if self.s.expired is None:
            await self._in_window()  # a batch that crossed into the window fires it at the boundary
        lines = list(self.s.notes)
        self.s.notes.clear()
        notice = self._notice()
        if notice:
            lines.append(notice)
        return "\n".join(lines) or None

    def _notice(self) -> str | None:
        b = self.budget
        assert b is not None
        if b.max_tool_calls is not None:
            used, base, what = float(self.state.tool_calls), float(b.max_tool_calls), "tool calls"
            left = float((self.calls_cap() or 0) - self.state.tool_calls)
        elif b.tool_units is not None:
            used, base, what = self.s.units_used, float(b.tool_units.max), "tool units"
            left = base - used
        else:
            return None
        crossed = [t for t in b.thresholds if t not in self.s.notices_fired and base > 0 and used >= t * base - _EPS]
        if not crossed:
            return None
        self.s.notices_fired.extend(crossed)
        return f"Tool budget notice: {_fmt(used)} of {_fmt(base)} {what} used; {_fmt(max(left, 0))} left."

    # -- the summary -----------------------------------------------------------------------------
    def summary(self, *, limited: bool) -> ToolBudgetSummary | None:
        """`ToolBudgetSummary` whenever a budget is configured; `limited`: the budget ended the loop."""
        b = self.budget
        if b is None:
            return None
        s = self.s
        return ToolBudgetSummary(
            used=self.state.tool_calls,
            cap=self.calls_cap(),
            units_used=s.units_used if b.tool_units is not None else None,
            units_max=float(b.tool_units.max) if b.tool_units is not None else None,
            extensions_granted=s.grants if b.extension is not None else None,
            notices_fired=list(s.notices_fired) or None,
            finalization_reserve_used=True if s.reserve_used else None,
            finalization_window_entered=True if s.window_entered else None,
            limiter=s.expired if limited else None,
        )

    def reserve_prompt(self) -> str:
        limiter = self.s.expired or "max_tool_calls"
        return (
            f"Tool budget exhausted ({limiter}); the remaining tool calls were not executed. "
            "Do not call tools. Write your final answer now from what you have gathered so far."
        )


def _money_check(remaining: float | None, min_headroom: float | None) -> tuple[bool, str]:
    """A grant needs money left: above zero, or at least `min_headroom_usd` (no ceiling: always)."""
    if remaining is None:
        return True, "no USD ceiling"
    if remaining <= _EPS:
        return False, "no USD left on the run's budget"
    if min_headroom is not None:
        if remaining + _EPS < min_headroom:
            return False, f"remaining {usd(remaining)} USD is below min_headroom_usd {usd(min_headroom)}"
        return True, f"remaining {usd(remaining)} USD meets min_headroom_usd {usd(min_headroom)}"
    return True, f"remaining {usd(remaining)} USD"


def _fmt(value: float | None) -> str:
    if value is None:
        return "?"
    return str(int(value)) if float(value).is_integer() else f"{value:g}"
