"""What the SDK adapters share: the `SdkAdapter` base (caps, lazy client, one stream path), wire ids, schemas."""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Literal, Protocol, TypeVar

from tether.contracts.errors import ConfigError
from tether.contracts.messages import ChatRequest, Message, OutputFormat, Part
from tether.contracts.signal import Signal
from tether.contracts.stream import ChatEvent, ModelCaps, StreamError
from tether.models._sdk_errors import client_credentials, error_from_exception, redact_secrets, url_credentials
from tether.models._sdk_stream import Translator, drive
from tether.pricing import bundled_model_info, bundled_price

CapsOverride = ModelCaps | Mapping[str, ModelCaps] | None
Structured = Literal["native", "tool", "prompt"]


def user_and_assistant_turns(
    messages: Sequence[Message], block: Callable[[Part], dict[str, Any] | None],
    is_tool_result: Callable[[dict[str, Any]], bool],
) -> list[dict[str, Any]]:
    """Canonical history as alternating `{"role", "content": [blocks]}` turns (Messages API, Converse):
    the system prompt is sent apart, parts with no block are dropped, consecutive turns of one role are
    merged, and tool results lead their user turn."""
    turns: list[dict[str, Any]] = []
    for message in messages:
        if message.role == "system":
            continue
        role = "assistant" if message.role == "assistant" else "user"
        blocks = [b for b in (block(p) for p in message.parts) if b is not None]
        if not blocks:
            continue
        if turns and turns[-1]["role"] == role:
            turns[-1]["content"].extend(blocks)
        else:
            turns.append({"role": role, "content": blocks})
    for turn in turns:
        if turn["role"] == "user":
            turn["content"].sort(key=lambda b: not is_tool_result(b))
    return turns


def wire_tool_id(prefix: str, canonical_id: str) -> str:
    """A valid, deterministic wire id for an engine-minted tool-call id (same input, same id)."""
    clean = re.sub(r"[^A-Za-z0-9_-]", "_", canonical_id)
    if clean != canonical_id or len(clean) > 48:
        digest = hashlib.sha256(canonical_id.encode()).hexdigest()[:10]
        clean = f"{clean[:36]}_{digest}"
    return f"{prefix}{clean}"


def tool_result_text(content: str, is_error: bool) -> str:
    """Tool-result text for wire formats without an error flag."""
    return f"[error] {content}" if is_error else content


@dataclass(frozen=True)
class Traits:
    """What an adapter knows about a model family beyond genai-prices' data."""

    max_output_tokens: int = 8_192
    structured_output: Structured = "tool"
    efforts: tuple[str, ...] = ()
    context_window: int = 128_000


def build_caps(
    adapter: str, provider_id: str | None, model: str, traits: Traits, override: CapsOverride
) -> ModelCaps:
    """Caps for `model`: an override wins; else genai-prices' window and price plus traits."""
    if isinstance(override, ModelCaps):
        return override
    if override is not None and model in override:
        return override[model]
    window = traits.context_window
    info = bundled_model_info(provider_id, model) if provider_id else None
    if info is not None and getattr(info, "context_window", None):
        window = int(info.context_window)
    return ModelCaps(
        context_window=window,
        max_output_tokens=min(traits.max_output_tokens, window),
        structured_output=traits.structured_output,
        efforts=traits.efforts,
        price=bundled_price(provider_id or adapter, model),
    )


# Keys whose value maps names to subschemas, and keys whose value is data, not a schema.
_SCHEMA_MAPS = frozenset({"properties", "patternProperties", "$defs", "definitions"})
_DATA_KEYS = frozenset({"default", "const", "enum", "examples"})


def closed_schema(schema: Any) -> Any:
    """`schema` with `additionalProperties: false` on each object that lists properties and is silent.

    Strict structured output (Anthropic, OpenAI) rejects open objects; tether validates the reply
    against the original schema either way.
    """
    if isinstance(schema, list):
        return [closed_schema(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key in _SCHEMA_MAPS and isinstance(value, dict):
            out[key] = {name: closed_schema(sub) for name, sub in value.items()}
        else:
            out[key] = value if key in _DATA_KEYS else closed_schema(value)
    if isinstance(out.get("properties"), dict) and "additionalProperties" not in out:
        out["additionalProperties"] = False
    return out


def strict_ready(schema: Any) -> bool:
    """Whether OpenAI's strict mode accepts `schema`: every object closed and all its properties required."""
    if isinstance(schema, list):
        return all(strict_ready(s) for s in schema)
    if not isinstance(schema, dict):
        return True
    props = schema.get("properties")
    if isinstance(props, dict) and (
        schema.get("additionalProperties") is not False or not set(props) <= set(schema.get("required", ()))
    ):
        return False
    subs = [
        sub
        for key, value in schema.items()
        if key not in _DATA_KEYS
        for sub in (value.values() if key in _SCHEMA_MAPS and isinstance(value, dict) else [value])
    ]
    return all(strict_ready(s) for s in subs)


def strict_output(fmt: OutputFormat) -> tuple[dict[str, Any], bool]:
    """The closed schema to send for `fmt`, and whether to ask for strict decoding of it."""
    schema: dict[str, Any] = closed_schema(fmt.schema_)
    return schema, fmt.strict and strict_ready(schema)


class SdkClient(Protocol):
    """The one thing the base needs of a vendor SDK client: closing it."""

    async def close(self) -> None: ...


ClientT = TypeVar("ClientT", bound=SdkClient)


class SdkAdapter(Generic[ClientT]):
    """A `ChatModel` over a vendor SDK: per-model caps, a lazily built client, one stream path.

    A subclass says how to build its client, its request body and its stream translator, and
    which SDK call opens the stream; the base runs the call through `drive` and maps errors.
    """

    id: str
    family: str
    prices_provider: str | None = None
    """The genai-prices provider id for context windows (None: use the traits only)."""
    key_env: str | None = None
    """The environment variable the SDK reads the key from (named in credential errors)."""
    connection_errors: tuple[type[BaseException], ...] = ()
    client_class: Callable[..., ClientT]
    """The SDK client class, called with `api_key`, `base_url` and `max_retries=0`."""

    def __init__(
        self,
        api_key: str | None = None,
        base_url: str | None = None,
        client: ClientT | None = None,
        model_caps: CapsOverride = None,
    ) -> None:
        if client is None and self.key_env and not (api_key or os.environ.get(self.key_env)):
            raise ConfigError(
                f"the {self.id} adapter has no API key: set {self.key_env} in the environment or pass "
                f"api_key= (or client=); nothing was called",
                env=self.key_env, adapter=self.id,
            )
        self._api_key = api_key
        self._base_url = base_url
        self._client = client
        self._owns_client = client is None
        self._overrides = model_caps
        self._caps: dict[str, ModelCaps] = {}

    def traits(self, model: str) -> Traits:
        raise NotImplementedError

    def caps(self, model: str) -> ModelCaps:
        if model not in self._caps:
            traits = self.traits(model)
            self._caps[model] = build_caps(
                self.id, self.prices_provider, model, traits, self._overrides
            )
        return self._caps[model]

    def client(self) -> ClientT:
        """The SDK client, built on first use (the key was checked at construction)."""
        if self._client is None:
            self._client = self.make_client()
        return self._client

    def make_client(self) -> ClientT:
        """A new SDK client with the adapter's key and base URL, SDK retries off."""
        return self.client_class(api_key=self._api_key, base_url=self._base_url, max_retries=0)

    def build_request(self, request: ChatRequest) -> dict[str, Any]:
        """The wire body for `request` (without `stream`)."""
        raise NotImplementedError

    async def open_stream(self, body: dict[str, Any]) -> AsyncIterator[Any]:
        """Start the SDK's streaming call with `body`."""
        raise NotImplementedError

    def translator(self) -> Translator:
        """A fresh translator of this provider's stream into tether events."""
        raise NotImplementedError

    def on_error(self, exc: BaseException) -> StreamError:
        return error_from_exception(
            exc, self.id, connection_errors=self.connection_errors, key_env=self.key_env
        )

    def credentials(self) -> list[str]:
        """Every credential this adapter was configured with: `api_key=`, a password in `base_url=`, the
        key variable's value, and what its SDK client holds (its key or token, its auth headers,
        credential-named default headers).

        A provider or gateway may echo any of them in an error body, whatever its shape (`sk-…` or not):
        error messages and cassettes mask these values.
        """
        found = [self._api_key] if self._api_key else []
        found += url_credentials(self._base_url) if self._base_url else []  # its Basic form too
        if self.key_env and os.environ.get(self.key_env):
            found.append(os.environ[self.key_env])
        if self._client is not None:
            found += client_credentials(self._client)
        return found

    def masked(self, error: StreamError) -> StreamError:
        """`error` with the adapter's credentials masked in its message (see `credentials`)."""
        message = redact_secrets(error.message, self.credentials())
        return error if message == error.message else error.model_copy(update={"message": message})

    async def stream(
        self, request: ChatRequest, signal: Signal | None = None
    ) -> AsyncIterator[ChatEvent]:
        async def open_stream() -> AsyncIterator[Any]:
            return await self.open_stream(self.build_request(request))

        async for event in drive(open_stream, self.translator(), signal, self.on_error):
            # Every error this adapter reports leaves here, mapped exceptions and mid-stream error events
            # alike: the one place to mask what the provider echoed back.
            yield self.masked(event) if event.type == "error" else event

    async def aclose(self) -> None:
        """Close the SDK client this adapter built (a client passed in stays the caller's)."""
        if self._client is not None and self._owns_client:
            client, self._client = self._client, None  # the next call builds a fresh one
            await client.close()
