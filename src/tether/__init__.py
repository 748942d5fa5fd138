"""tether: durable, budget-bounded, testable multi-agent LLM workflows.

A workflow is a plain `async def` over `ctx`; every effect goes through `ctx` into an
append-only journal, so a crashed or edited run resumes without paying twice.

Every public name is imported on first use (`tether._lazy`), so `import tether` costs next to
nothing and a command that needs one part of the API pays for that part only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tether import _lazy

if TYPE_CHECKING:
    from tether import events, loops, mcp, models, testing
    from tether.agents.context import Context
    from tether.agents.tool_budget import (
        FinalizationReserve,
        FinalizationWindow,
        ToolBudget,
        ToolBudgetExtension,
        ToolUnits,
    )
    from tether.budget.accounts import Account
    from tether.budget.tenant import Budget
    from tether.contracts.errors import (
        AdmissionRejectedError,
        AgentCallError,
        BudgetExhaustedError,
        ConfigError,
        InvalidResolutionError,
        JournalCompatibilityError,
        JournalCorruptError,
        JournalMissError,
        JournalOrderViolation,
        JournalSealedError,
        LeaseHeldError,
        NonSerializableValueError,
        PricingError,
        RunActiveError,
        RunHandedBackError,
        RunNotFoundError,
        RunRetainedError,
        StoreUnavailableError,
        TetherError,
    )
    from tether.contracts.events import AgentEvent, BaseEvent, Event, EventLogError, ToolEffectRecord
    from tether.contracts.loops import AgentLoop, LoopSession
    from tether.contracts.prices import Price, Tier
    from tether.contracts.protocols import BudgetHooks
    from tether.contracts.results import AgentError, AgentResult, ToolBudgetSummary
    from tether.contracts.sessions import Note, SessionConflictError, SessionNotFoundError
    from tether.contracts.stops import StopReason
    from tether.contracts.usage import Usage
    from tether.engine.config import Limits, Telemetry
    from tether.engine.ctx import BranchOutcome, Ctx
    from tether.engine.engine import Engine
    from tether.engine.event_log import read_events
    from tether.engine.forecasting import Forecast, ForecastRefusedError
    from tether.engine.fork_preview import ForkPreview
    from tether.engine.handle import RunHandle
    from tether.engine.memory import Memory
    from tether.engine.options import AgentOptions, Containment, ResumeOptions, RunOptions, StartOptions
    from tether.engine.outcome import DroppedBranch, ReplayStats, RunOutcome
    from tether.engine.retention import DeleteReport, SweepReport
    from tether.engine.sessions import Session, SessionOptions, Turn
    from tether.engine.workflow import Workflow, workflow
    from tether.journal.cost import CostReport
    from tether.journal.diff import RunDiff
    from tether.journal.tree import AgentNode, TreeReport
    from tether.observability.progress import progress
    from tether.pricing import PriceTable
    from tether.routing import ModelSpec
    from tether.tools.definition import ModelRetry, Tool, tool
    from tether.tools.permissions import Permissions

_EXPORTS: dict[str, str] = {
    "Context": "tether.agents.context",
    "FinalizationReserve": "tether.agents.tool_budget",
    "FinalizationWindow": "tether.agents.tool_budget",
    "ToolBudget": "tether.agents.tool_budget",
    "ToolBudgetExtension": "tether.agents.tool_budget",
    "ToolUnits": "tether.agents.tool_budget",
    "Account": "tether.budget.accounts",
    "Budget": "tether.budget.tenant",
    "AdmissionRejectedError": "tether.contracts.errors",
    "AgentCallError": "tether.contracts.errors",
    "BudgetExhaustedError": "tether.contracts.errors",
    "ConfigError": "tether.contracts.errors",
    "InvalidResolutionError": "tether.contracts.errors",
    "JournalCompatibilityError": "tether.contracts.errors",
    "JournalCorruptError": "tether.contracts.errors",
    "JournalMissError": "tether.contracts.errors",
    "JournalOrderViolation": "tether.contracts.errors",
    "JournalSealedError": "tether.contracts.errors",
    "LeaseHeldError": "tether.contracts.errors",
    "NonSerializableValueError": "tether.contracts.errors",
    "PricingError": "tether.contracts.errors",
    "RunHandedBackError": "tether.contracts.errors",
    "RunActiveError": "tether.contracts.errors",
    "RunNotFoundError": "tether.contracts.errors",
    "RunRetainedError": "tether.contracts.errors",
    "StoreUnavailableError": "tether.contracts.errors",
    "TetherError": "tether.contracts.errors",
    "AgentEvent": "tether.contracts.events",
    "BaseEvent": "tether.contracts.events",
    "Event": "tether.contracts.events",
    "EventLogError": "tether.contracts.events",
    "ToolEffectRecord": "tether.contracts.events",
    "Price": "tether.contracts.prices",
    "Tier": "tether.contracts.prices",
    "BudgetHooks": "tether.contracts.protocols",
    "AgentError": "tether.contracts.results",
    "AgentResult": "tether.contracts.results",
    "ToolBudgetSummary": "tether.contracts.results",
    "StopReason": "tether.contracts.stops",
    "AgentLoop": "tether.contracts.loops",
    "LoopSession": "tether.contracts.loops",
    "Limits": "tether.engine.config",
    "Telemetry": "tether.engine.config",
    "Usage": "tether.contracts.usage",
    "BranchOutcome": "tether.engine.ctx",
    "Ctx": "tether.engine.ctx",
    "Engine": "tether.engine.engine",
    "Note": "tether.contracts.sessions",
    "SessionConflictError": "tether.contracts.sessions",
    "SessionNotFoundError": "tether.contracts.sessions",
    "Memory": "tether.engine.memory",
    "Session": "tether.engine.sessions",
    "SessionOptions": "tether.engine.sessions",
    "Turn": "tether.engine.sessions",
    "read_events": "tether.engine.event_log",
    "Forecast": "tether.engine.forecasting",
    "ForecastRefusedError": "tether.engine.forecasting",
    "ForkPreview": "tether.engine.fork_preview",
    "DeleteReport": "tether.engine.retention",
    "SweepReport": "tether.engine.retention",
    "RunHandle": "tether.engine.handle",
    "AgentOptions": "tether.engine.options",
    "Containment": "tether.engine.options",
    "ResumeOptions": "tether.engine.options",
    "RunOptions": "tether.engine.options",
    "StartOptions": "tether.engine.options",
    "DroppedBranch": "tether.engine.outcome",
    "ReplayStats": "tether.engine.outcome",
    "RunOutcome": "tether.engine.outcome",
    "Workflow": "tether.engine.workflow",
    "workflow": "tether.engine.workflow",
    "events": "tether.events",
    "CostReport": "tether.journal.cost",
    "RunDiff": "tether.journal.diff",
    "AgentNode": "tether.journal.tree",
    "TreeReport": "tether.journal.tree",
    "mcp": "tether.mcp",
    "loops": "tether.loops",
    "models": "tether.models",
    "progress": "tether.observability.progress",
    "PriceTable": "tether.pricing",
    "ModelSpec": "tether.routing",
    "testing": "tether.testing",
    "ModelRetry": "tether.tools.definition",
    "Tool": "tether.tools.definition",
    "tool": "tether.tools.definition",
    "Permissions": "tether.tools.permissions",
}
"""Public name -> the module that defines it (a submodule for `events`, `mcp`, `models`, `testing`)."""


def __getattr__(name: str) -> Any:
    return _lazy.load(__name__, _EXPORTS, name, globals())


def __dir__() -> list[str]:
    return _lazy.names(_EXPORTS, globals())


__all__ = [
    "Account",
    "AdmissionRejectedError",
    "AgentCallError",
    "AgentError",
    "AgentEvent",
    "AgentLoop",
    "AgentNode",
    "AgentOptions",
    "AgentResult",
    "BaseEvent",
    "BranchOutcome",
    "Budget",
    "BudgetExhaustedError",
    "BudgetHooks",
    "ConfigError",
    "Containment",
    "Context",
    "CostReport",
    "Ctx",
    "DeleteReport",
    "DroppedBranch",
    "Engine",
    "Event",
    "EventLogError",
    "FinalizationReserve",
    "FinalizationWindow",
    "Forecast",
    "ForecastRefusedError",
    "ForkPreview",
    "InvalidResolutionError",
    "JournalCompatibilityError",
    "JournalCorruptError",
    "JournalMissError",
    "JournalOrderViolation",
    "JournalSealedError",
    "LeaseHeldError",
    "Limits",
    "LoopSession",
    "Memory",
    "ModelRetry",
    "ModelSpec",
    "NonSerializableValueError",
    "Note",
    "Permissions",
    "Price",
    "PriceTable",
    "PricingError",
    "ReplayStats",
    "ResumeOptions",
    "RunActiveError",
    "RunDiff",
    "RunHandedBackError",
    "RunHandle",
    "RunNotFoundError",
    "RunOptions",
    "RunOutcome",
    "RunRetainedError",
    "Session",
    "SessionConflictError",
    "SessionNotFoundError",
    "SessionOptions",
    "StartOptions",
    "StopReason",
    "StoreUnavailableError",
    "SweepReport",
    "Telemetry",
    "TetherError",
    "Tier",
    "Tool",
    "ToolBudget",
    "ToolBudgetExtension",
    "ToolBudgetSummary",
    "ToolEffectRecord",
    "ToolUnits",
    "TreeReport",
    "Turn",
    "Usage",
    "Workflow",
    "events",
    "loops",
    "mcp",
    "models",
    "progress",
    "read_events",
    "testing",
    "tool",
    "workflow",
]
