"""Set-up mistakes fail at construction with a line that says what to do: a missing extra, a missing key."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import pytest

import tether
from tether.contracts.protocols import ChatModel

FACTORIES: list[tuple[str, str, str, Callable[[], ChatModel]]] = [
    ("anthropic", "tether.models.anthropic_messages", "anthropic", lambda: tether.models.anthropic(api_key="k")),
    ("openai", "tether.models.openai_responses", "openai", lambda: tether.models.openai(api_key="k")),
    ("openai", "tether.models.openai_chat", "openai",
     lambda: tether.models.openai_compatible("ollama", "http://127.0.0.1:11434/v1")),
]


@pytest.mark.parametrize(("sdk", "module", "extra", "make"), FACTORIES, ids=["anthropic", "openai", "compatible"])
def test_a_missing_extra_is_a_config_error_with_the_exact_pip_command(
    monkeypatch: pytest.MonkeyPatch, sdk: str, module: str, extra: str, make: Callable[[], ChatModel]
) -> None:
    monkeypatch.setitem(sys.modules, sdk, None)  # as if the SDK were not installed
    monkeypatch.delitem(sys.modules, module, raising=False)
    with pytest.raises(tether.ConfigError) as caught:
        make()
    assert f"pip install 'tether[{extra}]'" in caught.value.message
    assert caught.value.data["extra"] == extra and caught.value.data["package"] == sdk


@pytest.mark.parametrize(
    ("make", "env"),
    [(tether.models.anthropic, "ANTHROPIC_API_KEY"), (tether.models.openai, "OPENAI_API_KEY")],
    ids=["anthropic", "openai"],
)
def test_a_model_without_its_key_fails_at_construction_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch, make: Callable[..., ChatModel], env: str
) -> None:
    monkeypatch.delenv(env, raising=False)
    with pytest.raises(tether.ConfigError) as caught:
        make()
    assert env in caught.value.message and caught.value.data["env"] == env
    assert make(api_key="sk-test").id in ("anthropic", "openai")  # an argument is enough
    monkeypatch.setenv(env, "sk-from-env")
    assert make().id in ("anthropic", "openai")  # so is the environment


def test_a_client_brings_its_own_key_and_compatible_servers_need_none(monkeypatch: pytest.MonkeyPatch) -> None:
    import anthropic

    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    client: Any = anthropic.AsyncAnthropic(api_key="sk-client", max_retries=0)
    assert tether.models.anthropic(client=client).id == "anthropic"
    assert tether.models.openai_compatible("ollama", "http://127.0.0.1:11434/v1").id == "ollama"
