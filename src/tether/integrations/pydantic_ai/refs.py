"""Which tether model serves a pydantic-ai agent: its own model mapped to a tether adapter, or `AdapterModel`.

pydantic-ai builds a model from a string in `Agent.__init__` (its provider, its SDK, its environment), and an
unknown prefix is its `UserError: Unknown model` there, before tether is involved; it offers no registry for
a prefix of ours. `AdapterModel` is a pydantic-ai `Model` that names a tether adapter's model and builds
nothing, so `Agent(AdapterModel("local:tiny"))` is valid at import (docs/pydantic-ai.md, "Which model serves").
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from contextlib import asynccontextmanager
from typing import Any

from pydantic_ai.messages import ModelMessage, ModelResponse
from pydantic_ai.models import Model, ModelRequestParameters, StreamedResponse
from pydantic_ai.settings import ModelSettings
from pydantic_ai.tools import RunContext

from tether.contracts.errors import ConfigError
from tether.routing import split_ref

PROVIDER_ADAPTERS = {
    "openai": "openai", "openai-responses": "openai", "openai-chat": "openai", "anthropic": "anthropic",
    "google": "google", "google-cloud": "vertex", "bedrock": "bedrock",
}
"""pydantic-ai's provider prefixes (and `Model.system` names) for the providers tether has an adapter of, and that
adapter's id; any other prefix is taken as the adapter id. Only prefixes pydantic-ai accepts are listed: since
pydantic-ai 2 Gemini is `google:` and Vertex AI `google-cloud:` (`google-gla:`, `google-vertex:` and `gemini:`
are an `Unknown model` there)."""


class AdapterModel(Model):
    """A pydantic-ai model served by the tether adapter of its id: `AdapterModel("local:tiny")` is model `tiny`
    of the engine's adapter `local` (e.g. `tether.models.openai_compatible("local", url)`).

    Building it imports no provider and reads no environment. It answers only through tether (`run`, or a
    `durable(...)` agent inside a run); a request outside a tether run is a `ConfigError`.
    """

    def __init__(self, ref: str) -> None:
        self.ref = ref
        self._adapter, self._name = split_ref(ref)
        super().__init__()

    @property
    def model_name(self) -> str:
        return self._name

    @property
    def system(self) -> str:
        return self._adapter

    async def request(
        self, messages: list[ModelMessage], model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
    ) -> ModelResponse:
        raise self._outside_tether()

    @asynccontextmanager
    async def request_stream(
        self, messages: list[ModelMessage], model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters, run_context: RunContext[Any] | None = None,
    ) -> AsyncGenerator[StreamedResponse]:
        raise self._outside_tether()
        yield  # pragma: no cover - makes this a generator for asynccontextmanager

    def _outside_tether(self) -> ConfigError:
        return ConfigError(
            f"model {self.ref!r} is served by tether's adapter {self._adapter!r}, so it answers only inside a tether "
            "run: call tether.integrations.pydantic_ai.run(ctx, agent, ...) (or durable(agent).run(..., ctx=ctx)) "
            "in a workflow, or pass a pydantic-ai model to agent.run(model=...) to run it outside tether.",
            model=self.ref,
        )


def tether_model(agent_model: Model | str | None) -> str | None:
    """The tether model ref for a pydantic-ai agent's own model (None: let the engine's routing pick)."""
    if agent_model is None:
        return None
    if isinstance(agent_model, AdapterModel):
        return agent_model.ref
    if isinstance(agent_model, str):
        provider, sep, name = agent_model.partition(":")
    else:
        provider, sep, name = agent_model.system, ":", agent_model.model_name
    if not sep or not name or provider in ("test", "function"):
        raise ConfigError(
            f"the pydantic-ai agent's model {agent_model if isinstance(agent_model, str) else name!r} maps to no "
            "tether adapter; pass model='adapter:model' (a model the engine has, e.g. 'fake:m' in tests).",
            model=str(agent_model) if isinstance(agent_model, str) else name,
        )
    return f"{PROVIDER_ADAPTERS.get(provider, provider)}:{name}"


__all__ = ["PROVIDER_ADAPTERS", "AdapterModel", "tether_model"]
