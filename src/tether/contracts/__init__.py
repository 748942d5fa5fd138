"""Contracts: the data shapes and protocols every other layer speaks."""

from tether.contracts.entries import (
    HASH_VERSION,
    SUPPORTED_HASH_VERSIONS,
    JournalEntry,
    Lease,
    LeaseOwner,
    RunMeta,
)
from tether.contracts.errors import *  # noqa: F403
from tether.contracts.events import AgentEvent, Event, ToolEffectRecord
from tether.contracts.messages import (
    ChatRequest,
    Message,
    OutputFormat,
    RawPart,
    TextPart,
    ToolCallPart,
    ToolResultPart,
    ToolSpec,
)
from tether.contracts.prices import Price, Tier
from tether.contracts.protocols import (
    BudgetHooks,
    ChatModel,
    ClosableModel,
    ExecRequest,
    ExecResult,
    Executor,
    JournalStore,
    LeasableStore,
    QueueStore,
    Wakeups,
)
from tether.contracts.results import AgentError, AgentResult, ToolBudgetSummary
from tether.contracts.signal import Signal
from tether.contracts.stream import (
    ChatEvent,
    Finish,
    ModelCaps,
    RawPartEvent,
    StreamError,
    TextDelta,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
    UsageDelta,
)
from tether.contracts.usage import Usage

__all__ = [
    "HASH_VERSION",
    "SUPPORTED_HASH_VERSIONS",
    "AgentError",
    "AgentEvent",
    "AgentResult",
    "BudgetHooks",
    "ChatEvent",
    "ChatModel",
    "ChatRequest",
    "ClosableModel",
    "Event",
    "ExecRequest",
    "ExecResult",
    "Executor",
    "Finish",
    "JournalEntry",
    "JournalStore",
    "LeasableStore",
    "Lease",
    "LeaseOwner",
    "Message",
    "ModelCaps",
    "OutputFormat",
    "Price",
    "QueueStore",
    "RawPart",
    "RawPartEvent",
    "RunMeta",
    "Signal",
    "StreamError",
    "TextDelta",
    "TextPart",
    "Tier",
    "ToolBudgetSummary",
    "ToolCallDelta",
    "ToolCallEnd",
    "ToolCallPart",
    "ToolCallStart",
    "ToolEffectRecord",
    "ToolResultPart",
    "ToolSpec",
    "Usage",
    "UsageDelta",
    "Wakeups",
]
