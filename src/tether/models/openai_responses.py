"""The OpenAI Responses API adapter over the official `openai` SDK (streaming, `store=False`)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import openai

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
from tether.models._sdk import SdkAdapter, Traits, strict_output, tool_result_text, wire_tool_id
from tether.models._sdk_errors import classify_error
from tether.models._sdk_stream import ToolCallBuffer, UsageMeter

# (model prefix, traits); the first match wins, so longer prefixes come first.
_TRAITS = (
    ("gpt-5", Traits(128_000, "native", ("low", "medium", "high"), 400_000)),
    ("gpt-6", Traits(128_000, "native", ("low", "medium", "high"), 400_000)),
    ("o1-mini", Traits(65_536, "prompt", ("low", "medium", "high"), 128_000)),
    ("o1", Traits(100_000, "native", ("low", "medium", "high"), 200_000)),
    ("o3", Traits(100_000, "native", ("low", "medium", "high"), 200_000)),
    ("o4", Traits(100_000, "native", ("low", "medium", "high"), 200_000)),
    ("gpt-4.1", Traits(32_768, "native", (), 1_047_576)),
    ("gpt-4o", Traits(16_384, "native", (), 128_000)),
)
_INCOMPLETE: dict[str, FinishReason] = {
    "max_output_tokens": "max_tokens",
    "content_filter": "content_filter",
}


def openai_traits(model: str) -> Traits:
    """What the adapter assumes of an OpenAI model family; unknown models get conservative caps."""
    for prefix, traits in _TRAITS:
        if model.startswith(prefix):
            return traits
    return Traits(max_output_tokens=4_096, structured_output="tool", context_window=128_000)


def wire_id(canonical_id: str) -> str:
    """The `call_id` the wire sees for an engine-minted tool-call id."""
    return wire_tool_id("call_", canonical_id)


def _items(message: Message, family: str) -> Iterator[dict[str, Any]]:
    text_role = "user" if message.role == "tool" else message.role
    for part in message.parts:
        if isinstance(part, TextPart) and part.text:
            yield {"role": text_role, "content": part.text}
        elif isinstance(part, ToolCallPart):
            yield {
                "type": "function_call",
                "call_id": wire_id(part.id),
                "name": part.name,
                "arguments": json.dumps(part.args, separators=(",", ":")),
            }
        elif isinstance(part, ToolResultPart):
            yield {
                "type": "function_call_output",
                "call_id": wire_id(part.call_id),
                "output": tool_result_text(part.content, part.is_error),
            }
        elif isinstance(part, RawPart) and part.family == family:
            yield dict(part.data)


def build_input(messages: tuple[Message, ...], family: str) -> list[dict[str, Any]]:
    """Canonical history as Responses API input items (system text goes to `instructions`)."""
    return [item for m in messages if m.role != "system" for item in _items(m, family)]


def tool_choice(choice: str) -> Any:
    if choice in ("auto", "none", "required"):
        return choice
    return {"type": "function", "name": choice}


class OpenAIModel(SdkAdapter[openai.AsyncOpenAI]):
    """`tether.models.openai()`: OpenAI models over the Responses API."""

    id = "openai"
    family = "openai"
    prices_provider = "openai"
    key_env = "OPENAI_API_KEY"
    connection_errors = (openai.APIConnectionError,)

    client_class = openai.AsyncOpenAI
    traits = staticmethod(openai_traits)

    def build_request(self, request: ChatRequest) -> dict[str, Any]:
        """The Responses API body for `request` (without `stream`)."""
        caps = self.caps(request.model)
        body: dict[str, Any] = {
            "model": request.model,
            "input": build_input(request.messages, self.family),
            "max_output_tokens": request.max_output_tokens or caps.max_output_tokens,
            "store": False,
        }
        if request.system:
            body["instructions"] = request.system
        if request.tools:
            body["tools"] = [
                {
                    "type": "function",
                    "name": t.name,
                    "description": t.description,
                    "parameters": t.parameters,
                    "strict": False,
                }
                for t in request.tools
            ]
            body["tool_choice"] = tool_choice(request.tool_choice)
        if request.output_format is not None:
            schema, strict = strict_output(request.output_format)
            name = request.output_format.name
            body["text"] = {"format": {"type": "json_schema", "name": name, "schema": schema, "strict": strict}}
        if caps.efforts:  # a reasoning model: keep its reasoning across stateless turns
            body["include"] = ["reasoning.encrypted_content"]
            if request.effort in caps.efforts:
                body["reasoning"] = {"effort": request.effort}
        return body

    async def open_stream(self, body: dict[str, Any]) -> AsyncIterator[Any]:
        return await self.client().responses.create(stream=True, **body)  # type: ignore[no-any-return]

    def translator(self) -> _Translator:
        return _Translator(self.family)


class _Translator:
    """Responses API stream events -> tether events."""

    def __init__(self, family: str) -> None:
        self.family = family
        self.meter = UsageMeter()
        self.tools = ToolCallBuffer()
        self.refused = False

    def feed(self, item: Any) -> Iterator[ChatEvent]:
        kind = item.type
        if kind == "response.output_text.delta":
            if item.delta:
                yield TextDelta(text=item.delta)
        elif kind == "response.refusal.delta":
            self.refused = True
            if item.delta:
                yield TextDelta(text=item.delta)
        elif kind == "response.output_item.added" and item.item.type == "function_call":
            yield self.tools.start(
                item.item.id or item.output_index, item.item.call_id, item.item.name
            )
        elif kind == "response.function_call_arguments.delta":
            event = self.tools.delta(item.item_id, item.delta)
            if event is not None:
                yield event
        elif kind == "response.output_item.done":
            yield from self._item_done(item.item, item.output_index)
        elif kind in ("response.completed", "response.incomplete"):
            yield from self._usage(item.response.usage)
            yield self._finish(item.response)
        elif kind == "response.failed":
            yield from self._usage(item.response.usage)
            error = item.response.error
            yield self._error(getattr(error, "code", None), getattr(error, "message", "") or "")
        elif kind == "error":
            yield self._error(item.code, item.message)

    def at_end(self) -> ChatEvent:
        return StreamError(
            kind="transport",
            message="openai stream ended before response.completed",
            retryable=True,
            usage=self.meter.partial(),
        )

    def _item_done(self, item: Any, output_index: int) -> Iterator[ChatEvent]:
        if item.type == "function_call":
            key = item.id if item.id in self.tools else output_index
            if key not in self.tools:
                yield self.tools.start(key, item.call_id, item.name)
            end = self.tools.end(key, item.arguments)
            if end is not None:
                yield end
        elif item.type == "reasoning":
            data = item.model_dump(mode="json", exclude_none=True)
            yield RawPartEvent(part=RawPart(family=self.family, data=data))

    def _usage(self, usage: Any) -> Iterator[ChatEvent]:
        if usage is None:
            return
        self.meter.reported = True
        details = getattr(usage, "input_tokens_details", None)
        out_details = getattr(usage, "output_tokens_details", None)
        inc = self.meter.advance(
            input=usage.input_tokens,
            output=usage.output_tokens,
            cache_read=getattr(details, "cached_tokens", None),
            cache_write=getattr(details, "cache_write_tokens", None),
            reasoning=getattr(out_details, "reasoning_tokens", None),
        )
        if inc is not None:
            yield inc

    def _finish(self, response: Any) -> ChatEvent:
        reason: FinishReason = "stop"
        details = getattr(response, "incomplete_details", None)
        if response.status == "incomplete":
            reason = _INCOMPLETE.get(getattr(details, "reason", None) or "", "other")
        elif self.tools.ended:
            reason = "tool_calls"
        elif self.refused:
            reason = "refusal"
        return Finish(reason=reason, usage=self.meter.total)

    def _error(self, code: str | None, message: str) -> StreamError:
        error = classify_error("openai", None, kind=code, message=message, key_env="OPENAI_API_KEY")
        return error.model_copy(update={"usage": self.meter.partial()})


