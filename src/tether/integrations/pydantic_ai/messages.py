"""pydantic-ai's messages as tether's canonical conversation, and a tether reply as a pydantic-ai response.

A response tether produced carries its canonical message in `ModelResponse.metadata["tether"]` (metadata is
never sent to a model), so a later history gives back exactly the message the journal holds: the prefix a
resume matches on, and raw parts such as signed thinking blocks, which pydantic-ai's parts cannot carry.
"""

from __future__ import annotations

from collections.abc import Sequence
from decimal import Decimal
from typing import Any

from pydantic_ai import messages as pai
from pydantic_ai.usage import RequestUsage

from tether.contracts.errors import ConfigError
from tether.contracts.messages import Message, TextPart, ToolCallPart, ToolResultPart
from tether.contracts.stream import FinishReason
from tether.loops import LoopTurn

METADATA_KEY = "tether"
"""Where a response tether produced keeps its canonical message."""

_FINISH: dict[FinishReason, pai.FinishReason] = {
    "stop": "stop", "tool_calls": "tool_call", "max_tokens": "length", "content_filter": "content_filter",
    "refusal": "content_filter",
}


def to_history(messages: Sequence[pai.ModelMessage]) -> tuple[list[str], list[Message]]:
    """(the leading system prompts, the conversation) of a pydantic-ai history, as a tether model is sent it.

    Tool returns become one `tool` message per request (errors, retries and denials as error results);
    retry feedback and later system prompts become user text; instruction and tool-availability parts are
    not conversation (the instructions reach the model as the system prompt).
    """
    system: list[str] = []
    out: list[Message] = []
    for message in messages:
        if isinstance(message, pai.ModelResponse):
            reply = response_message(message)
            if reply.parts:
                out.append(reply)
            continue
        results: list[ToolResultPart] = []
        texts: list[str] = []
        for part in message.parts:
            if isinstance(part, pai.SystemPromptPart):
                (system if not out and not texts else texts).append(part.content)
            elif isinstance(part, pai.UserPromptPart):
                texts.append(_user_text(part))
            elif isinstance(part, pai.BaseToolReturnPart):
                results.append(ToolResultPart(call_id=part.tool_call_id, name=part.tool_name,
                                              content=part.model_response_str(), is_error=part.outcome != "success"))
            elif isinstance(part, pai.RetryFeedbackPart):
                texts.append(part.model_response())
        if results:
            out.append(Message(role="tool", parts=tuple(results)))
        if texts:
            out.append(Message.text("user", "\n\n".join(texts)))
    return system, out


def response_message(response: pai.ModelResponse) -> Message:
    """The canonical message of a response: the journaled one when tether produced it."""
    kept = (response.metadata or {}).get(METADATA_KEY)
    if isinstance(kept, dict):
        return Message.model_validate(kept)
    parts: list[TextPart | ToolCallPart] = []
    for part in response.parts:  # a response from elsewhere (a history passed in): its text and tool calls
        if isinstance(part, pai.TextPart) and part.content:
            parts.append(TextPart(text=part.content))
        elif isinstance(part, pai.ToolCallPart):
            parts.append(ToolCallPart(id=part.tool_call_id, name=part.tool_name, args=part.args_as_dict()))
    return Message(role="assistant", parts=tuple(parts))


def to_response(turn: LoopTurn, model_name: str) -> pai.ModelResponse:
    """A tether reply as the `ModelResponse` pydantic-ai's graph continues from."""
    parts: list[pai.ModelResponsePart] = []
    for part in turn.message.parts:
        if isinstance(part, TextPart) and part.text:
            parts.append(pai.TextPart(content=part.text))
        elif isinstance(part, ToolCallPart):
            parts.append(pai.ToolCallPart(tool_name=part.name, args=dict(part.args), tool_call_id=part.id))
    u = turn.usage
    details = {"reasoning_tokens": u.reasoning_tokens} if u.reasoning_tokens else {}
    usage = RequestUsage(
        input_tokens=u.input_tokens, output_tokens=u.output_tokens, cache_read_tokens=u.cache_read_tokens,
        cache_write_tokens=u.cache_write_tokens, details=details,
    )
    if turn.cost_usd is not None:  # tether's price, so pydantic-ai's `usage.cost` and `cost_limit` agree with it
        usage.cost = Decimal(repr(turn.cost_usd))
    meta: dict[str, Any] = {METADATA_KEY: turn.message.model_dump(mode="json")}
    return pai.ModelResponse(
        parts=parts, usage=usage, model_name=model_name, provider_name="tether", metadata=meta,
        finish_reason=_FINISH.get(turn.finish_reason) if turn.finish_reason is not None else None,
    )


def _user_text(part: pai.UserPromptPart) -> str:
    if isinstance(part.content, str):
        return part.content
    texts: list[str] = []
    for item in part.content:
        if isinstance(item, str):
            texts.append(item)
        elif isinstance(item, pai.TextContent):
            texts.append(item.content)
        else:
            raise ConfigError(
                f"tether's pydantic-ai bridge sends text prompts only; this prompt holds a {type(item).__name__}. "
                "Pass the text, or run the agent on its own pydantic-ai model outside tether.",
                part=type(item).__name__,
            )
    return "\n".join(texts)
