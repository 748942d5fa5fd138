"""Holds follow attempts (issue 40, items 1 and 2): a failed attempt releases the worst case it held before the
retry is sized, and a request that never left is reported as what it is, not as budget exhaustion.

Each case runs the official SDK against a loopback HTTP server (aiohttp on 127.0.0.1): a retryable failure
(an HTTP 503, an error event mid-stream) under a budget that buys one call's worst case must end `ok` after
two requests; a refused connection under a budget of 0.001 USD must fail as a connection failure with no
provider call counted, after every attempt was tried.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

import tether
from tether.contracts import ChatModel
from tether.testing import Reply
from tether.testing.wire import anthropic_sse, chat_sse

KEY = "sk-test-HOLDS-KEY-123456"
PRICE = tether.Price(input=1.0, output=100.0)
WIRE = Path(__file__).resolve().parent.parent / "fixtures" / "wire"
Answer = Callable[[web.Request], Awaitable[web.StreamResponse]]


@tether.workflow(name="hi")
async def hi(ctx: tether.Ctx) -> Any:
    return await ctx.agent("hi")


class Provider:
    """A loopback provider: answers queued replies in order and counts the requests it got."""

    def __init__(self, *replies: Answer) -> None:
        self.replies = list(replies)
        self.requests: list[dict[str, Any]] = []
        app = web.Application()
        app.router.add_post("/{tail:.*}", self.handle)
        self.server = TestServer(app, host="127.0.0.1")

    async def __aenter__(self) -> Provider:
        await self.server.start_server()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.server.close()

    @property
    def url(self) -> str:
        return str(self.server.make_url("")).rstrip("/")

    async def handle(self, request: web.Request) -> web.StreamResponse:
        self.requests.append(json.loads(await request.read()))
        if not self.replies:
            raise AssertionError(f"unexpected request to {request.path}")
        return await self.replies.pop(0)(request)


def _sse(body: str) -> Answer:
    async def reply(request: web.Request) -> web.StreamResponse:
        return web.Response(status=200, body=body.encode(), content_type="text/event-stream")

    return reply


def _error(status: int, body: dict[str, Any]) -> Answer:
    async def reply(request: web.Request) -> web.StreamResponse:
        return web.json_response(body, status=status)

    return reply


@dataclass(frozen=True)
class Vendor:
    """One adapter: how to build it over a base URL, its model, and its wire shapes of an answer and a failure."""

    name: str
    model: str
    make: Callable[[str], ChatModel]
    answer: Callable[[], Answer]
    overloaded: Callable[[], Answer]
    midstream: Callable[[], Answer]

    def ref(self, adapter: ChatModel) -> str:
        return f"{adapter.id}:{self.model}"


REPLY = Reply(text="hello", input_tokens=20, output_tokens=5)
CHAT_MIDSTREAM = (
    'data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,'
    '"delta":{"role":"assistant","content":"Par"},"finish_reason":null}]}\n\n'
    'data: {"error": {"message": "The model is overloaded.", "type": "server_error", "code": 503}}\n\n'
)

VENDORS = [
    Vendor(
        "openai-compatible", "m",
        lambda url: tether.models.openai_compatible("loop", f"{url}/v1", api_key=KEY),
        lambda: _sse(chat_sse(REPLY, "m")),
        lambda: _error(503, {"error": {"message": "The model is overloaded.", "type": "server_error", "code": 503}}),
        lambda: _sse(CHAT_MIDSTREAM),
    ),
    Vendor(
        "anthropic", "claude-sonnet-4-6",
        lambda url: tether.models.anthropic(api_key=KEY, base_url=url),
        lambda: _sse(anthropic_sse(REPLY, "claude-sonnet-4-6")),
        lambda: _error(503, {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}),
        lambda: _sse((WIRE / "anthropic" / "midstream_error.sse").read_text()),
    ),
]
by_vendor = pytest.mark.parametrize("vendor", VENDORS, ids=lambda v: v.name)


async def _run(vendor: Vendor, url: str, store: Path, budget: float) -> tether.RunOutcome:
    adapter = vendor.make(url)
    ref = vendor.ref(adapter)
    engine = tether.Engine(models=[adapter], routing={"loop": ref}, prices={ref: PRICE}, store=f"sqlite:///{store}")
    try:
        return await engine.run(hi, run_id="r", budget_usd=budget)
    finally:
        await engine.close()


@by_vendor
@pytest.mark.parametrize("failure", ["http-503", "mid-stream"])
async def test_a_retryable_failure_under_a_small_budget_is_retried_not_stopped(
    vendor: Vendor, failure: str, tmp_path: Path
) -> None:
    first = vendor.overloaded() if failure == "http-503" else vendor.midstream()
    async with Provider(first, vendor.answer()) as provider:
        out = await _run(vendor, provider.url, tmp_path / "runs.db", budget=0.05)
    assert out.status == "ok", out.error
    assert out.value == "hello" and len(provider.requests) == 2
    # the retry asked for what the budget buys again, not what was left beside the failed attempt's hold: all of
    # it after a 503, all but what the partial reply's tokens cost (under two output tokens' worth) mid-stream
    first_cap, retry_cap = (_output_cap(vendor, body) for body in provider.requests)
    assert retry_cap == first_cap if failure == "http-503" else first_cap - 2 <= retry_cap <= first_cap
    assert out.cost.provider_calls == 2 and out.cost.orphaned_usd == 0
    assert out.cost.total_usd <= 0.05


def _output_cap(vendor: Vendor, body: dict[str, Any]) -> int:
    return int(body["max_tokens"])


def _refused_url() -> str:
    """A loopback URL nothing listens on: the port was bound, then released."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"


@by_vendor
async def test_a_refused_connection_is_reported_as_itself_and_costs_no_call(vendor: Vendor, tmp_path: Path) -> None:
    out = await _run(vendor, _refused_url(), tmp_path / "runs.db", budget=0.001)
    assert out.status == "error", out.status
    assert not isinstance(out.error, tether.BudgetExhaustedError)
    assert "connection failed" in str(out.error)
    assert out.cost.provider_calls == 0 and out.cost.total_usd == 0 and out.cost.orphaned_usd == 0
    engine = tether.Engine(store=f"sqlite:///{tmp_path / 'runs.db'}")
    try:
        entries = await engine.inspect("r")
    finally:
        await engine.close()
    dispatched = [e for e in entries if e.kind == "decision" and (e.value or {}).get("decision") == "dispatch"]
    assert len(dispatched) == 3  # every attempt was tried (each one with the whole budget), none was refused
    terminal = next(e for e in entries if e.kind == "agent" and e.ref is not None)
    assert terminal.error is not None and terminal.error["kind"] == "transport"
    assert terminal.error.get("reason") is None and terminal.provider_calls == 0
