"""The bare-install demo replays the same cassette through the fake model: its caps must be Claude's."""

from __future__ import annotations

import sys

import pytest

from tether.cli import demo
from tether.models.anthropic_messages import AnthropicModel


def test_the_stand_in_has_the_caps_the_anthropic_adapter_has_for_the_demo_model() -> None:
    model = demo.REPLAY_REF.partition(":")[2]
    real, fake = AnthropicModel(api_key="k").caps(model), demo.stand_in_model().caps(model)
    fields = ("context_window", "max_output_tokens", "output_floor", "structured_output", "price")
    assert {f: getattr(fake, f) for f in fields} == {f: getattr(real, f) for f in fields}
    assert demo.stand_in_model().id == "anthropic" and demo.stand_in_model().family == "anthropic"


def test_without_the_sdk_the_demo_replays_through_the_stand_in(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "anthropic", None)
    monkeypatch.delitem(sys.modules, "tether.models.anthropic_messages", raising=False)
    adapter, real = demo.replay_adapter()
    assert not real and adapter.id == "anthropic"
    monkeypatch.undo()
    adapter, real = demo.replay_adapter()
    assert real and isinstance(adapter, AnthropicModel)
