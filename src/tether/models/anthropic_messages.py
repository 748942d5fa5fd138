"""The Anthropic Messages API adapter over the official `anthropic` SDK (SDK retries off)."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Iterator
from typing import Any

import anthropic

from tether.contracts.messages import (
    ChatRequest,
    Message,
    RawPart,
    TextPart,
    ToolCallPart,
    ToolResultPart,
)
from tether.contracts.stream import (
    ChatEvent,
    Finish,
    FinishReason,
    RawPartEvent,
    StreamError,
    TextDelta,
)
from tether.models._sdk import SdkAdapter, Traits, closed_schema, user_and_assistant_turns, wire_tool_id
from tether.models._sdk_stream import ToolCallBuffer, UsageMeter, parse_args

_STOP_REASONS: dict[str, FinishReason] = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "pause_turn": "pause",
    "tool_use": "tool_calls",
    "max_tokens": "max_tokens",
    "model_context_window_exceeded": "max_tokens",
    "refusal": "refusal",
}
_VERSION = re.compile(
    r"claude-(?:(?P<tier>[a-z]+)-(?P<major>\d+)(?:-(?P<minor>\d)(?!\d))?"
    r"|(?P<omajor>\d+)(?:-(?P<ominor>\d)(?!\d))?-(?P<otier>[a-z]+))"
)


def anthropic_traits(model: str) -> Traits:
    """Output cap, structured-output tier and efforts from the model's version (conservative)."""
    m = _VERSION.search(model)
    if m is None:
        return Traits(context_window=200_000)
    tier = m.group("tier") or m.group("otier")
    version = (
        int(m.group("major") or m.group("omajor")),
        int(m.group("minor") or m.group("ominor") or 0),
    )
    if version < (3, 5):
        out = 4_096
    elif version < (3, 7):
        out = 8_192
    elif tier == "opus" and version < (4, 5):
        out = 32_000
    else:
        out = 64_000
    native = version >= (4, 5) or (tier == "opus" and version >= (4, 1))
    effort = version >= (4, 6) or (tier == "opus" and version >= (4, 5))
    return Traits(
        max_output_tokens=out,
        structured_output="native" if native else "tool",
        efforts=("low", "medium", "high") if effort else (),
        context_window=200_000,
    )


def wire_id(canonical_id: str) -> str:
    """The `toolu_…` id the wire sees for an engine-minted tool-call id."""
    return wire_tool_id("toolu_", canonical_id)


def _block(part: Any, family: str) -> dict[str, Any] | None:
    if isinstance(part, TextPart):
        return {"type": "text", "text": part.text} if part.text else None
    if isinstance(part, ToolCallPart):
        return {"type": "tool_use", "id": wire_id(part.id), "name": part.name, "input": part.args}
    if isinstance(part, ToolResultPart):
        block: dict[str, Any] = {
            "type": "tool_result",
            "tool_use_id": wire_id(part.call_id),
            "content": part.content,
        }
        if part.is_error:
            block["is_error"] = True
        return block
    if isinstance(part, RawPart) and part.family == family:
        return dict(part.data)
    return None  # raw parts of another provider never cross over


def build_messages(messages: tuple[Message, ...], family: str) -> list[dict[str, Any]]:
    """Canonical history as Messages API turns; tool results ride in user turns."""
    return user_and_assistant_turns(messages, lambda p: _block(p, family), lambda b: b.get("type") == "tool_result")


def tool_choice(choice: str) -> dict[str, Any]:
    if choice in ("auto", "none"):
        return {"type": choice}
    if choice == "required":
        return {"type": "any"}
    return {"type": "tool", "name": choice}


class AnthropicModel(SdkAdapter[anthropic.AsyncAnthropic]):
    """`tether.models.anthropic()`: Claude over the Messages API."""

    id = "anthropic"
    family = "anthropic"
    prices_provider = "anthropic"
    key_env = "ANTHROPIC_API_KEY"
    connection_errors = (anthropic.APIConnectionError,)

    client_class = anthropic.AsyncAnthropic
    traits = staticmethod(anthropic_traits)

    def build_request(self, request: ChatRequest) -> dict[str, Any]:
        """The Messages API body for `request` (without `stream`)."""
        caps = self.caps(request.model)
        body: dict[str, Any] = {
            "model": request.model,
            "max_tokens": request.max_output_tokens or caps.max_output_tokens,
            "messages": build_messages(request.messages, self.family),
        }
        if request.system:
            body["system"] = request.system
        if request.tools:
            body["tools"] = [
                {
                    "name": t.name,
                    **({"description": t.description} if t.description else {}),
                    "input_schema": t.parameters,
                }
                for t in request.tools
            ]
            body["tool_choice"] = tool_choice(request.tool_choice)
        output: dict[str, Any] = {}
        if request.output_format is not None:
            output["format"] = {"type": "json_schema", "schema": closed_schema(request.output_format.schema_)}
        if request.effort and request.effort in caps.efforts:
            output["effort"] = request.effort
        if output:
            body["output_config"] = output
        return body

    async def open_stream(self, body: dict[str, Any]) -> AsyncIterator[Any]:
        return await self.client().messages.create(stream=True, **body)  # type: ignore[no-any-return]

    def translator(self) -> _Translator:
        return _Translator(self.family)


class _Translator:
    """Messages API stream events -> tether events."""

    def __init__(self, family: str) -> None:
        self.family = family
        self.meter = UsageMeter()
        self.tools = ToolCallBuffer()
        self.blocks: dict[int, dict[str, Any]] = {}
        self.inputs: dict[int, str] = {}  # streamed `input` of server tool blocks
        self.reason: FinishReason | None = None

    def feed(self, item: Any) -> Iterator[ChatEvent]:
        kind = item.type
        if kind == "message_start":
            yield from self._usage(item.message.usage)
        elif kind == "content_block_start":
            yield from self._start(item.index, item.content_block)
        elif kind == "content_block_delta":
            yield from self._delta(item.index, item.delta)
        elif kind == "content_block_stop":
            yield from self._stop(item.index)
        elif kind == "message_delta":
            if item.delta.stop_reason is not None:
                self.reason = _STOP_REASONS.get(item.delta.stop_reason, "other")
            self.meter.reported = True  # message_delta usage is cumulative: the call's final count
            yield from self._usage(item.usage)
        elif kind == "message_stop":
            yield self.at_end()

    def at_end(self) -> ChatEvent:
        if self.reason is None:
            return StreamError(
                kind="transport",
                message="anthropic stream ended before message_stop",
                retryable=True,
                usage=self.meter.partial(),
            )
        return Finish(reason=self.reason, usage=self.meter.total)

    def _usage(self, usage: Any) -> Iterator[ChatEvent]:
        read = usage.cache_read_input_tokens
        write = usage.cache_creation_input_tokens
        base = usage.input_tokens
        total_in = None if base is None else base + (read or 0) + (write or 0)
        details = getattr(usage, "output_tokens_details", None)
        inc = self.meter.advance(
            input=total_in,
            output=usage.output_tokens,
            cache_read=read,
            cache_write=write,
            reasoning=getattr(details, "thinking_tokens", None),
        )
        if inc is not None:
            yield inc

    def _start(self, index: int, block: Any) -> Iterator[ChatEvent]:
        if block.type == "tool_use":
            yield self.tools.start(index, block.id, block.name)
        elif block.type == "text":
            if block.text:
                yield TextDelta(text=block.text)
        elif block.type == "thinking":
            self.blocks[index] = {
                "type": "thinking",
                "thinking": getattr(block, "thinking", None) or "",
                "signature": getattr(block, "signature", None) or "",
            }
        elif block.type == "redacted_thinking":
            self.blocks[index] = {"type": "redacted_thinking", "data": block.data}
        else:  # server tool use and results: kept as sent, so a paused turn can be continued
            self.blocks[index] = block.model_dump(mode="json", exclude_none=True)

    def _delta(self, index: int, delta: Any) -> Iterator[ChatEvent]:
        if delta.type == "text_delta":
            if delta.text:
                yield TextDelta(text=delta.text)
        elif delta.type == "input_json_delta":
            if index in self.blocks:
                self.inputs[index] = self.inputs.get(index, "") + delta.partial_json
            event = self.tools.delta(index, delta.partial_json)
            if event is not None:
                yield event
        elif delta.type == "thinking_delta" and index in self.blocks:
            self.blocks[index]["thinking"] += delta.thinking
        elif delta.type == "signature_delta" and index in self.blocks:
            self.blocks[index]["signature"] += delta.signature

    def _stop(self, index: int) -> Iterator[ChatEvent]:
        if index in self.tools:
            end = self.tools.end(index)
            if end is not None:
                yield end
        elif index in self.blocks:
            block = self.blocks.pop(index)
            if index in self.inputs:
                block["input"] = parse_args(self.inputs.pop(index)) or {}
            yield RawPartEvent(part=RawPart(family=self.family, data=block))


