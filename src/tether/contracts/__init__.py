"""Contracts: the data shapes and protocols every other layer speaks.

The errors are here at once (they cost nothing); every other name is imported on first use
(`tether._lazy`), so importing one contract module never builds every schema.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tether import _lazy
from tether.contracts.errors import *  # noqa: F403

if TYPE_CHECKING:
    from tether.contracts.entries import (
        HASH_VERSION,
        SUPPORTED_HASH_VERSIONS,
        JournalEntry,
        Lease,
        LeaseOwner,
        RunMeta,
    )
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

_EXPORTS: dict[str, str] = {
    "HASH_VERSION": "tether.contracts.entries",
    "JournalEntry": "tether.contracts.entries",
    "Lease": "tether.contracts.entries",
    "LeaseOwner": "tether.contracts.entries",
    "RunMeta": "tether.contracts.entries",
    "SUPPORTED_HASH_VERSIONS": "tether.contracts.entries",
    "AgentEvent": "tether.contracts.events",
    "Event": "tether.contracts.events",
    "ToolEffectRecord": "tether.contracts.events",
    "ChatRequest": "tether.contracts.messages",
    "Message": "tether.contracts.messages",
    "OutputFormat": "tether.contracts.messages",
    "RawPart": "tether.contracts.messages",
    "TextPart": "tether.contracts.messages",
    "ToolCallPart": "tether.contracts.messages",
    "ToolResultPart": "tether.contracts.messages",
    "ToolSpec": "tether.contracts.messages",
    "Price": "tether.contracts.prices",
    "Tier": "tether.contracts.prices",
    "BudgetHooks": "tether.contracts.protocols",
    "ChatModel": "tether.contracts.protocols",
    "ClosableModel": "tether.contracts.protocols",
    "ExecRequest": "tether.contracts.protocols",
    "ExecResult": "tether.contracts.protocols",
    "Executor": "tether.contracts.protocols",
    "JournalStore": "tether.contracts.protocols",
    "LeasableStore": "tether.contracts.protocols",
    "QueueStore": "tether.contracts.protocols",
    "Wakeups": "tether.contracts.protocols",
    "AgentError": "tether.contracts.results",
    "AgentResult": "tether.contracts.results",
    "ToolBudgetSummary": "tether.contracts.results",
    "Signal": "tether.contracts.signal",
    "ChatEvent": "tether.contracts.stream",
    "Finish": "tether.contracts.stream",
    "ModelCaps": "tether.contracts.stream",
    "RawPartEvent": "tether.contracts.stream",
    "StreamError": "tether.contracts.stream",
    "TextDelta": "tether.contracts.stream",
    "ToolCallDelta": "tether.contracts.stream",
    "ToolCallEnd": "tether.contracts.stream",
    "ToolCallStart": "tether.contracts.stream",
    "UsageDelta": "tether.contracts.stream",
    "Usage": "tether.contracts.usage",
}
"""Public name -> the contract module that defines it."""


def __getattr__(name: str) -> Any:
    return _lazy.load(__name__, _EXPORTS, name, globals())


def __dir__() -> list[str]:
    return _lazy.names(_EXPORTS, globals())


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
