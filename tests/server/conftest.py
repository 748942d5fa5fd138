"""Fixtures for the server tests: a sqlite store with a recorded multi-agent run, and app clients."""

from __future__ import annotations

import asyncio
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from browser_kit import browser  # noqa: F401  (the browser fixture, for every test here)
from server_apps import make_engine, record_research
from starlette.testclient import TestClient

from tether.server import create_app

warnings.filterwarnings("ignore", message=".*MemoryStore.*")


@pytest.fixture
def store_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path}/tether.db"


@pytest.fixture
def recorded(store_url: str) -> str:
    """The store URL, holding the recorded `research-1` run."""
    outcome = asyncio.run(record_research(store_url))
    assert outcome.status == "ok", outcome.error
    return store_url


@pytest.fixture
def serve(store_url: str) -> Iterator[Callable[..., TestClient]]:
    """`serve(token=..., mode=..., **create_app_options)`: a TestClient over a fresh app engine on the test's store.

    The client is entered (lifespan running, one event loop for all requests), so runs the app
    starts keep going between requests. It is a program, as the API expects one: it addresses
    `localhost` and sends `X-Tether-Request` on every request.
    """
    clients: list[TestClient] = []

    def make(*, token: str | None = None, mode: Any = "app", url: str | None = None, **options: Any) -> TestClient:
        engine = make_engine(url or store_url)
        client = TestClient(create_app(engine, token=token, mode=mode, owns_engine=True, **options),
                            base_url="http://localhost", headers={"X-Tether-Request": "1"})
        client.__enter__()
        clients.append(client)
        return client

    yield make
    for client in reversed(clients):
        client.__exit__(None, None, None)
