"""Model adapters. Each factory imports its vendor SDK lazily, inside its own module.

A factory whose SDK is not installed raises `ConfigError` with the exact `pip install` command; an
adapter constructed without its API key (argument or environment variable) raises `ConfigError`
naming the variable, at construction rather than at the first call.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import TYPE_CHECKING

from tether.contracts.errors import ConfigError
from tether.models.fake import FakeModel, fake

if TYPE_CHECKING:
    import anthropic as anthropic_sdk
    import openai as openai_sdk

    from tether.models._sdk import CapsOverride
    from tether.models.anthropic_messages import AnthropicModel
    from tether.models.openai_chat import OpenAICompatibleModel
    from tether.models.openai_responses import OpenAIModel


def _adapter_module(module: str, sdk: str, extra: str, factory: str) -> ModuleType:
    """Import an adapter module; its SDK missing is a `ConfigError` with the pip command that fixes it."""
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name != sdk and not (exc.name or "").startswith(sdk + "."):
            raise
        raise ConfigError(
            f"tether.models.{factory}() needs the {sdk!r} package, which is not installed: "
            f"pip install 'tether[{extra}]'",
            extra=extra, package=sdk, pip=f"pip install 'tether[{extra}]'",
        ) from None


def anthropic(
    *,
    api_key: str | None = None,
    base_url: str | None = None,
    client: anthropic_sdk.AsyncAnthropic | None = None,
    model_caps: CapsOverride = None,
) -> AnthropicModel:
    """The Anthropic Messages API adapter over the official SDK (`pip install 'tether[anthropic]'`).

    The key is `api_key`, else `ANTHROPIC_API_KEY`; a `client` brings its own.
    """
    module = _adapter_module("tether.models.anthropic_messages", "anthropic", "anthropic", "anthropic")
    model: AnthropicModel = module.AnthropicModel(
        api_key=api_key, base_url=base_url, client=client, model_caps=model_caps
    )
    return model


def openai(
    *,
    api_key: str | None = None,
    base_url: str | None = None,
    client: openai_sdk.AsyncOpenAI | None = None,
    model_caps: CapsOverride = None,
) -> OpenAIModel:
    """The OpenAI Responses API adapter over the official SDK (`pip install 'tether[openai]'`).

    The key is `api_key`, else `OPENAI_API_KEY`; a `client` brings its own.
    """
    module = _adapter_module("tether.models.openai_responses", "openai", "openai", "openai")
    model: OpenAIModel = module.OpenAIModel(api_key=api_key, base_url=base_url, client=client, model_caps=model_caps)
    return model


def openai_compatible(
    id: str,
    base_url: str,
    api_key: str | None = None,
    *,
    client: openai_sdk.AsyncOpenAI | None = None,
    model_caps: CapsOverride = None,
    price_provider: str | None = None,
) -> OpenAICompatibleModel:
    """A Chat Completions adapter for Ollama, vLLM and gateways, over the official `openai` SDK.

    No key is required (local servers need none); `price_provider` names the genai-prices provider.
    """
    module = _adapter_module("tether.models.openai_chat", "openai", "openai", "openai_compatible")
    model: OpenAICompatibleModel = module.OpenAICompatibleModel(
        id=id, base_url=base_url, api_key=api_key, client=client, model_caps=model_caps,
        price_provider=price_provider,
    )
    return model


__all__ = ["FakeModel", "anthropic", "fake", "openai", "openai_compatible"]
