"""Dispatches validated tool calls: in this process, or through an isolated executor and the ledger."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tether.engine.segment import Segment
    from tether.tools.definition import Tool


class ToolRunner:
    """The engine's tool dispatch; out-of-process executors write intent/outcome ledger rows."""

    async def run(
        self, seg: Segment, tool: Tool, args: dict[str, Any], *, agent_seq: int, ordinal: int, call_id: str
    ) -> Any:
        call = tool.call(args)
        if tool.timeout_s:
            return await asyncio.wait_for(call, tool.timeout_s)
        return await call
