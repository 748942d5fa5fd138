"""tether: durable, budget-bounded, testable multi-agent LLM workflows.

A workflow is a plain `async def` over `ctx`; every effect goes through `ctx` into an
append-only journal, so a crashed or edited run resumes without paying twice.
"""

from tether import events, loops, mcp, models, testing
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
    RunHandedBackError,
    RunNotFoundError,
    StoreUnavailableError,
    TetherError,
)
from tether.contracts.events import AgentEvent, BaseEvent, Event, EventLogError, ToolEffectRecord
from tether.contracts.loops import AgentLoop, LoopSession
from tether.contracts.prices import Price, Tier
from tether.contracts.protocols import BudgetHooks
from tether.contracts.results import AgentError, AgentResult, ToolBudgetSummary
from tether.contracts.stops import StopReason
from tether.contracts.usage import Usage
from tether.engine.config import Limits, Telemetry
from tether.engine.ctx import BranchOutcome, Ctx
from tether.engine.engine import Engine
from tether.engine.event_log import read_events
from tether.engine.fork_preview import ForkPreview
from tether.engine.handle import RunHandle
from tether.engine.options import AgentOptions, Containment, ResumeOptions, RunOptions, StartOptions
from tether.engine.outcome import DroppedBranch, ReplayStats, RunOutcome
from tether.engine.workflow import Workflow, workflow
from tether.journal.cost import CostReport
from tether.journal.diff import RunDiff
from tether.journal.tree import AgentNode, TreeReport
from tether.observability.progress import progress
from tether.pricing import PriceTable
from tether.routing import ModelSpec
from tether.tools.definition import ModelRetry, Tool, tool
from tether.tools.permissions import Permissions

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
    "CostReport",
    "Ctx",
    "DroppedBranch",
    "Engine",
    "Event",
    "EventLogError",
    "FinalizationReserve",
    "FinalizationWindow",
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
    "ModelRetry",
    "ModelSpec",
    "NonSerializableValueError",
    "Permissions",
    "Price",
    "PriceTable",
    "PricingError",
    "ReplayStats",
    "ResumeOptions",
    "RunDiff",
    "RunHandedBackError",
    "RunHandle",
    "RunNotFoundError",
    "RunOptions",
    "RunOutcome",
    "StartOptions",
    "StopReason",
    "StoreUnavailableError",
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
