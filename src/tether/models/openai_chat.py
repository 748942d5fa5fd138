"""A Chat Completions adapter for Ollama, vLLM and gateways, over the official `openai` SDK."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import openai

from tether.contracts.errors import ConfigError
from tether.contracts.messages import ChatRequest, Message, ToolCallPart, ToolResultPart
from tether.contracts.prices import Price
from tether.contracts.stream import (
    ChatEvent,
    Finish,
    FinishReason,
    ModelCaps,
    StreamError,
    TextDelta,
)
from tether.models._sdk import CapsOverride, SdkAdapter, Traits, strict_output, tool_result_text, wire_tool_id
from tether.models._sdk_stream import ToolCallBuffer, UsageMeter

_FINISH: dict[str, FinishReason] = {
    "stop": "stop",
    "length": "max_tokens",
    "tool_calls": "tool_calls",
    "function_call": "tool_calls",
    "content_filter": "content_filter",
}
_FREE = Price.free()
# Servers behind this adapter vary widely: assume little (prompted JSON, small windows).
DEFAULT_TRAITS = Traits(max_output_tokens=4_096, structured_output="prompt", context_window=32_768)


def wire_id(canonical_id: str) -> str:
    """The `tool_call_id` the wire sees for an engine-minted tool-call id."""
    return wire_tool_id("call_", canonical_id)


def _turns(message: Message) -> Iterator[dict[str, Any]]:
    text = message.text_content
    calls = [
        {
            "id": wire_id(p.id),
            "type": "function",
            "function": {"name": p.name, "arguments": json.dumps(p.args, separators=(",", ":"))},
        }
        for p in message.parts
        if isinstance(p, ToolCallPart)
    ]
    if message.role != "tool" and (text or calls):
        turn: dict[str, Any] = {"role": message.role, "content": text or None}
        if calls:
            turn["tool_calls"] = calls
        yield turn
    for part in message.parts:
        if isinstance(part, ToolResultPart):
            yield {
                "role": "tool",
                "tool_call_id": wire_id(part.call_id),
                "content": tool_result_text(part.content, part.is_error),
            }
    if message.role == "tool" and text:
        yield {"role": "user", "content": text}


def build_messages(request: ChatRequest) -> list[dict[str, Any]]:
    """Canonical history as Chat Completions messages; raw provider parts are not sent."""
    out: list[dict[str, Any]] = []
    if request.system:
        out.append({"role": "system", "content": request.system})
    for message in request.messages:
        if message.role != "system":
            out.extend(_turns(message))
    return out


def tool_choice(choice: str) -> Any:
    if choice in ("auto", "none", "required"):
        return choice
    return {"type": "function", "function": {"name": choice}}


class OpenAICompatibleModel(SdkAdapter[openai.AsyncOpenAI]):
    """`tether.models.openai_compatible(id, base_url)`: any Chat Completions server."""

    family = "openai-compatible"
    connection_errors = (openai.APIConnectionError,)
    client_class = openai.AsyncOpenAI

    def __init__(
        self,
        id: str,
        base_url: str,
        api_key: str | None = None,
        client: openai.AsyncOpenAI | None = None,
        model_caps: CapsOverride = None,
        price_provider: str | None = None,
        local: bool = False,
    ) -> None:
        """`price_provider` names the genai-prices provider whose rows price this server's models
        (e.g. "groq", "openrouter"); by default the adapter id is tried as one. `local=True` says the server
        sends no bill (Ollama, vLLM, llama.cpp on your own hardware): every model it serves is priced
        `Price.free()`, unless `model_caps` gives a model a price of its own."""
        if local and price_provider is not None:
            raise ConfigError(
                f"openai_compatible({id!r}): local=True prices every model at 0 USD, price_provider="
                f"{price_provider!r} prices them from genai-prices; pass one of the two.",
                adapter=id,
            )
        # Without `api_key` a placeholder is sent: the SDK would otherwise forward OPENAI_API_KEY.
        super().__init__(api_key=api_key or "unused", base_url=base_url, client=client, model_caps=model_caps)
        self.id = id
        self.local = local
        self.prices_provider = None if local else price_provider or id

    def traits(self, model: str) -> Traits:
        return DEFAULT_TRAITS

    def caps(self, model: str) -> ModelCaps:
        caps = super().caps(model)
        if self.local and caps.price != _FREE and not self._priced_by_override(model):
            caps = self._caps[model] = caps.model_copy(update={"price": _FREE})
        return caps

    def _priced_by_override(self, model: str) -> bool:
        override = self._overrides
        given = override if isinstance(override, ModelCaps) else (override or {}).get(model)
        return given is not None and given.price is not None

    def build_request(self, request: ChatRequest) -> dict[str, Any]:
        """The Chat Completions body for `request` (without `stream`)."""
        caps = self.caps(request.model)
        body: dict[str, Any] = {
            "model": request.model,
            "messages": build_messages(request),
            "max_tokens": request.max_output_tokens or caps.max_output_tokens,
            "stream_options": {"include_usage": True},
        }
        if request.tools:
            body["tools"] = [
                {
                    "type": "function",
                    "function": {
                        "name": t.name,
                        "description": t.description,
                        "parameters": t.parameters,
                    },
                }
                for t in request.tools
            ]
            body["tool_choice"] = tool_choice(request.tool_choice)
        if request.output_format is not None:
            schema, strict = strict_output(request.output_format)
            name = request.output_format.name
            body["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": name, "schema": schema, "strict": strict},
            }
        if request.effort and request.effort in caps.efforts:
            body["reasoning_effort"] = request.effort
        return body

    async def open_stream(self, body: dict[str, Any]) -> AsyncIterator[Any]:
        return await self.client().chat.completions.create(stream=True, **body)  # type: ignore[no-any-return]

    def translator(self) -> _Translator:
        return _Translator(self.id)


class _Translator:
    """Chat Completions chunks -> tether events; usage arrives in the last chunk."""

    def __init__(self, adapter: str) -> None:
        self.adapter = adapter
        self.meter = UsageMeter()
        self.tools = ToolCallBuffer()
        self.reason: FinishReason | None = None
        self.refused = False

    def feed(self, chunk: Any) -> Iterator[ChatEvent]:
        if chunk.usage is not None:
            yield from self._usage(chunk.usage)
        for choice in chunk.choices or ():
            if choice.index != 0:
                continue
            delta = choice.delta
            if delta is not None:
                yield from self._delta(delta)
            if choice.finish_reason is not None:
                self.reason = _FINISH.get(choice.finish_reason, "other")
                yield from self.tools.end_all()

    def at_end(self) -> ChatEvent:
        if self.reason is None:
            return StreamError(
                kind="transport",
                message=f"{self.adapter} stream ended without a finish_reason",
                retryable=True,
                usage=self.meter.partial(),
            )
        reason = self.reason
        if self.tools.ended and reason == "stop":  # some servers say "stop" after tool calls
            reason = "tool_calls"
        elif self.refused and reason == "stop":
            reason = "refusal"
        usage = self.meter.total
        if not self.meter.reported:
            usage = usage.model_copy(update={"approximate": True})
        return Finish(reason=reason, usage=usage)

    def _delta(self, delta: Any) -> Iterator[ChatEvent]:
        if delta.content:
            yield TextDelta(text=delta.content)
        if getattr(delta, "refusal", None):
            self.refused = True
            yield TextDelta(text=delta.refusal)
        for call in delta.tool_calls or ():
            fn = call.function
            if call.index not in self.tools:
                wire = call.id or f"call_{call.index}"
                yield self.tools.start(call.index, wire, (fn.name if fn else None) or "")
            if fn is not None and fn.arguments:
                event = self.tools.delta(call.index, fn.arguments)
                if event is not None:
                    yield event

    def _usage(self, usage: Any) -> Iterator[ChatEvent]:
        self.meter.reported = True
        details = getattr(usage, "prompt_tokens_details", None)
        out_details = getattr(usage, "completion_tokens_details", None)
        inc = self.meter.advance(
            input=usage.prompt_tokens,
            output=usage.completion_tokens,
            cache_read=getattr(details, "cached_tokens", None),
            cache_write=getattr(details, "cache_write_tokens", None),
            reasoning=getattr(out_details, "reasoning_tokens", None),
        )
        if inc is not None:
            yield inc


