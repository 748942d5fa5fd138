"""Fixtures for the MCP tests: real servers (PyPI's time and git servers, and our own SDK server)."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from mcpkit import APP, Calls, HttpServer

import tether


@pytest.fixture
def calls(tmp_path: Path) -> Calls:
    return Calls(tmp_path)


@pytest.fixture
def app_stdio(calls: Calls) -> Callable[..., tether.mcp.McpToolset]:
    """Our SDK server over stdio, with call and pid logging."""

    def make(**options: Any) -> tether.mcp.McpToolset:
        env = {**calls.env, **options.pop("env", {})}
        return tether.mcp.stdio(sys.executable, str(APP), "stdio", env=env, **options)

    return make


@pytest.fixture
def http_server(calls: Calls) -> Iterator[HttpServer]:
    server = HttpServer(calls)
    try:
        yield server
    finally:
        server.stop()
