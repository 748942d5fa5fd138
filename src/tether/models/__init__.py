"""Model adapters. Each factory imports its vendor SDK lazily, inside its own module.

A factory whose SDK is not installed raises `ConfigError` with the exact `pip install` command; an
adapter constructed without its API key (argument or environment variable) raises `ConfigError`
naming the variable, at construction rather than at the first call.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from types import ModuleType
from typing import TYPE_CHECKING, Any

from tether.contracts.errors import ConfigError
from tether.models.fake import FakeModel, fake

if TYPE_CHECKING:
    import anthropic as anthropic_sdk
    import google.genai as google_sdk
    import openai as openai_sdk

    from tether.models._sdk import CapsOverride
    from tether.models.anthropic_messages import AnthropicModel
    from tether.models.bedrock_converse import BedrockModel
    from tether.models.google_genai import GoogleModel
    from tether.models.openai_chat import OpenAICompatibleModel
    from tether.models.openai_responses import OpenAIModel


def _adapter_module(module: str, sdk: str, extra: str, factory: str, imports: tuple[str, ...] = ()) -> ModuleType:
    """Import an adapter module; its SDK missing is a `ConfigError` with the pip command that fixes it.

    `sdk` is the package to install; `imports` the top-level modules it provides (default: `sdk` itself).
    """
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        missing = exc.name or ""
        if not any(missing == name or missing.startswith(name + ".") for name in imports or (sdk,)):
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
    local: bool = False,
) -> OpenAICompatibleModel:
    """A Chat Completions adapter for Ollama, vLLM and gateways, over the official `openai` SDK.

    No key is required (local servers need none); `price_provider` names the genai-prices provider;
    `local=True` prices a server with no bill at 0 USD (`Price.free()`), so a USD ceiling accepts it.
    """
    module = _adapter_module("tether.models.openai_chat", "openai", "openai", "openai_compatible")
    model: OpenAICompatibleModel = module.OpenAICompatibleModel(
        id=id, base_url=base_url, api_key=api_key, client=client, model_caps=model_caps,
        price_provider=price_provider, local=local,
    )
    return model


def google(
    *,
    api_key: str | None = None,
    base_url: str | None = None,
    client: google_sdk.Client | None = None,
    vertexai: bool = False,
    project: str | None = None,
    location: str | None = None,
    credentials: Any = None,
    model_caps: CapsOverride = None,
) -> GoogleModel:
    """Gemini over the official `google-genai` SDK (`pip install 'tether[google]'`); refs are `google:<model>`.

    The key is `api_key`, else `GEMINI_API_KEY` / `GOOGLE_API_KEY`. `vertexai=True` serves the same models from
    Vertex AI (refs `vertex:<model>`): `project` (else `GOOGLE_CLOUD_PROJECT`), `location` and `credentials`
    (else Application Default Credentials). A `client` brings its own configuration.
    """
    module = _adapter_module("tether.models.google_genai", "google-genai", "google", "google", ("google.genai",))
    model: GoogleModel = module.GoogleModel(
        api_key=api_key, base_url=base_url, client=client, model_caps=model_caps,
        vertexai=vertexai, project=project, location=location, credentials=credentials,
    )
    return model


def bedrock(
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
) -> BedrockModel:
    """Amazon Bedrock over ConverseStream (`pip install 'tether[bedrock]'`); refs are `bedrock:<model id>`.

    Credentials come from the standard AWS chain (or `profile`, explicit keys, or a Bedrock API key as
    `api_key` / `AWS_BEARER_TOKEN_BEDROCK`); `region` else `AWS_REGION`. `base_url` is the endpoint URL;
    a `client` is an open aiobotocore `bedrock-runtime` client, and stays the caller's. `guardrail_config` and
    `additional_model_request_fields` (e.g. Claude's `thinking`) go into every Converse request as they are.
    """
    module = _adapter_module(
        "tether.models.bedrock_converse", "aiobotocore", "bedrock", "bedrock", ("aiobotocore", "botocore")
    )
    model: BedrockModel = module.BedrockModel(
        region=region, profile=profile, api_key=api_key, aws_access_key_id=aws_access_key_id,
        aws_secret_access_key=aws_secret_access_key, aws_session_token=aws_session_token,
        base_url=base_url, client=client, model_caps=model_caps, guardrail_config=guardrail_config,
        additional_model_request_fields=additional_model_request_fields,
    )
    return model


__all__ = ["FakeModel", "anthropic", "bedrock", "fake", "google", "openai", "openai_compatible"]
