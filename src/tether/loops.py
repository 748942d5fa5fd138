"""The foreign-loop seam, public: run your own (or another framework's) agent loop as a tether agent invocation.

    class MyLoop:
        async def run(self, session: tether.LoopSession) -> tether.AgentResult:
            turn = await session.model_turn([Message.text("user", session.prompt)])
            return session.result("ok", output=turn.message.text_content)

    result = await ctx.agent("Summarize the report", loop=MyLoop(), full=True)

`ctx.agent(..., loop=...)` keeps everything else tether does for an agent (identity and replay, admission,
ceilings, checkpoints, the terminal); the loop reaches a provider and its tools only through the
`LoopSession`. docs/internals.md ("Extension seams") has the whole protocol and a worked example.
"""

from tether.contracts.loops import AgentLoop, LoopSession, LoopTurn, OutputSpec, RecordedTool, TurnStopped, find_stop
from tether.contracts.messages import Message, TextPart, ToolCallPart, ToolResultPart, ToolSpec


def in_workflow() -> bool:
    """Whether the calling task runs inside a tether workflow (its body, an agent's tool, a step).

    For integrations that behave one way inside a run and another outside it (a durable wrapper that must
    refuse to bypass the journal when it was not handed `ctx`)."""
    from tether.engine.frame import CURRENT_FRAME  # (the engine loads only when an integration asks)

    return CURRENT_FRAME.get(None) is not None


__all__ = [
    "AgentLoop",
    "LoopSession",
    "LoopTurn",
    "Message",
    "OutputSpec",
    "RecordedTool",
    "TextPart",
    "ToolCallPart",
    "ToolResultPart",
    "ToolSpec",
    "TurnStopped",
    "find_stop",
    "in_workflow",
]
