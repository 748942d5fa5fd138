"""Model adapters. Each factory imports its vendor SDK lazily, inside its own module."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tether.models.fake import FakeModel, fake

if TYPE_CHECKING:
    from tether.contracts.protocols import ChatModel


def anthropic(**kwargs: Any) -> ChatModel:
    """The Anthropic Messages API adapter over the official SDK (`pip install tether[anthropic]`)."""
    from tether.models.anthropic_messages import AnthropicModel

    return AnthropicModel(**kwargs)


def openai(**kwargs: Any) -> ChatModel:
    """The OpenAI Responses API adapter over the official SDK (`pip install tether[openai]`)."""
    from tether.models.openai_responses import OpenAIModel

    return OpenAIModel(**kwargs)


def openai_compatible(id: str, base_url: str, api_key: str | None = None, **kwargs: Any) -> ChatModel:
    """A Chat Completions adapter for Ollama, vLLM and gateways, over the official `openai` SDK."""
    from tether.models.openai_chat import OpenAICompatibleModel

    return OpenAICompatibleModel(id=id, base_url=base_url, api_key=api_key, **kwargs)


__all__ = ["FakeModel", "anthropic", "fake", "openai", "openai_compatible"]
