"""Each real adapter under the engine: the official SDK over a mock transport, then through a cassette."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anthropic
import httpx2
import openai
import pytest

import tether
from tether.agents.dispatch import estimate_input_tokens
from tether.contracts import ChatEvent, ChatModel, ChatRequest, ModelCaps, Signal
from tether.models.anthropic_messages import AnthropicModel
from tether.models.openai_chat import OpenAICompatibleModel
from tether.models.openai_responses import OpenAIModel
from tether.pricing import affordable_output_tokens
from tether.testing import Reply, ToolCall, cassette
from tether.testing.wire import Vendor, responder

KEY = "sk-test-ENGINE-KEY-123456"
BASE = "http://localhost:11434/v1"
CITY = "Paris"
EXPECTED = {"hello": "Bonjour, Paris!", "weather": "Forecast: 12C and sunny in Paris"}


@tether.tool
def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"12C and sunny in {city}"


@tether.workflow(name="duo")
async def duo(ctx: tether.Ctx, city: str) -> dict[str, Any]:
    hello = await ctx.agent(f"Greet {city} in one line.", label="plain")
    weather = await ctx.agent(f"What is the weather in {city}?", tools=[get_weather], label="tools")
    return {"hello": hello, "weather": weather}


def tool_output(vendor: Vendor, body: dict[str, Any]) -> str | None:
    """The tool result the request carries last, read from the vendor's own wire shape."""
    if vendor == "anthropic":
        blocks = body["messages"][-1]["content"]
        return next((b["content"] for b in blocks if b.get("type") == "tool_result"), None)
    if vendor == "openai":
        last = body["input"][-1]
        return last["output"] if last.get("type") == "function_call_output" else None
    last = body["messages"][-1]
    return last["content"] if last["role"] == "tool" else None


def answers(vendor: Vendor) -> Callable[[dict[str, Any]], Reply]:
    """A provider that answers by what the request holds: a tool result, tools on offer, or neither."""

    def answer(body: dict[str, Any]) -> Reply:
        result = tool_output(vendor, body)
        if result is not None:
            return Reply(text=f"Forecast: {result}", input_tokens=120, output_tokens=9)
        if body.get("tools"):
            return Reply(tool_calls=[ToolCall("get_weather", {"city": CITY})], input_tokens=80, output_tokens=12)
        return Reply(text="Bonjour, Paris!", input_tokens=20, output_tokens=4)

    return answer


class Server:
    """The mock transport's far end: answers with synthesized SSE and keeps every request body."""

    def __init__(self, vendor: Vendor, *, refuse: bool = False) -> None:
        self.answer = responder(vendor, answers(vendor))
        self.refuse = refuse
        self.requests: list[httpx2.Request] = []

    def handle(self, request: httpx2.Request) -> httpx2.Response:
        self.requests.append(request)
        if self.refuse:
            pytest.fail(f"replay went to the network: {request.method} {request.url}")
        return self.answer(request)

    def http(self) -> httpx2.AsyncClient:
        return httpx2.AsyncClient(transport=httpx2.MockTransport(self.handle))


@dataclass(frozen=True)
class Case:
    vendor: Vendor
    model: str
    make: Callable[[httpx2.AsyncClient], ChatModel]
    max_field: str

    def adapter(self, server: Server) -> ChatModel:
        return self.make(server.http())

    def ref(self, adapter: ChatModel) -> str:
        return f"{adapter.id}:{self.model}"


CASES = [
    Case(
        "anthropic",
        "claude-sonnet-4-6",
        lambda http: AnthropicModel(client=anthropic.AsyncAnthropic(api_key=KEY, http_client=http, max_retries=0)),
        "max_tokens",
    ),
    Case(
        "openai",
        "gpt-4.1",
        lambda http: OpenAIModel(client=openai.AsyncOpenAI(api_key=KEY, http_client=http, max_retries=0)),
        "max_output_tokens",
    ),
    Case(
        "openai-compatible",
        "qwen3:8b",
        lambda http: OpenAICompatibleModel(
            id="ollama",
            base_url=BASE,
            client=openai.AsyncOpenAI(api_key=KEY, base_url=BASE, http_client=http, max_retries=0),
        ),
        "max_tokens",
    ),
]
by_vendor = pytest.mark.parametrize("case", CASES, ids=lambda c: c.vendor)


async def run_duo(model: ChatModel, ref: str, store: str, **options: Any) -> tether.RunOutcome:
    engine = tether.Engine(models=[model], routing={"loop": ref}, store=store)
    try:
        return await engine.run(duo, {"city": CITY}, run_id="duo-1", **options)
    finally:
        await engine.close()


@by_vendor
async def test_the_workflow_runs_through_the_real_sdk_over_the_wire(case: Case, tmp_path: Path) -> None:
    server = Server(case.vendor)
    model = case.adapter(server)
    outcome = await run_duo(model, case.ref(model), f"sqlite:///{tmp_path}/live.db")
    assert outcome.status == "ok", outcome.error
    assert outcome.value == EXPECTED
    assert len(server.requests) == 3  # plain: one turn; tools: the call, then the answer
    assert outcome.cost.provider_calls == 3
    bodies = [json.loads(r.content) for r in server.requests]
    assert sum(tool_output(case.vendor, b) == "12C and sunny in Paris" for b in bodies) == 1


@by_vendor
async def test_a_recorded_cassette_replays_the_workflow_with_zero_requests(case: Case, tmp_path: Path) -> None:
    path = tmp_path / f"{case.vendor}.json"
    live = Server(case.vendor)
    recorder = cassette(case.adapter(live), path, mode="record")
    recorded = await run_duo(recorder, case.ref(recorder), f"sqlite:///{tmp_path}/record.db")
    assert recorded.status == "ok" and recorded.value == EXPECTED
    assert (recorder.recorded, len(live.requests)) == (3, 3)

    offline = Server(case.vendor, refuse=True)
    player = cassette(case.adapter(offline), path, mode="replay")
    replayed = await run_duo(player, case.ref(player), f"sqlite:///{tmp_path}/replay.db")
    assert replayed.status == "ok", replayed.error
    assert replayed.value == recorded.value
    assert offline.requests == []
    assert (player.replayed, player.recorded) == (3, 0)
    player.assert_all_used()
    assert KEY not in path.read_text()


class Spy:
    """Passes calls through to an adapter and keeps the canonical requests the loop sent."""

    def __init__(self, inner: ChatModel) -> None:
        self.inner, self.id, self.family = inner, inner.id, inner.family
        self.requests: list[ChatRequest] = []

    def caps(self, model: str) -> ModelCaps:
        return self.inner.caps(model)

    def stream(self, request: ChatRequest, signal: Signal | None = None) -> AsyncIterator[ChatEvent]:
        self.requests.append(request)
        return self.inner.stream(request, signal)


@tether.workflow(name="one")
async def one(ctx: tether.Ctx) -> Any:
    return await ctx.agent("Greet Paris in one line.", label="plain", est_cost=0.001)


@pytest.mark.parametrize("case", CASES[:2], ids=lambda c: c.vendor)
async def test_a_budget_clamped_turn_sends_the_clamped_output_cap_on_the_wire(case: Case, tmp_path: Path) -> None:
    server = Server(case.vendor)
    spy = Spy(case.adapter(server))
    ref = case.ref(spy)
    price = tether.Price(input=3.0, output=15.0)
    budget = 0.01
    engine = tether.Engine(
        models=[spy], routing={"loop": ref}, store=f"sqlite:///{tmp_path}/t.db", prices=tether.PriceTable({ref: price})
    )
    outcome = await engine.run(one, run_id="clamped", budget_usd=budget)
    await engine.close()
    assert outcome.status == "ok", outcome.error
    (request,) = spy.requests
    # The first turn of the run: nothing spent yet, so the remaining budget is the whole ceiling.
    expected = affordable_output_tokens(price, estimate_input_tokens(request), budget)
    assert expected is not None and 0 < expected < 4096
    assert request.max_output_tokens == expected
    assert json.loads(server.requests[0].content)[case.max_field] == expected
