"""An `AgentResult` rebuilt from an agent's journaled entries: the same shape live and on replay."""

from __future__ import annotations

from typing import Any, get_args

from tether.agents.host import OutputSpec
from tether.contracts.entries import JournalEntry
from tether.contracts.results import AgentError, AgentResult, ToolBudgetSummary
from tether.contracts.stream import FinishReason
from tether.contracts.usage import Usage


def restore_result(
    running: JournalEntry, terminal: JournalEntry, out: OutputSpec | None, live: AgentResult | None = None
) -> AgentResult:
    """Rebuild an `AgentResult` from its journaled terminal (the same shape live and on replay)."""
    value = terminal.value if isinstance(terminal.value, dict) else {}
    output = value.get("output")
    if live is not None:
        output = live.output
    elif out is not None and out.model_cls is not None and output is not None and terminal.status == "ok":
        output = out.model_cls.model_validate(output)
    tb = terminal.tool_budget
    return AgentResult(
        status=terminal.status or "error",
        output=output,
        usage=terminal.usage or (live.usage if live else Usage()),
        cost_usd=(terminal.cost_usd or 0.0) + float(terminal.orphaned_usd or 0.0),
        turns=int(value.get("turns") or 0),
        served_by=terminal.served_by,
        finish_reason=_finish_reason(value.get("finish_reason")),
        usage_by_model=terminal.usage_by_model or {},
        error=AgentError.model_validate(terminal.error) if terminal.error else None,
        tool_budget=(live.tool_budget if live else _durable_tool_budget(tb)),
        transcript_ref=terminal.checkpoint_ref,
        artifacts=dict(value.get("artifacts") or {}),
        agent_id=running.agent_id,
        parent_agent_id=running.parent_agent_id,
        replayed=live is None,
    )


def _finish_reason(value: Any) -> FinishReason | None:
    """The journaled finish reason; a value this version does not know reads as `other`."""
    if value is None:
        return None
    return value if value in get_args(FinishReason) else "other"


def _durable_tool_budget(tb: dict[str, Any] | None) -> ToolBudgetSummary | None:
    if not tb:
        return None
    keep = {k: tb.get(k) for k in ("used", "cap", "extensions_granted", "finalization_window_entered")}
    return ToolBudgetSummary(**{k: v for k, v in keep.items() if v is not None})
