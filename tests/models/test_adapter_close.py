"""`Engine.close` closes what every adapter opened: each one builds its own SDK client against a loopback
server, runs a call through the engine, and after `engine.close()` nothing is left unclosed."""

from __future__ import annotations

import asyncio
import gc
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from wirekit import WIRE

import tether
from tether.contracts import ChatModel, ClosableModel

KEY = "sk-test-CLOSE-0123456789"


@dataclass(frozen=True)
class Case:
    name: str
    body: str
    """The recorded answer the loopback server streams for any request."""
    content_type: str
    model: str
    make: Callable[[str], ChatModel]
    """The adapter, pointed at the loopback base URL, building its own SDK client."""
    closed: Callable[[Any], Callable[[], bool]] | None = None
    """Where the SDK says its client is closed, read off the client the adapter built (when it says so)."""


CASES = [
    Case("anthropic", "anthropic/text.sse", "text/event-stream", "claude-sonnet-4-5",
         lambda url: tether.models.anthropic(api_key=KEY, base_url=url), lambda m: m.client().is_closed),
    Case("openai", "openai/text.sse", "text/event-stream", "gpt-4.1",
         lambda url: tether.models.openai(api_key=KEY, base_url=f"{url}/v1"), lambda m: m.client().is_closed),
    Case("openai-compatible", "openai_compatible/text.sse", "text/event-stream", "qwen3:8b",
         lambda url: tether.models.openai_compatible("local", f"{url}/v1", local=True), lambda m: m.client().is_closed),
    Case("google", "google/text.sse", "text/event-stream", "gemini-2.5-flash",
         lambda url: tether.models.google(api_key=KEY, base_url=url)),
    Case("bedrock", "bedrock/text.eventstream", "application/vnd.amazon.eventstream", "amazon.nova-micro-v1:0",
         lambda url: tether.models.bedrock(region="us-east-1", base_url=url, aws_access_key_id="AKIAZZTETHERTEST0000",
                                           aws_secret_access_key="tether-close-secret")),
]


@pytest.fixture(autouse=True)
def no_ambient_credentials(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_BEARER_TOKEN_BEDROCK"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-aws-credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


@tether.workflow(name="close-ask")
async def ask_flow(ctx: tether.Ctx) -> str:
    return await ctx.agent("Hi", max_output_tokens=128)


async def open_connections(server: TestServer) -> int:
    """Connections the loopback server still holds, once a closing client's FIN had time to arrive."""
    web_server = server.runner.server if server.runner is not None else None
    assert web_server is not None
    for _ in range(50):
        if not web_server.connections:
            return 0
        await asyncio.sleep(0.02)
    return len(web_server.connections)


async def run_and_close(case: Case, server: TestServer, tmp_path: Path, runs: int) -> ChatModel:
    """`runs` runs of one engine, each closed after it; returns the adapter (for the caller to drop)."""
    model = case.make(str(server.make_url("")).rstrip("/"))
    engine = tether.Engine(models=[model], routing={"loop": f"{model.id}:{case.model}"},
                           store=f"sqlite:///{tmp_path}/close.db")
    for n in range(runs):
        outcome = await engine.run(ask_flow, run_id=f"close-{n}")
        closed = case.closed(model) if case.closed is not None else None
        await engine.close()
        assert outcome.status == "ok", outcome.error
        assert closed is None or closed(), "engine.close() left the SDK client the adapter built open"
        assert await open_connections(server) == 0, "engine.close() left a keep-alive connection open"
    return model


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
async def test_engine_close_leaves_no_unclosed_client_session_or_connection(case: Case, tmp_path: Path) -> None:
    async def reply(request: web.Request) -> web.StreamResponse:
        await request.read()
        return web.Response(body=(WIRE / case.body).read_bytes(), content_type=case.content_type)

    app = web.Application()
    app.router.add_post("/{tail:.*}", reply)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    loop = asyncio.get_running_loop()
    reported: list[Any] = []  # aiohttp also reports an unclosed session to the loop's exception handler
    previous = loop.get_exception_handler()
    loop.set_exception_handler(lambda _loop, context: reported.append(context.get("message")))
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")  # `-W error` would turn these into unraisable exceptions in __del__
            model = await run_and_close(case, server, tmp_path, runs=2)
            assert isinstance(model, ClosableModel)
            del model
            gc.collect()
    finally:
        loop.set_exception_handler(previous)
        await server.close()
    leaks = [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)]
    assert leaks == [] and reported == []
