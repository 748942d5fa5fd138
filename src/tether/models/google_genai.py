"""The Gemini adapter over the official `google-genai` SDK: the Gemini API, or Vertex AI with `vertexai=True`."""

from __future__ import annotations

import base64
import importlib
import json
import os
import re
from collections.abc import AsyncIterator, Iterator, Mapping
from typing import Any

import google.genai as genai  # `from google import genai` hides a missing SDK behind the `google` namespace
from google.genai import errors as genai_errors
from google.genai import types as genai_types

from tether.contracts.errors import ConfigError
from tether.contracts.messages import ChatRequest, Message, OutputFormat, RawPart, TextPart, ToolResultPart
from tether.contracts.signal import Signal
from tether.contracts.stream import ChatEvent, Finish, FinishReason, ModelCaps, RawPartEvent, StreamError, TextDelta
from tether.contracts.usage import Usage
from tether.journal.canonical import canonical_json
from tether.models._sdk import CapsOverride, Traits, build_caps, wire_tool_id
from tether.models._sdk_errors import classify_error, error_from_exception, parse_retry_after, redact_secrets
from tether.models._sdk_stream import ToolCallBuffer, UsageMeter, drive

KEY_ENVS = ("GEMINI_API_KEY", "GOOGLE_API_KEY")
PROJECT_ENV = "GOOGLE_CLOUD_PROJECT"
_FILTERED = (
    *("SAFETY", "RECITATION", "BLOCKLIST", "PROHIBITED_CONTENT", "SPII", "MODEL_ARMOR"),
    *("IMAGE_SAFETY", "IMAGE_PROHIBITED_CONTENT", "IMAGE_RECITATION"),
)
_FINISH: dict[str, FinishReason] = {
    "STOP": "stop", "MAX_TOKENS": "max_tokens", **dict.fromkeys(_FILTERED, "content_filter"),
}
_VERSION = re.compile(r"gemini-(\d+)(?:\.(\d+))?")
# Gemini 2.5 takes a thinking budget in tokens; Gemini 3 takes a level.
_BUDGETS = {"low": 1_024, "medium": 8_192, "high": 24_576}
_SETTLED_AT_END = frozenset({"input_tokens", "cache_read_tokens"})
"""Usage counts Gemini revises down in its last chunk: not metered live, settled by the terminal's total."""
_CONTEXT_HINTS = ("input token count", "exceeds the maximum number of tokens", "context window", "too long")


def _version(model: str) -> tuple[int, int] | None:
    m = _VERSION.search(model)
    return (int(m.group(1)), int(m.group(2) or 0)) if m else None


def google_traits(model: str) -> Traits:
    """Output cap, structured-output tier and efforts from the Gemini version; other models get little."""
    version = _version(model)
    if version is None:  # Gemma and friends: no function calling or schema mode on the Gemini API
        return Traits(max_output_tokens=8_192, structured_output="prompt", context_window=32_768)
    if version >= (3, 0):
        return Traits(65_536, "native", ("low", "high"), 1_048_576)
    if version >= (2, 5):
        return Traits(65_536, "native", ("low", "medium", "high"), 1_048_576)
    if version >= (2, 0):
        return Traits(8_192, "native", (), 1_048_576)
    return Traits(8_192, "tool", (), 1_048_576)


def thinks(model: str) -> bool:
    """Gemini 2.5 and later think; their thought summaries are asked for so they can be kept."""
    version = _version(model)
    return version is not None and version >= (2, 5)


def wire_id(canonical_id: str) -> str:
    """The function-call `id` the wire sees for an engine-minted tool-call id."""
    return wire_tool_id("", canonical_id)


def _signature(data: Mapping[str, Any]) -> dict[str, Any]:
    sig = data.get("thoughtSignature")
    return {"thought_signature": base64.b64decode(sig)} if isinstance(sig, str) and sig else {}


def _model_parts(message: Message, family: str) -> list[dict[str, Any]]:
    """An assistant turn: thought parts, the text, then the calls, each with the signature it came with."""
    thoughts: list[dict[str, Any]] = []
    text_sig: dict[str, Any] = {}
    call_sigs: dict[int, dict[str, Any]] = {}
    for part in message.parts:
        if not isinstance(part, RawPart) or part.family != family:
            continue
        data = part.data
        if data.get("thought"):
            thoughts.append({"text": data.get("text", ""), "thought": True, **_signature(data)})
        elif data.get("part") == "text":
            text_sig = text_sig or _signature(data)
        elif data.get("part") == "functionCall" and isinstance(data.get("call"), int):
            call_sigs[data["call"]] = _signature(data)
    parts = thoughts
    if message.text_content:
        parts.append({"text": message.text_content, **text_sig})
    for n, call in enumerate(message.tool_calls):
        fc = {"name": call.name, "args": call.args, "id": wire_id(call.id)}
        parts.append({"function_call": fc, **call_sigs.get(n, {})})
    return parts


def _user_parts(message: Message) -> list[dict[str, Any]]:
    parts: list[dict[str, Any]] = []
    for part in message.parts:
        if isinstance(part, TextPart) and part.text:
            parts.append({"text": part.text})
        elif isinstance(part, ToolResultPart):
            response = {"error" if part.is_error else "output": part.content}
            parts.append({"function_response": {"name": part.name, "id": wire_id(part.call_id), "response": response}})
    return parts


def build_contents(messages: tuple[Message, ...], family: str) -> list[dict[str, Any]]:
    """Canonical history as Gemini contents: `model` turns and `user` turns (tool results ride in these)."""
    contents: list[dict[str, Any]] = []
    for message in messages:
        if message.role == "system":
            continue
        role = "model" if message.role == "assistant" else "user"
        parts = _model_parts(message, family) if role == "model" else _user_parts(message)
        if not parts:
            continue
        if contents and contents[-1]["role"] == role:
            contents[-1]["parts"].extend(parts)
        else:
            contents.append({"role": role, "parts": parts})
    return contents


def tool_config(choice: str) -> dict[str, Any]:
    if choice in ("auto", "none"):
        return {"function_calling_config": {"mode": choice.upper()}}
    if choice == "required":
        return {"function_calling_config": {"mode": "ANY"}}
    return {"function_calling_config": {"mode": "ANY", "allowed_function_names": [choice]}}


def _schema_note(fmt: OutputFormat) -> str:
    return (
        "When you give your final answer, reply with only a JSON value (no prose) that matches this "
        f"JSON schema:\n{canonical_json(fmt.schema_).decode()}"
    )


class _Stream:
    """The SDK's chunk generator with the `close()` that `drive` calls, so a cut stream releases its response."""

    def __init__(self, chunks: AsyncIterator[Any]) -> None:
        self._chunks = chunks

    def __aiter__(self) -> _Stream:
        return self

    async def __anext__(self) -> Any:
        return await self._chunks.__anext__()

    async def close(self) -> None:
        aclose = getattr(self._chunks, "aclose", None)
        if aclose is not None:
            await aclose()


class GoogleModel:
    """`tether.models.google()`: Gemini over `generateContent` streaming (`google:` or, on Vertex, `vertex:`)."""

    family = "google"
    prices_provider = "google"
    key_env = KEY_ENVS[0]

    def __init__(
        self,
        api_key: str | None = None,
        base_url: str | None = None,
        client: genai.Client | None = None,
        model_caps: CapsOverride = None,
        *,
        vertexai: bool = False,
        project: str | None = None,
        location: str | None = None,
        credentials: Any = None,
    ) -> None:
        if client is None:
            _check_setup(api_key, vertexai, project, base_url)
        vertexai = vertexai or bool(client is not None and client.vertexai)
        self.id = "vertex" if vertexai else "google"
        self._api_key = api_key
        self._base_url = base_url
        self._vertex = {"vertexai": True, "project": project, "location": location, "credentials": credentials}
        self._vertexai = vertexai
        self._client = client
        self._owns_client = client is None
        self._overrides = model_caps
        self._caps: dict[str, ModelCaps] = {}

    def caps(self, model: str) -> ModelCaps:
        if model not in self._caps:
            self._caps[model] = build_caps(self.id, self.prices_provider, model, google_traits(model), self._overrides)
        return self._caps[model]

    def client(self) -> genai.Client:
        """The SDK client, built on first use (Vertex resolves its credentials then, not at construction)."""
        if self._client is None:
            http = genai_types.HttpOptions(base_url=self._base_url) if self._base_url else None
            vertex: dict[str, Any] = self._vertex if self._vertexai else {}
            self._client = genai.Client(api_key=self._api_key, http_options=http, **vertex)
        return self._client

    def build_request(self, request: ChatRequest) -> dict[str, Any]:
        """The `generate_content_stream` arguments for `request`: model, contents and config."""
        caps = self.caps(request.model)
        config: dict[str, Any] = {
            "max_output_tokens": request.max_output_tokens or caps.max_output_tokens,
            "automatic_function_calling": {"disable": True},  # tools run in the engine, never in the SDK
        }
        system = [request.system] if request.system else []
        if request.tools:
            declarations = [
                {"name": t.name, "description": t.description, "parameters_json_schema": t.parameters}
                for t in request.tools
            ]
            config["tools"] = [{"function_declarations": declarations}]
            config["tool_config"] = tool_config(request.tool_choice)
        fmt = request.output_format
        version = _version(request.model) or (0, 0)
        if fmt is not None and request.tools and version < (3, 0):
            system.append(_schema_note(fmt))  # before Gemini 3, a JSON schema and function calling exclude each other
        elif fmt is not None:
            config["response_mime_type"] = "application/json"
            config["response_json_schema"] = fmt.schema_
        if system:
            config["system_instruction"] = "\n\n".join(system)
        if thinks(request.model):
            config["thinking_config"] = self._thinking(request, caps, version)
        return {"model": request.model, "contents": build_contents(request.messages, self.family), "config": config}

    @staticmethod
    def _thinking(request: ChatRequest, caps: ModelCaps, version: tuple[int, int]) -> dict[str, Any]:
        thinking: dict[str, Any] = {"include_thoughts": True}
        if request.effort and request.effort in caps.efforts:
            if version >= (3, 0):
                thinking["thinking_level"] = request.effort.upper()
            else:
                thinking["thinking_budget"] = _BUDGETS[request.effort]
        return thinking

    async def open_stream(self, body: dict[str, Any]) -> AsyncIterator[Any]:
        return _Stream(await self.client().aio.models.generate_content_stream(**body))

    def credentials(self) -> list[str]:
        """The keys and tokens this adapter may send: masked in its error messages (and in cassettes)."""
        api = getattr(self._client, "_api_client", None)  # a client passed in holds its own
        token = getattr(self._vertex["credentials"] or getattr(api, "_credentials", None), "token", None)
        found = (self._api_key, getattr(api, "api_key", None), token, *(os.environ.get(env) for env in KEY_ENVS))
        return [v for v in found if isinstance(v, str) and v]

    def on_error(self, exc: BaseException) -> StreamError:
        return google_error(exc, self.id, secrets=tuple(self.credentials()))

    async def stream(self, request: ChatRequest, signal: Signal | None = None) -> AsyncIterator[ChatEvent]:
        async def open_stream() -> AsyncIterator[Any]:
            return await self.open_stream(self.build_request(request))

        async for event in drive(open_stream, _Translator(self.id, self.family), signal, self.on_error):
            yield event

    async def aclose(self) -> None:
        """Close the SDK client this adapter built (a client passed in stays the caller's)."""
        if self._client is not None and self._owns_client:
            client, self._client = self._client, None  # the next call builds a fresh one
            await client.aio.aclose()


def _check_setup(api_key: str | None, vertexai: bool, project: str | None, base_url: str | None) -> None:
    """A Gemini API key, or on Vertex a project (or an express-mode key), must be there before any call."""
    if vertexai:
        if not (project or os.environ.get(PROJECT_ENV) or api_key or base_url):
            raise ConfigError(
                f"the vertex adapter has no Google Cloud project: set {PROJECT_ENV} or pass project= "
                f"(credentials come from Application Default Credentials), or pass client=; nothing was called",
                env=PROJECT_ENV, adapter="vertex",
            )
    elif not (api_key or any(os.environ.get(env) for env in KEY_ENVS)):
        raise ConfigError(
            f"the google adapter has no API key: set {KEY_ENVS[0]} (or {KEY_ENVS[1]}) in the environment or pass "
            f"api_key= (or client=, or vertexai=True for Vertex AI); nothing was called",
            env=KEY_ENVS[0], adapter="google",
        )


class _Translator:
    """`GenerateContentResponse` chunks -> tether events (usage snapshots are cumulative per call)."""

    def __init__(self, provider: str, family: str) -> None:
        self.provider = provider
        self.family = family
        self.meter = UsageMeter()
        self.tools = ToolCallBuffer()
        self.thought: dict[str, Any] | None = None
        self.text_signed = False

    def feed(self, chunk: Any) -> Iterator[ChatEvent]:
        if chunk.usage_metadata is not None:
            yield from self._usage(chunk.usage_metadata)
        candidate = chunk.candidates[0] if chunk.candidates else None
        parts = candidate.content.parts if candidate is not None and candidate.content is not None else None
        for part in parts or ():
            yield from self._part(part)
        feedback = chunk.prompt_feedback
        reason: FinishReason | None = None
        if candidate is not None and candidate.finish_reason is not None:
            reason = _FINISH.get(_enum_name(candidate.finish_reason), "other")
        elif feedback is not None and feedback.block_reason is not None:
            reason = "content_filter"  # the prompt itself was blocked: no candidate at all
        if reason is not None:
            yield from self._flush_thought()
            if reason == "stop" and self.tools.ended:
                reason = "tool_calls"
            self.meter.reported = True
            yield Finish(reason=reason, usage=self.meter.total)

    def at_end(self) -> ChatEvent:
        return StreamError(
            kind="transport",
            message=f"{self.provider} stream ended before a finish reason",
            retryable=True,
            usage=self.meter.partial(),
        )

    def _usage(self, usage: Any) -> Iterator[ChatEvent]:
        # Each chunk's `usageMetadata` is a snapshot of the whole call, and Gemini 2.x revises its prompt
        # count down in the last one (169, then 63): the input side is settled from the final snapshot
        # (the Finish carries it), only output growth is metered live.
        thoughts = usage.thoughts_token_count or 0
        snapshot = Usage(
            input_tokens=(usage.prompt_token_count or 0) + (usage.tool_use_prompt_token_count or 0),
            output_tokens=(usage.candidates_token_count or 0) + thoughts,
            cache_read_tokens=usage.cached_content_token_count or 0,
            reasoning_tokens=thoughts,
        )
        inc = self.meter.revise(snapshot, held=_SETTLED_AT_END)
        if inc is not None:
            yield inc

    def _part(self, part: Any) -> Iterator[ChatEvent]:
        sig = base64.b64encode(part.thought_signature).decode() if part.thought_signature else None
        if part.thought:
            if self.thought is None:
                self.thought = {"thought": True, "text": ""}
            self.thought["text"] += part.text or ""
            if sig:
                self.thought["thoughtSignature"] = sig
            return
        yield from self._flush_thought()
        if part.function_call is not None:
            yield from self._call(part.function_call, sig)
        elif part.text is not None:
            if part.text:
                yield TextDelta(text=part.text)
            if sig and not self.text_signed:
                self.text_signed = True
                yield self._raw({"thoughtSignature": sig, "part": "text"})

    def _call(self, call: Any, sig: str | None) -> Iterator[ChatEvent]:
        key = len(self.tools.calls)
        yield self.tools.start(key, call.id or f"{call.name}_{key}", call.name or "")
        delta = self.tools.delta(key, json.dumps(call.args or {}, separators=(",", ":")))
        if delta is not None:
            yield delta
        end = self.tools.end(key)
        if end is not None:
            yield end
            if sig:
                yield self._raw({"thoughtSignature": sig, "part": "functionCall", "call": end.index})

    def _flush_thought(self) -> Iterator[ChatEvent]:
        if self.thought is not None:
            thought, self.thought = self.thought, None
            yield self._raw(thought)

    def _raw(self, data: dict[str, Any]) -> RawPartEvent:
        return RawPartEvent(part=RawPart(family=self.family, data=data))


def _enum_name(value: Any) -> str:
    return str(getattr(value, "value", value))


def redact(text: str, secrets: tuple[str | None, ...]) -> str:
    """`text` without the adapter's own credentials (by value) or anything shaped like a key."""
    return redact_secrets(text, [s for s in secrets if s])


def google_error(exc: BaseException, provider: str, *, secrets: tuple[str | None, ...] = ()) -> StreamError:
    """An SDK exception as the stream's typed error, in the retry classes of every adapter."""
    key_env = None if provider == "vertex" else KEY_ENVS[0]
    if not isinstance(exc, genai_errors.APIError):
        error = _other_error(exc, provider, key_env)
        return error.model_copy(update={"message": redact(error.message, secrets)})
    status = exc.code if isinstance(exc.code, int) and 400 <= exc.code <= 599 else None
    text = redact((exc.message or str(exc)).strip(), secrets) or "no message"
    details = _details(exc.details)
    headers = getattr(getattr(exc, "response", None), "headers", None)
    if status == 429:
        return _rate_limited(provider, text, details, headers)
    if status == 400 and any(d.get("reason") == "API_KEY_INVALID" for d in details):
        # The Gemini API answers a bad key with 400 INVALID_ARGUMENT: a credentials error all the same.
        return StreamError(
            kind="terminal", status=status,
            message=f"{provider} rejected the credentials ({status}): {text}. Check the key "
            f"(set {KEY_ENVS[0]} or pass api_key=).",
        )
    if status in (400, 413) and any(h in text.lower() for h in _CONTEXT_HINTS):
        return StreamError(
            kind="context-overflow", status=status,
            message=f"{provider} context window exceeded ({status}): {text}. Shorten the history or the "
            f"tool results, or route to a model with a larger context window.",
        )
    return classify_error(provider, status, kind=exc.status, message=text, headers=headers, key_env=key_env)


def _other_error(exc: BaseException, provider: str, key_env: str | None) -> StreamError:
    """Transport failures are retryable; missing or refused Google Cloud credentials are not."""
    from google.auth import exceptions as auth_exceptions

    if isinstance(exc, auth_exceptions.GoogleAuthError) and not isinstance(exc, auth_exceptions.TransportError):
        return StreamError(
            kind="terminal",
            message=f"{provider} could not get Google Cloud credentials: {type(exc).__name__}: {exc}. Run "
            f"`gcloud auth application-default login`, set GOOGLE_APPLICATION_CREDENTIALS, or pass credentials=.",
        )
    return error_from_exception(exc, provider, connection_errors=_connection_errors(), key_env=key_env)


def _rate_limited(provider: str, text: str, details: list[dict[str, Any]], headers: Any) -> StreamError:
    """Gemini's 429: a per-day quota is terminal; anything else waits the `RetryInfo` delay and retries."""
    quotas = [v.get("quotaId", "") for d in details for v in d.get("violations", ()) if isinstance(v, dict)]
    if any("PerDay" in q for q in quotas):
        return StreamError(
            kind="terminal", status=429,
            message=f"{provider} daily quota exhausted (429): {text}. Retrying today will not help; raise the "
            f"quota or route to another model.",
        )
    after = _retry_delay_ms(details)
    if after is None and headers is not None:
        after = parse_retry_after(headers)
    wait = f"; retry after {after} ms" if after is not None else ""
    return StreamError(
        kind="rate-limit", retryable=True, retry_after_ms=after, status=429,
        message=f"{provider} rate limited (429): {text}{wait}",
    )


def _details(body: Any) -> list[dict[str, Any]]:
    error = body.get("error", body) if isinstance(body, Mapping) else None
    details = error.get("details") if isinstance(error, Mapping) else None
    return [d for d in details if isinstance(d, dict)] if isinstance(details, list) else []


def _retry_delay_ms(details: list[dict[str, Any]]) -> int | None:
    for detail in details:
        delay = detail.get("retryDelay")
        if isinstance(delay, str) and delay.endswith("s"):
            try:
                return max(0, round(float(delay[:-1]) * 1000))
            except ValueError:
                return None
    return None


def _connection_errors() -> tuple[type[BaseException], ...]:
    from google.auth import exceptions as auth_exceptions

    found: list[type[BaseException]] = [auth_exceptions.TransportError]
    # The SDK runs on httpx2, httpx (older releases) or aiohttp, whichever is there: each one's network errors.
    for module, name in (("httpx", "TransportError"), ("aiohttp", "ClientConnectionError")):
        try:
            found.append(getattr(importlib.import_module(module), name))
        except ImportError:
            continue
    return tuple(found)
