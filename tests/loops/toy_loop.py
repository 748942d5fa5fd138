"""A toy foreign agent loop written only against tether's public seam (`tether.loops`, docs/internals.md).

It asks the model until it answers in text, running the tools the model calls in between. Everything
durable comes from the `LoopSession`: a turn an earlier segment paid for is served from the checkpoint, a
tool result recorded before a crash is not run again, and every turn is sized to the run's ceiling.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import tether
from tether.loops import LoopSession, Message, RecordedTool, ToolResultPart, ToolSpec

ToolFn = Callable[..., Awaitable[Any]]


class ToolLoop:
    """`ctx.agent(prompt, loop=ToolLoop({...}))`: tools by name, each an `async def` of the model's arguments."""

    def __init__(self, tools: dict[str, ToolFn], *, idempotent: bool = False) -> None:
        self.tools, self.idempotent = tools, idempotent

    async def run(self, session: LoopSession) -> tether.AgentResult:
        specs = [ToolSpec(name=name, description=fn.__doc__ or "") for name, fn in self.tools.items()]
        history = [Message.text("user", session.prompt)]
        while True:
            turn = await session.model_turn(history, system=session.system, tools=specs)
            history.append(turn.message)
            if not turn.message.tool_calls:
                return session.result("ok", output=turn.message.text_content)
            results = []
            for call in turn.message.tool_calls:
                recorded = session.recorded_tool(call.id)  # a result checkpointed before a crash: not run again
                if recorded is None:
                    value = await session.run_tool(call.id, call.name, call.args, self._performer(call.name, call.args),
                                                   idempotent=self.idempotent)
                    recorded = value if isinstance(value, RecordedTool) else RecordedTool("value", value)
                    await session.record_tool(call.id, call.name, recorded)
                results.append(ToolResultPart(call_id=call.id, name=call.name, content=recorded.dump()))
            history.append(Message(role="tool", parts=tuple(results)))

    def _performer(self, name: str, args: dict[str, Any]) -> Callable[[str], Awaitable[Any]]:
        async def perform(idempotency_key: str) -> Any:
            return await self.tools[name](**args)

        return perform
