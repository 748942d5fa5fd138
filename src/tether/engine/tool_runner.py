"""Dispatches validated tool calls: in this process, or through an isolated executor and the ledger."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from tether.contracts.errors import TetherError
from tether.contracts.protocols import ExecRequest
from tether.tools.executors import get_executor
from tether.tools.ledger import EffectLedger, idempotency_key, orphans

if TYPE_CHECKING:
    from tether.engine.segment import Segment
    from tether.tools.definition import Tool


class ToolExecutionError(TetherError):
    """A tool dispatched through an executor ended in error or timeout (becomes an error tool result)."""

    code = "tool-execution"


class ToolRunner:
    """The engine's tool dispatch. Out-of-process executors write intent/outcome ledger rows.

    On resume, a call whose intent has no outcome (an orphan) is dispatched again with the same
    idempotency key when the tool is `idempotent`; otherwise it is not re-run and the model is told
    the earlier attempt's effect is unknown.
    """

    async def run(
        self, seg: Segment, tool: Tool, args: dict[str, Any], *, agent_seq: int, ordinal: int, call_id: str,
        cwd: str | None = None,
    ) -> Any:
        if tool.executor in (None, "inprocess") and cwd is None:
            call = tool.call(args)
            return await (asyncio.wait_for(call, tool.timeout_s) if tool.timeout_s else call)
        key = idempotency_key(seg.run_id, agent_seq, ordinal, tool.name, args)
        orphaned = [r for r in await orphans(seg.store, seg.run_id) if r.idempotency_key == key]
        if orphaned and not tool.idempotent:
            return (
                f"[effect unknown] an earlier attempt of {tool.name!r} (attempt {orphaned[-1].attempt_id}) was "
                "interrupted before it reported; it was not run again because the tool is not idempotent. "
                "Check its effect before retrying."
            )
        executor = get_executor(tool.executor or "inprocess")
        request = ExecRequest(
            tool=tool.name, target=tool.target, args=args, timeout_s=tool.timeout_s, idempotency_key=key, cwd=cwd
        )
        ledger = EffectLedger(seg.store, seg.run_id, clock=seg.engine.clock)
        result = await ledger.dispatch(executor, request, tool, span_id=f"agent-{agent_seq}:{call_id}")
        if result.outcome == "ok":
            return result.value
        raise ToolExecutionError(
            f"tool {tool.name!r} ended {result.outcome}: {result.error or ''}".strip(),
            outcome=result.outcome, exit_code=result.exit_code, signal=result.signal,
        )
