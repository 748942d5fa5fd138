"""Which tether model serves a bridged pydantic-ai agent: a custom adapter id, a deferred string, no model at all."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx2
import openai
import pytest
from pydantic_ai import Agent
from pydantic_ai.exceptions import UserError

import tether
from tether.integrations import pydantic_ai as tpai
from tether.testing import Reply, ToolCall
from tether.testing.wire import responder

BASE = "http://127.0.0.1:8088/v1"
PRICE = tether.Price(input=100.0, output=400.0)
"""USD per million tokens: a request of 100 input and 25 output tokens costs 0.02 USD."""

USER_MODULE = '''
from pydantic_ai import Agent
from tether.integrations import pydantic_ai as tpai

tiny = Agent(tpai.AdapterModel("local:tiny"), name="tiny", instructions="Answer in one line.")


@tiny.tool_plain
def lookup(topic: str) -> str:
    """Notes on a topic."""
    return f"notes on {topic}"
'''


def answer(body: dict[str, Any]) -> Reply:
    if not any(m["role"] == "tool" for m in body["messages"]):
        return Reply(tool_calls=[ToolCall("lookup", {"topic": "tides"})], input_tokens=100, output_tokens=25)
    return Reply(text="Tides follow the moon.", input_tokens=100, output_tokens=25)


def local_server(bodies: list[dict[str, Any]]) -> tether.contracts.ChatModel:
    """`tether.models.openai_compatible("local", ...)` on a Chat Completions server behind the real `openai` SDK
    (a mock transport: no network), every request body recorded."""
    handle = responder("openai-compatible", answer)

    def record(request: httpx2.Request) -> httpx2.Response:
        bodies.append(json.loads(request.content))
        return handle(request)

    client = openai.AsyncOpenAI(api_key="unused", base_url=BASE, max_retries=0,
                                http_client=httpx2.AsyncClient(transport=httpx2.MockTransport(record)))
    caps = {"tiny": tether.contracts.ModelCaps(price=PRICE)}
    return tether.models.openai_compatible("local", BASE, client=client, model_caps=caps)


def import_user_module(path: Path) -> ModuleType:
    """Import a user's module as a program would: its agent is built at import time."""
    path.write_text(USER_MODULE)
    spec = importlib.util.spec_from_file_location("user_agents", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def engine_for(bodies: list[dict[str, Any]], tmp_path: Path, **options: Any) -> tether.Engine:
    return tether.Engine(models=[local_server(bodies)], store=f"sqlite:///{tmp_path}/t.db", **options)


async def test_an_agent_built_at_import_on_a_custom_adapter_id_is_served_by_that_adapter_durably(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    for var in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "OLLAMA_BASE_URL"):
        monkeypatch.delenv(var, raising=False)  # pydantic-ai builds no provider, so it reads none of these
    user = import_user_module(tmp_path / "user_agents.py")
    assert tpai.tether_model(user.tiny.model) == "local:tiny"
    bodies: list[dict[str, Any]] = []

    @tether.workflow(name="tides")
    async def tides(ctx: tether.Ctx) -> str:
        return (await tpai.run(ctx, user.tiny, "Why are there tides?")).output

    engine = engine_for(bodies, tmp_path)
    first = await engine.run(tides, run_id="tides", budget_usd=0.05)
    assert first.status == "ok" and first.value == "Tides follow the moon."
    assert [b["model"] for b in bodies] == ["tiny", "tiny"]  # both requests reached the `local` adapter
    assert [t["function"]["name"] for t in bodies[0]["tools"]] == ["lookup"]
    assert first.cost.total_usd == pytest.approx(0.04)
    assert first.cost.by_agent_type == {"pydantic-ai:tiny": pytest.approx(0.04)}

    again = await engine.resume("tides", tides)
    assert again.status == "ok" and again.value == first.value and again.replay.hits == 1
    assert len(bodies) == 2  # replayed from the journal: nothing sent
    assert (await engine.cost("tides")).total_usd == first.cost.total_usd
    await engine.close()


async def test_the_adapter_model_answers_only_inside_a_tether_run() -> None:
    agent = Agent(tpai.AdapterModel("local:tiny"), name="tiny")
    with pytest.raises(tether.ConfigError, match="served by tether's adapter 'local'"):
        await agent.run("Hello?")
    with pytest.raises(tether.ConfigError, match="served by tether's adapter 'local'"):
        await tpai.durable(agent).run("Hello?")
    with pytest.raises(tether.ConfigError, match="not of the form 'adapter:model'"):
        tpai.AdapterModel("tiny")


async def test_a_plain_string_with_a_custom_prefix_needs_defer_model_check_and_then_maps_by_its_prefix(
    tmp_path: Path,
) -> None:
    with pytest.raises(UserError, match="Unknown model: local:tiny"):  # pydantic-ai's, in its constructor
        Agent("local:tiny")
    deferred = Agent("local:tiny", name="tiny", defer_model_check=True)
    bodies: list[dict[str, Any]] = []

    @tether.workflow(name="hello")
    async def hello(ctx: tether.Ctx) -> str:
        return (await tpai.run(ctx, deferred, "Why are there tides?")).output

    engine = engine_for(bodies, tmp_path)
    out = await engine.run(hello, run_id="deferred", budget_usd=0.05)
    assert out.status == "ok" and [b["model"] for b in bodies] == ["tiny", "tiny"]
    await engine.close()


async def test_an_agent_with_no_model_is_served_by_the_engine_loop_route_and_without_one_is_refused_before_a_call(
    tmp_path: Path,
) -> None:
    agent = Agent(None, name="plain")
    served: list[str | None] = []

    @tether.workflow(name="plain")
    async def plain(ctx: tether.Ctx) -> str:
        answer = await tpai.run(ctx, agent, "Why are there tides?")
        assert answer.result is not None
        served.append(answer.result.served_by)
        return answer.output

    bodies: list[dict[str, Any]] = []
    routed = engine_for(bodies, tmp_path, routing={"loop": "local:tiny"})
    out = await routed.run(plain, run_id="routed", budget_usd=0.05)
    assert out.status == "ok" and served == ["local:tiny"] and [b["model"] for b in bodies] == ["tiny", "tiny"]
    await routed.close()

    bodies.clear()
    (tmp_path / "unrouted").mkdir()
    unrouted = engine_for(bodies, tmp_path / "unrouted")
    out = await unrouted.run(plain, run_id="unrouted", budget_usd=0.05)
    assert out.status == "error" and "no model for role 'loop'" in str(out.error)
    assert bodies == []  # refused before any request
    await unrouted.close()
