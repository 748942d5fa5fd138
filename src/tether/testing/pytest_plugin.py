"""pytest fixtures (`fake_model`, `tether_engine`, `cassette`) and a runner for the `async def` tests that ask for it.

Registered through the `pytest11` entry point, so installing `tether[testing]` is the whole set-up. The
plugin acts only on a test that asks for it: one marked `@pytest.mark.tether`, or one that requests a
tether fixture. Such an `async def` test runs on a fresh event loop unless another plugin (pytest-asyncio,
anyio) claims it; every other test of the project is left to pytest and its other plugins. It uses
pytest's public API only.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:  # imported by the fixtures that use them, so a session that uses none pays nothing
    from tether.contracts.protocols import ChatModel
    from tether.engine.engine import Engine
    from tether.models.fake import FakeModel
    from tether.testing.cassette import CassetteModel, Mode

MARKER = "tether"
FIXTURES = frozenset({"fake_model", "tether_engine", "cassette"})
"""Requesting one of these asks the plugin to run the `async def` test, as the marker does."""
OTHER_ASYNC_MARKS = ("asyncio", "anyio", "trio")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", f"{MARKER}: run this `async def` test on a fresh event loop (tether's pytest plugin; a test "
                   f"that requests tether_engine, fake_model or cassette is run so without the mark)")


def asks_for_tether(item: pytest.Function) -> bool:
    """The test is marked `tether` or requests one of tether's fixtures."""
    return item.get_closest_marker(MARKER) is not None or not FIXTURES.isdisjoint(item.fixturenames)


@pytest.hookimpl
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> bool | None:
    """Run an `async def` test that asks for tether and that no other async plugin took."""
    fn = pyfuncitem.obj
    if not inspect.iscoroutinefunction(fn) or not asks_for_tether(pyfuncitem) \
            or any(pyfuncitem.get_closest_marker(m) for m in OTHER_ASYNC_MARKS):
        return None
    params = inspect.signature(fn).parameters
    kwargs = {name: value for name, value in pyfuncitem.funcargs.items() if name in params}
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
    """An empty scripted fake model (`fake_model.push(Reply(...))`), adapter id `fake`, every model priced at
    `tether.testing.FIXTURE_PRICE` (so `budget_usd=` works; a `fake_model` fixture of the test's own overrides it)."""
    from tether.models.fake import FakeModel
    from tether.testing import FIXTURE_PRICE

    return FakeModel("fake", price=FIXTURE_PRICE)


@pytest.fixture
def tether_engine(fake_model: FakeModel, tmp_path: Path) -> Iterator[Engine]:
    """An engine on a fresh SQLite store with `fake_model` routed as `fake:m`; closed after the test."""
    from tether.engine.engine import Engine

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
        from tether.testing.cassette import fixture_cassette

        folder = request.node.path.parent / "cassettes"
        return fixture_cassette(model, folder / f"{name or request.node.name}.json", mode)

    return factory
