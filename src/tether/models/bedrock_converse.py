"""The Amazon Bedrock adapter over the Converse/ConverseStream API (`aiobotocore`; credentials from the AWS chain)."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import re
from collections.abc import AsyncIterator, Iterator, Mapping
from typing import Any

import botocore.exceptions as aws_errors
from aiobotocore.config import AioConfig
from aiobotocore.session import AioSession
from botocore.tokens import FrozenAuthToken

from tether.contracts.errors import ConfigError
from tether.contracts.messages import ChatRequest, Message, RawPart, TextPart, ToolCallPart, ToolResultPart
from tether.contracts.signal import Signal
from tether.contracts.stream import ChatEvent, Finish, FinishReason, ModelCaps, RawPartEvent, StreamError, TextDelta
from tether.models._sdk import CapsOverride, Traits, build_caps, closed_schema, user_and_assistant_turns, wire_tool_id
from tether.models._sdk_errors import classify_error, error_from_exception, redact_secrets
from tether.models._sdk_stream import ToolCallBuffer, UsageMeter, drive, parse_args

REGION_ENVS = ("AWS_REGION", "AWS_DEFAULT_REGION")
CHAIN = (
    "the AWS credential chain (AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, AWS_PROFILE, SSO, a container or "
    "instance role) or a Bedrock API key (AWS_BEARER_TOKEN_BEDROCK or api_key=)"
)
_STOP: dict[str, FinishReason] = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "tool_use": "tool_calls",
    "max_tokens": "max_tokens",
    "model_context_window_exceeded": "max_tokens",
    "guardrail_intervened": "content_filter",
    "content_filtered": "content_filter",
}
# Bedrock error codes (HTTP `x-amzn-ErrorType`, or a mid-stream exception event) -> the status they mean.
_STATUS_OF_CODE = {
    "throttlingexception": 429, "modelnotreadyexception": 429, "servicequotaexceededexception": 402,
    "internalserverexception": 500, "internalservererror": 500, "serviceunavailableexception": 503,
    "modeltimeoutexception": 408, "modelerrorexception": 424, "modelstreamerrorexception": 424,
    "validationexception": 400, "resourcenotfoundexception": 404, "accessdeniedexception": 403,
    "unrecognizedclientexception": 403, "expiredtokenexception": 403, "invalidsignatureexception": 403,
}
_GEO = re.compile(r"^(?:us|eu|apac|jp|au|ca|us-gov|global)\.")
_CLAUDE = re.compile(
    r"claude-(?:(?P<tier>[a-z]+)-(?P<major>\d+)(?:-(?P<minor>\d)(?!\d))?"
    r"|(?P<omajor>\d+)(?:-(?P<ominor>\d)(?!\d))?-(?P<otier>[a-z]+))"
)
_SECRET_ENVS = ("AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_BEARER_TOKEN_BEDROCK")


def _claude_traits(model: str) -> Traits:
    m = _CLAUDE.search(model)
    if m is None:
        return Traits(max_output_tokens=4_096, structured_output="tool", context_window=200_000)
    tier = m.group("tier") or m.group("otier")
    version = (int(m.group("major") or m.group("omajor")), int(m.group("minor") or m.group("ominor") or 0))
    if version < (3, 7):
        out = 4_096 if version < (3, 5) else 8_192
    else:
        out = 32_000 if tier == "opus" and version < (4, 5) else 64_000
    effort = version >= (4, 6) or (tier == "opus" and version >= (4, 5))
    return Traits(
        max_output_tokens=out,
        structured_output="native" if version >= (4, 5) else "tool",
        efforts=("low", "medium", "high") if effort else (),
        context_window=200_000,
    )


def bedrock_traits(model: str) -> Traits:
    """What the adapter assumes per model vendor (after any `us.`/`eu.`/`global.` inference-profile prefix)."""
    vendor = _GEO.sub("", model.rsplit("/", 1)[-1]).split(".", 1)[0]
    if vendor == "anthropic":
        return _claude_traits(model)
    if vendor == "amazon":  # Nova takes forced tool choice; its output cap is small
        return Traits(max_output_tokens=5_000, structured_output="tool", context_window=300_000)
    return Traits(max_output_tokens=4_096, structured_output="prompt", context_window=128_000)


def wire_id(canonical_id: str) -> str:
    """The `toolUseId` the wire sees for an engine-minted tool-call id."""
    return wire_tool_id("tooluse_", canonical_id)


def _raw_block(data: Mapping[str, Any]) -> dict[str, Any]:
    """A kept reasoning block as Converse takes it back (redacted reasoning is journaled as base64)."""
    reasoning = data.get("reasoningContent")
    if isinstance(reasoning, Mapping) and isinstance(reasoning.get("redactedContent"), str):
        return {"reasoningContent": {"redactedContent": base64.b64decode(reasoning["redactedContent"])}}
    return dict(data)


def _block(part: Any, family: str) -> dict[str, Any] | None:
    if isinstance(part, TextPart):
        return {"text": part.text} if part.text else None
    if isinstance(part, ToolCallPart):
        return {"toolUse": {"toolUseId": wire_id(part.id), "name": part.name, "input": part.args}}
    if isinstance(part, ToolResultPart):
        status = "error" if part.is_error else "success"
        result = {"toolUseId": wire_id(part.call_id), "content": [{"text": part.content}], "status": status}
        return {"toolResult": result}
    if isinstance(part, RawPart) and part.family == family:
        return _raw_block(part.data)
    return None  # raw parts of another provider never cross over


def build_messages(messages: tuple[Message, ...], family: str) -> list[dict[str, Any]]:
    """Canonical history as Converse messages; tool results ride in user turns, ahead of any text."""
    return user_and_assistant_turns(messages, lambda p: _block(p, family), lambda b: "toolResult" in b)


def tool_choice(choice: str) -> dict[str, Any] | None:
    """Converse has no `none`: the tools stay declared (history may hold tool blocks) and the model is free."""
    if choice in ("auto", "none"):
        return {"auto": {}}
    if choice == "required":
        return {"any": {}}
    return {"tool": {"name": choice}}


class _BearerSession(AioSession):  # type: ignore[misc]
    """A session that signs with a Bedrock API key (`Authorization: Bearer`) instead of SigV4 credentials."""

    def __init__(self, token: str, profile: str | None) -> None:
        super().__init__(profile=profile)
        self._bearer = token

    def get_auth_token(self, **_: Any) -> FrozenAuthToken:
        return FrozenAuthToken(self._bearer)

    async def get_credentials(self) -> None:
        return None


class _Stream:
    """The ConverseStream event stream with the async `close()` that `drive` calls on a cut stream."""

    def __init__(self, events: Any) -> None:
        self._events = events
        self._it: Any = events.__aiter__()

    def __aiter__(self) -> _Stream:
        return self

    async def __anext__(self) -> Any:
        return await self._it.__anext__()

    async def close(self) -> None:
        await self._it.aclose()
        self._events.close()


class BedrockModel:
    """`tether.models.bedrock()`: models on Amazon Bedrock over ConverseStream (`bedrock:<model id>`)."""

    id = "bedrock"
    family = "bedrock"
    prices_provider = "aws"

    def __init__(
        self,
        *,
        region: str | None = None,
        profile: str | None = None,
        api_key: str | None = None,
        aws_access_key_id: str | None = None,
        aws_secret_access_key: str | None = None,
        aws_session_token: str | None = None,
        base_url: str | None = None,
        client: Any = None,
        model_caps: CapsOverride = None,
        guardrail_config: Mapping[str, Any] | None = None,
        additional_model_request_fields: Mapping[str, Any] | None = None,
    ) -> None:
        if client is None:
            region = region or _configured_region(profile)
        self._region = region
        self._profile = profile
        self._api_key = api_key
        self._keys = {
            "aws_access_key_id": aws_access_key_id,
            "aws_secret_access_key": aws_secret_access_key,
            "aws_session_token": aws_session_token,
        }
        self._base_url = base_url
        self._client = client
        self._owns_client = client is None
        self._lock = asyncio.Lock()
        self._extra = {
            "guardrailConfig": dict(guardrail_config or {}),
            "additionalModelRequestFields": dict(additional_model_request_fields or {}),
        }
        self._overrides = model_caps
        self._caps: dict[str, ModelCaps] = {}

    def caps(self, model: str) -> ModelCaps:
        if model not in self._caps:
            self._caps[model] = build_caps(self.id, self.prices_provider, model, bedrock_traits(model), self._overrides)
        return self._caps[model]

    async def client(self) -> Any:
        """The `bedrock-runtime` client, built on first use (the credential chain is resolved then)."""
        async with self._lock:
            if self._client is None:
                token = self._api_key or os.environ.get("AWS_BEARER_TOKEN_BEDROCK")
                session = _BearerSession(token, self._profile) if token else AioSession(profile=self._profile)
                config = AioConfig(
                    retries={"total_max_attempts": 1, "mode": "standard"},  # the engine retries, the SDK never
                    **({"signature_version": "bearer"} if token else {}),
                )
                keys = {} if token else {k: v for k, v in self._keys.items() if v}
                creator = session.create_client(
                    "bedrock-runtime", region_name=self._region, endpoint_url=self._base_url, config=config, **keys
                )
                self._client = await creator.__aenter__()
            return self._client

    def build_request(self, request: ChatRequest) -> dict[str, Any]:
        """The ConverseStream parameters for `request`."""
        caps = self.caps(request.model)
        params: dict[str, Any] = {
            "modelId": request.model,
            "messages": build_messages(request.messages, self.family),
            "inferenceConfig": {"maxTokens": request.max_output_tokens or caps.max_output_tokens},
        }
        if request.system:
            params["system"] = [{"text": request.system}]
        if request.tools:
            tools = [
                {"toolSpec": {
                    "name": t.name,
                    **({"description": t.description} if t.description else {}),
                    "inputSchema": {"json": t.parameters},
                }}
                for t in request.tools
            ]
            params["toolConfig"] = {"tools": tools, "toolChoice": tool_choice(request.tool_choice)}
        output: dict[str, Any] = {}
        if request.output_format is not None:
            schema = json.dumps(closed_schema(request.output_format.schema_), separators=(",", ":"))
            structure = {"jsonSchema": {"schema": schema, "name": request.output_format.name}}
            output["textFormat"] = {"type": "json_schema", "structure": structure}
        if request.effort and request.effort in caps.efforts:
            output["effort"] = request.effort
        if output:
            params["outputConfig"] = output
        params.update({k: v for k, v in self._extra.items() if v})
        return params

    async def open_stream(self, params: dict[str, Any]) -> AsyncIterator[Any]:
        client = await self.client()
        response = await client.converse_stream(**params)
        return _Stream(response["stream"])

    def credentials(self) -> list[str]:
        """The secrets this adapter may sign or send with: masked in its error messages (and in cassettes)."""
        found = (self._api_key, *self._keys.values(), *(os.environ.get(name) for name in _SECRET_ENVS))
        return [v for v in found if isinstance(v, str) and v]

    def on_error(self, exc: BaseException) -> StreamError:
        return bedrock_error(exc, self.id, secrets=tuple(self.credentials()))

    async def stream(self, request: ChatRequest, signal: Signal | None = None) -> AsyncIterator[ChatEvent]:
        async def open_stream() -> AsyncIterator[Any]:
            return await self.open_stream(self.build_request(request))

        async for event in drive(open_stream, _Translator(self.family), signal, self.on_error):
            yield event

    async def aclose(self) -> None:
        """Close the client this adapter built (a client passed in stays the caller's)."""
        async with self._lock:  # not while `client()` is building one
            if self._client is not None and self._owns_client:
                client, self._client = self._client, None  # the next call builds a fresh one
                await client.close()


def _configured_region(profile: str | None) -> str:
    """The region from the environment or the AWS config (profile); none is a `ConfigError` before any call."""
    for env in REGION_ENVS:
        if os.environ.get(env):
            return os.environ[env]
    try:
        region = AioSession(profile=profile).get_config_variable("region")
    except aws_errors.ProfileNotFound as exc:
        raise ConfigError(f"the bedrock adapter's AWS profile {profile!r} was not found: {exc}",
                          profile=profile) from None
    if not region:
        raise ConfigError(
            f"the bedrock adapter has no AWS region: set {REGION_ENVS[0]} in the environment, configure one for the "
            f"profile, or pass region= (or client=); nothing was called",
            env=REGION_ENVS[0], adapter="bedrock",
        )
    return str(region)


class _Translator:
    """ConverseStream events (one-key dicts) -> tether events; usage arrives once, in `metadata`."""

    def __init__(self, family: str) -> None:
        self.family = family
        self.meter = UsageMeter()
        self.tools = ToolCallBuffer()
        self.reasoning: dict[int, dict[str, Any]] = {}
        self.server = _ServerBlocks()
        self.reason: FinishReason | None = None

    def feed(self, event: Mapping[str, Any]) -> Iterator[ChatEvent]:
        if "contentBlockStart" in event:
            body = event["contentBlockStart"]
            start = body.get("start", {})
            if self.server.start(body["contentBlockIndex"], start):
                return  # Bedrock runs it and answers it in the same message: never a client call
            if start.get("toolUse") is not None:
                call = start["toolUse"]
                yield self.tools.start(body["contentBlockIndex"], call["toolUseId"], call["name"])
        elif "contentBlockDelta" in event:
            body = event["contentBlockDelta"]
            yield from self._delta(body["contentBlockIndex"], body.get("delta", {}))
        elif "contentBlockStop" in event:
            yield from self._stop(event["contentBlockStop"]["contentBlockIndex"])
        elif "messageStop" in event:
            self.reason = _STOP.get(event["messageStop"].get("stopReason", ""), "other")
        elif "metadata" in event:
            yield from self._usage(event["metadata"].get("usage") or {})
            if self.reason is not None:
                yield Finish(reason=self.reason, usage=self.meter.total)

    def at_end(self) -> ChatEvent:
        if self.reason is not None:  # a stop without its metadata: the count is ours, not Bedrock's
            return Finish(reason=self.reason, usage=self.meter.total.model_copy(update={"approximate": True}))
        return StreamError(
            kind="transport", message="bedrock stream ended before messageStop", retryable=True,
            usage=self.meter.partial(),
        )

    def _delta(self, index: int, delta: Mapping[str, Any]) -> Iterator[ChatEvent]:
        if index in self.server:
            self.server.delta(index, delta)
        elif delta.get("text"):
            yield TextDelta(text=delta["text"])
        elif "toolUse" in delta:
            event = self.tools.delta(index, delta["toolUse"].get("input", ""))
            if event is not None:
                yield event
        elif "reasoningContent" in delta:
            part = delta["reasoningContent"]
            block = self.reasoning.setdefault(index, {"text": "", "signature": ""})
            block["text"] += part.get("text", "")
            block["signature"] += part.get("signature", "")
            if part.get("redactedContent"):
                block["redacted"] = base64.b64encode(part["redactedContent"]).decode()

    def _stop(self, index: int) -> Iterator[ChatEvent]:
        if index in self.server:
            yield RawPartEvent(part=RawPart(family=self.family, data=self.server.stop(index)))
        elif index in self.tools:
            end = self.tools.end(index)
            if end is not None:
                yield end
        elif index in self.reasoning:
            block = self.reasoning.pop(index)
            if "redacted" in block:
                data: dict[str, Any] = {"reasoningContent": {"redactedContent": block["redacted"]}}
            else:
                text = {"text": block["text"], **({"signature": block["signature"]} if block["signature"] else {})}
                data = {"reasoningContent": {"reasoningText": text}}
            yield RawPartEvent(part=RawPart(family=self.family, data=data))

    def _usage(self, usage: Mapping[str, Any]) -> Iterator[ChatEvent]:
        read = usage.get("cacheReadInputTokens") or 0
        write = usage.get("cacheWriteInputTokens") or 0
        self.meter.reported = True
        inc = self.meter.advance(
            input=(usage.get("inputTokens") or 0) + read + write,  # Converse's inputTokens leaves the cache out
            output=usage.get("outputTokens"),
            cache_read=read,
            cache_write=write,
        )
        if inc is not None:
            yield inc


class _ServerBlocks:
    """Server-side tool blocks being streamed (a Nova `server_tool_use` and Bedrock's own `toolResult` for it).

    Each is kept whole, as Converse takes it back, for a raw part: the engine never runs it.
    """

    def __init__(self) -> None:
        self.blocks: dict[int, dict[str, Any]] = {}
        self.inputs: dict[int, str] = {}

    def __contains__(self, index: int) -> bool:
        return index in self.blocks

    def start(self, index: int, start: Mapping[str, Any]) -> bool:
        """Open `index` if its start is a server tool's use or a result; False for anything else."""
        use, result = start.get("toolUse"), start.get("toolResult")
        if isinstance(use, Mapping) and use.get("type") == "server_tool_use":
            self.blocks[index] = {"toolUse": {**use, "input": {}}}
            self.inputs[index] = ""
        elif isinstance(result, Mapping):  # only server tools' results arrive in an assistant message
            self.blocks[index] = {"toolResult": {**result, "content": []}}
        else:
            return False
        return True

    def delta(self, index: int, delta: Mapping[str, Any]) -> None:
        if "toolUse" in delta:
            self.inputs[index] += delta["toolUse"].get("input", "")
        content = self.blocks[index].get("toolResult", {}).get("content")
        for item in delta.get("toolResult", ()) if content is not None else ():
            if "text" in item and content and "text" in content[-1]:
                content[-1] = {"text": content[-1]["text"] + item["text"]}  # one text block, as Converse sends it
            else:
                content.append(dict(item))

    def stop(self, index: int) -> dict[str, Any]:
        block = self.blocks.pop(index)
        if index in self.inputs:
            block["toolUse"]["input"] = parse_args(self.inputs.pop(index)) or {}
        return block


def redact(text: str, secrets: tuple[str | None, ...]) -> str:
    """`text` without the adapter's own credentials (by value) or anything shaped like a key."""
    return redact_secrets(text, [s for s in secrets if s])


def bedrock_error(exc: BaseException, provider: str, *, secrets: tuple[str | None, ...] = ()) -> StreamError:
    """A botocore exception as the stream's typed error, in the retry classes of every adapter."""
    error = _classify(exc, provider)
    return error.model_copy(update={"message": redact(error.message, secrets)})


def _classify(exc: BaseException, provider: str) -> StreamError:
    missing = (aws_errors.NoCredentialsError, aws_errors.PartialCredentialsError, aws_errors.NoAuthTokenError)
    if isinstance(exc, missing):
        return StreamError(kind="terminal", message=f"{provider} found no AWS credentials: {exc}. Configure {CHAIN}.")
    if isinstance(exc, aws_errors.ClientError):
        return _client_error(exc, provider)
    return error_from_exception(exc, provider, connection_errors=_connection_errors())


def _client_error(exc: aws_errors.ClientError, provider: str) -> StreamError:
    error = exc.response.get("Error", {})
    code = str(error.get("Code") or "")
    text = str(error.get("Message") or exc).strip()
    http = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    status = http if isinstance(http, int) and http >= 400 else _STATUS_OF_CODE.get(code.lower())
    if code.lower() in ("modelerrorexception", "modelstreamerrorexception"):
        # 424: the model behind Bedrock failed while answering; AWS says to retry.
        return StreamError(kind="transport", retryable=True, status=status,
                           message=f"{provider} model error ({status}, {code}): {text}")
    if status in (401, 403):
        return StreamError(
            kind="terminal", status=status,
            message=f"{provider} rejected the credentials ({status}, {code or 'no code'}): {text}. Check {CHAIN}, "
            f"and that the IAM identity may call bedrock:InvokeModelWithResponseStream on this model.",
        )
    headers = exc.response.get("ResponseMetadata", {}).get("HTTPHeaders")
    return classify_error(provider, status, kind=code or None, message=text, headers=headers)


def _connection_errors() -> tuple[type[BaseException], ...]:
    found: list[type[BaseException]] = [aws_errors.HTTPClientError, aws_errors.EndpointConnectionError]
    try:
        import aiohttp
    except ImportError:  # pragma: no cover - aiobotocore depends on it
        pass
    else:
        found.append(aiohttp.ClientConnectionError)
    return tuple(found)
