"""pytest fixtures (`fake_model`, `tether_engine`, `cassette`) and a runner for `async def` tests.

Registered through the `pytest11` entry point, so installing `tether[testing]` is the whole set-up:
an `async def` test runs on a fresh event loop unless another plugin (pytest-asyncio, anyio) claims it.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tether.contracts.protocols import ChatModel
from tether.engine.engine import Engine
from tether.models.fake import FakeModel
from tether.testing.cassette import CassetteModel, Mode, fixture_cassette

_OTHER_ASYNC_MARKS = ("asyncio", "anyio", "trio")


@pytest.hookimpl
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> bool | None:
    """Run an `async def` test no other plugin took (theirs wrap the function first, or mark it)."""
    fn = pyfuncitem.obj
    if not inspect.iscoroutinefunction(fn) or any(pyfuncitem.get_closest_marker(m) for m in _OTHER_ASYNC_MARKS):
        return None
    names = pyfuncitem._fixtureinfo.argnames
    kwargs = {name: pyfuncitem.funcargs[name] for name in names}
    # A private loop (not set as the thread's current one), so other plugins' loops are never disturbed.
    with asyncio.Runner(loop_factory=asyncio.new_event_loop) as runner:
        runner.run(fn(**kwargs))
    return True


def _close(engine: Engine) -> None:
    """Close the engine's store from a sync teardown, on a private loop (the test's loop may be gone)."""
    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(engine.close())
    finally:
        loop.close()


@pytest.fixture
def fake_model() -> FakeModel:
    """An empty scripted fake model (`fake_model.push(Reply(...))`), adapter id `fake`."""
    return FakeModel("fake")


@pytest.fixture
def tether_engine(fake_model: FakeModel, tmp_path: Path) -> Iterator[Engine]:
    """An engine on a fresh SQLite store with `fake_model` routed as `fake:m`; closed after the test."""
    engine = Engine(models=[fake_model], routing={"loop": "fake:m"}, store=f"sqlite:///{tmp_path}/tether.db")
    yield engine
    _close(engine)


@pytest.fixture
def cassette(request: pytest.FixtureRequest) -> Callable[..., CassetteModel]:
    """`cassette(model, name=None, mode=None)`: a cassette file in `cassettes/` beside the test module.

    `model` is an adapter, or its factory (`tether.models.anthropic`) so replay needs no key. Without
    `mode`: replay when the file exists, record when it does not and the adapter has its key, else a
    `ConfigError` naming the file and the key to set.
    """

    def factory(model: ChatModel | Callable[..., ChatModel], name: str | None = None, mode: Mode | None = None) -> Any:
        folder = Path(str(request.node.fspath)).parent / "cassettes"
        return fixture_cassette(model, folder / f"{name or request.node.name}.json", mode)

    return factory
