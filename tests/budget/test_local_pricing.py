"""Local models: a server with no bill is priced at zero, so a USD ceiling admits it and token ceilings bound it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx2
import openai
import pytest

import tether
from tether.models.openai_chat import OpenAICompatibleModel
from tether.pricing import affordable_output_tokens, cost_usd
from tether.testing import Reply, ToolCall
from tether.testing.wire import responder

BASE = "http://localhost:11434/v1"
REF = "ollama:qwen3:8b"


def ollama(answer: Any, bodies: list[dict[str, Any]], **options: Any) -> OpenAICompatibleModel:
    """An Ollama-shaped Chat Completions server behind the real `openai` SDK (a mock transport, no network)."""
    handle = responder("openai-compatible", answer)

    def record(request: httpx2.Request) -> httpx2.Response:
        import json

        bodies.append(json.loads(request.content))
        return handle(request)

    http = httpx2.AsyncClient(transport=httpx2.MockTransport(record))
    client = openai.AsyncOpenAI(api_key="unused", base_url=BASE, http_client=http, max_retries=0)
    return OpenAICompatibleModel(id="ollama", base_url=BASE, client=client, **options)


@tether.tool
def lookup(topic: str) -> str:
    """Look a topic up."""
    return f"notes on {topic}"


@tether.workflow(name="local")
async def local(ctx: tether.Ctx, tools: bool) -> str:
    return await ctx.agent("Summarize the notes.", tools=[lookup] if tools else [], label="local")


def test_price_free_is_a_priced_row_that_costs_nothing() -> None:
    free = tether.Price.free()
    assert free == tether.Price(input=0.0, output=0.0) and free.is_free
    assert not tether.Price(input=0.0, output=0.1).is_free
    assert cost_usd(tether.Usage(input_tokens=10_000, output_tokens=5_000), free) == 0.0
    assert affordable_output_tokens(free, 10_000, 0.01) is None  # money never limits its output


def test_a_wildcard_row_prices_every_model_of_an_adapter_an_exact_row_wins() -> None:
    big = tether.Price(input=1.0, output=2.0)
    table = tether.PriceTable({"ollama:*": tether.Price.free(), "ollama:big": big})
    assert table.get("ollama:qwen3:8b") == tether.Price.free()
    assert table.get("ollama:big") == big
    assert table.get("vllm:qwen3:8b") is None
    assert table.get("anthropic:claude-sonnet-4-5") is not None  # bundled rows are untouched


async def test_a_usd_ceiling_accepts_a_local_model_and_journals_its_calls_at_zero(tmp_path: Path) -> None:
    bodies: list[dict[str, Any]] = []
    model = ollama(lambda body: Reply(text="A summary.", input_tokens=1_200, output_tokens=300), bodies, local=True)
    assert model.caps("qwen3:8b").price == tether.Price.free()
    engine = tether.Engine(models=[model], routing={"loop": REF}, store=f"sqlite:///{tmp_path}/t.db")
    out = await engine.run(local, {"tools": False}, run_id="free", budget_usd=0.01)
    assert out.status == "ok" and out.value == "A summary."
    assert out.cost.total_usd == 0.0 and out.cost.unpriced == {} and not out.warnings
    assert (out.usage.input_tokens, out.usage.output_tokens) == (1_200, 300)
    terminal = next(e for e in await engine.inspect("free") if e.kind == "agent" and e.ref is not None)
    assert terminal.cost_usd == 0.0 and terminal.unpriced is None  # priced, at zero: not "unpriced"
    assert bodies[0]["max_tokens"] == 4_096  # no money clamp on a free model
    await engine.close()


async def test_without_local_the_same_server_is_refused_under_a_usd_ceiling(tmp_path: Path) -> None:
    bodies: list[dict[str, Any]] = []
    model = ollama(lambda body: Reply(text="A summary."), bodies)
    engine = tether.Engine(models=[model], routing={"loop": REF}, store=f"sqlite:///{tmp_path}/t.db")
    out = await engine.run(local, {"tools": False}, run_id="unpriced", budget_usd=0.01)
    assert out.status == "error" and "unpriced model under a USD ceiling" in str(out.error)
    assert bodies == []
    await engine.close()


async def test_a_token_ceiling_still_stops_a_local_model(tmp_path: Path) -> None:
    bodies: list[dict[str, Any]] = []

    def forever(body: dict[str, Any]) -> Reply:  # a model that never stops calling its tool
        turn = sum(1 for m in body["messages"] if m["role"] == "tool")
        return Reply(tool_calls=[ToolCall("lookup", {"topic": f"part {turn}"})], input_tokens=150, output_tokens=50)

    model = ollama(forever, bodies, local=True)
    engine = tether.Engine(models=[model], routing={"loop": REF}, store=f"sqlite:///{tmp_path}/t.db")
    tree = tether.Containment(max_agents=4, max_concurrent=2, max_depth=2, max_tokens=500)
    out = await engine.run(local, {"tools": True}, run_id="tokens", budget_usd=0.01, containment=tree)
    assert out.status == "exhausted" and out.cost.total_usd == 0.0
    assert out.usage.input_tokens + out.usage.output_tokens <= 500
    assert len(bodies) < 5  # at 200 tokens a turn, the ceiling stops the loop within its third turn
    assert all(b["max_tokens"] <= 500 for b in bodies)  # each turn's output clamped to the tokens left
    await engine.close()


def test_local_and_a_price_provider_together_are_a_config_error() -> None:
    with pytest.raises(tether.ConfigError, match="pass one of the two"):
        tether.models.openai_compatible("ollama", BASE, local=True, price_provider="groq")


def test_a_local_model_keeps_a_price_given_in_model_caps() -> None:
    priced = tether.Price(input=0.5, output=1.0)
    caps = {"big": tether.contracts.ModelCaps(price=priced)}
    model = tether.models.openai_compatible("vllm", BASE, local=True, model_caps=caps)
    assert model.caps("big").price == priced and model.caps("small").price == tether.Price.free()
