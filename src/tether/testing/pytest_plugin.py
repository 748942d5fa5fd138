"""pytest fixtures: `fake_model`, `tether_engine` (memory-free, on a temp SQLite store), `cassette`."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tether.models.fake import FakeModel


@pytest.fixture
def fake_model() -> FakeModel:
    """An empty scripted fake model (`fake_model.push(Reply(...))`), adapter id `fake`."""
    return FakeModel("fake")


@pytest.fixture
def tether_engine(fake_model: FakeModel, tmp_path: Path) -> Any:
    """An engine on a fresh SQLite store with `fake_model` routed for every role as `fake:m`."""
    from tether.engine.engine import Engine

    return Engine(models=[fake_model], routing={"loop": "fake:m"}, store=f"sqlite:///{tmp_path}/tether.db")


@pytest.fixture
def cassette(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[..., Any]:
    """`cassette(model, name=None, mode="replay")`: a cassette file beside the test module."""
    from tether.testing.cassette import cassette as make

    def factory(model: Any, name: str | None = None, mode: str = "replay") -> Any:
        folder = Path(str(request.node.fspath)).parent / "cassettes"
        path = folder / f"{name or request.node.name}.json"
        return make(model, path, mode=mode)  # type: ignore[arg-type]

    return factory
