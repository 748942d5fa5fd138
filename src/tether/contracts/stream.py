"""Typed events a model stream yields; every stream ends with exactly one `Finish` or `StreamError`."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from tether.contracts.messages import RawPart
from tether.contracts.prices import Price
from tether.contracts.usage import Usage

FinishReason = Literal["stop", "tool_calls", "max_tokens", "refusal", "content_filter", "pause", "other"]
"""Why a reply ended, normalized across providers; what `AgentResult.finish_reason` reports.

`stop`: a complete answer. `tool_calls`: the reply asks for tools. `max_tokens`: cut by the output
limit. `refusal`/`content_filter`: the model or the provider's filter declined. `pause`: the provider
paused a long turn to be continued (Anthropic `pause_turn`). `other`: a reason this adapter does not
know.
"""
StreamEnd = Literal[FinishReason, "cancelled"]
"""A `Finish` reason: a normalized `FinishReason`, or `cancelled` when the signal cut the call."""
ErrorKind = Literal["transport", "rate-limit", "schema-mismatch", "tool", "budget", "terminal", "context-overflow"]
"""`context-overflow`: the provider refused the request as longer than the model's context window (an agent with
a `tether.Context` compacts and asks again once)."""


class TextDelta(BaseModel):
    model_config = ConfigDict(frozen=True)
    type: Literal["text_delta"] = "text_delta"
    text: str


class ToolCallStart(BaseModel):
    model_config = ConfigDict(frozen=True)
    type: Literal["tool_call_start"] = "tool_call_start"
    index: int
    wire_id: str
    name: str


class ToolCallDelta(BaseModel):
    model_config = ConfigDict(frozen=True)
    type: Literal["tool_call_delta"] = "tool_call_delta"
    index: int
    args_delta: str


class ToolCallEnd(BaseModel):
    """A complete tool call; `wire_id` is the provider's id, the engine mints its own."""

    model_config = ConfigDict(frozen=True)
    type: Literal["tool_call_end"] = "tool_call_end"
    index: int
    wire_id: str
    name: str
    args: dict[str, Any]


class RawPartEvent(BaseModel):
    """A provider-specific part (thinking block, encrypted reasoning) to keep in history."""

    model_config = ConfigDict(frozen=True)
    type: Literal["raw_part"] = "raw_part"
    part: RawPart


class UsageDelta(BaseModel):
    """An *increment* of usage for this call (input first, then output as it streams)."""

    model_config = ConfigDict(frozen=True)
    type: Literal["usage"] = "usage"
    usage: Usage


class Finish(BaseModel):
    """Terminal event: the call ended; `usage` is the call's authoritative total."""

    model_config = ConfigDict(frozen=True)
    type: Literal["finish"] = "finish"
    reason: StreamEnd
    usage: Usage


class StreamError(BaseModel):
    """Terminal event: the call failed; `kind` is the retry class (an `AgentError` kind)."""

    model_config = ConfigDict(frozen=True)
    type: Literal["error"] = "error"
    kind: ErrorKind
    message: str
    retryable: bool = False
    retry_after_ms: int | None = None
    status: int | None = None
    usage: Usage | None = None
    reached: bool = True
    """False when the request never reached the provider (the connection or its name lookup failed before a
    byte was sent): nothing can have been billed, and it is no provider call."""


ChatEvent = Annotated[
    TextDelta
    | ToolCallStart
    | ToolCallDelta
    | ToolCallEnd
    | RawPartEvent
    | UsageDelta
    | Finish
    | StreamError,
    Field(discriminator="type"),
]

TERMINAL_EVENT_TYPES = frozenset({"finish", "error"})


class ModelCaps(BaseModel):
    """What a model can do, as the loop and the budget need to know it."""

    model_config = ConfigDict(frozen=True)
    context_window: int = 200_000
    max_output_tokens: int = 8_192
    output_floor: int = 1
    structured_output: Literal["native", "tool", "prompt"] = "tool"
    parallel_tools: bool = True
    efforts: tuple[str, ...] = ()
    price: Price | None = None
