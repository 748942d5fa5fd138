"""pydantic-ai agents inside tether workflows: ceilings before the call, the tree, sub-agents, usage limits."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel
from pydantic_ai import Agent, RunContext
from pydantic_ai.exceptions import UsageLimitExceeded
from pydantic_ai.usage import UsageLimits

import tether
from tether.contracts.messages import ChatRequest
from tether.integrations import pydantic_ai as tpai
from tether.testing import Reply, ToolCall

PRICE = tether.Price(input=100.0, output=400.0)
"""USD per million tokens: a request of 100 input and 25 output tokens costs 0.02 USD."""


class Forecast(BaseModel):
    city: str
    temp_c: float


def weather_agent(calls: list[str]) -> Agent[None, Forecast]:
    agent = Agent(None, output_type=Forecast, name="weather", instructions="Find the city, then its temperature.")

    @agent.tool_plain
    def find_city(name: str) -> str:
        """Find the city a name means."""
        calls.append(f"find_city {name}")
        return name.upper()

    @agent.tool
    async def temperature(ctx: RunContext[None], city: str) -> float:
        """The temperature in a city, in Celsius."""
        calls.append(f"temperature {city}")
        return 21.5

    return agent


def weather_script(request: ChatRequest, output_tokens: int = 25) -> Reply:
    n = sum(len(m.parts) for m in request.messages if m.role == "tool")
    calls = [ToolCall("find_city", {"name": "paris"}), ToolCall("temperature", {"city": "PARIS"}),
             ToolCall("final_result", {"city": "PARIS", "temp_c": 21.5})]
    return Reply(tool_calls=[calls[min(n, 2)]], input_tokens=100, output_tokens=output_tokens)


def engine_for(model: tether.models.FakeModel, tmp_path: Path) -> tether.Engine:
    return tether.Engine(models=[model], routing={"loop": "fake:m"}, store=f"sqlite:///{tmp_path}/t.db")


async def test_the_agent_runs_with_two_tools_and_a_pydantic_output_and_replays_as_the_same_type(
    tmp_path: Path,
) -> None:
    calls: list[str] = []
    agent = weather_agent(calls)
    fake = tether.models.fake("fake", script=weather_script, prices={"m": PRICE})
    seen: list[Any] = []

    @tether.workflow(name="weather")
    async def weather(ctx: tether.Ctx) -> dict[str, Any]:
        answer = await tpai.run(ctx, agent, "Weather in Paris?")
        seen.append(answer)
        return answer.output.model_dump()

    engine = engine_for(fake, tmp_path)
    first = await engine.run(weather, run_id="wx", budget_usd=1.0)
    assert first.status == "ok" and first.value == {"city": "PARIS", "temp_c": 21.5}
    assert len(fake.requests) == 3 and calls == ["find_city paris", "temperature PARIS"]
    assert first.cost.total_usd == pytest.approx(0.06)
    assert first.cost.by_agent_type == {"pydantic-ai:weather": pytest.approx(0.06)}
    live = seen[0]
    assert isinstance(live.output, Forecast) and not live.replayed
    assert (live.usage.requests, live.usage.tool_calls, live.usage.input_tokens) == (3, 2, 300)
    assert live.usage.cost is not None and float(live.usage.cost) == pytest.approx(0.06)  # pydantic-ai's cost is tether's price of the same calls
    # the request a tether model sends: pydantic-ai's tools and output tool, its instructions as the system prompt
    first_request = fake.requests[0]
    assert [t.name for t in first_request.tools] == ["find_city", "temperature", "final_result"]
    assert first_request.tool_choice == "required"
    assert first_request.messages[0].role == "system" and "Find the city" in first_request.messages[0].text_content

    again = await engine.resume("wx", weather)
    assert again.status == "ok" and again.value == first.value and again.replay.hits == 1
    assert len(fake.requests) == 3 and len(calls) == 2  # nothing asked, nothing run
    replayed = seen[1]
    assert isinstance(replayed.output, Forecast) and replayed.replayed
    assert (replayed.usage.requests, replayed.usage.tool_calls) == (3, 2) and replayed.cost_usd == pytest.approx(0.06)
    assert replayed.usage.cost == live.usage.cost
    assert (await engine.cost("wx")).total_usd == first.cost.total_usd
    await engine.close()


async def test_a_005_usd_ceiling_stops_the_agent_before_the_request_that_would_pass_it(tmp_path: Path) -> None:
    calls: list[str] = []
    agent = weather_agent(calls)
    price = tether.Price(input=10.0, output=400.0)  # 100 input and 50 output tokens: 0.021 USD a request

    def script(request: ChatRequest) -> Reply:
        return weather_script(request, output_tokens=50)

    fake = tether.models.fake("fake", script=script, prices={"m": price}, output_floor=20)

    @tether.workflow(name="weather")
    async def weather(ctx: tether.Ctx) -> Any:
        return (await tpai.run(ctx, agent, "Weather in Paris?")).output.model_dump()

    engine = engine_for(fake, tmp_path)
    out = await engine.run(weather, run_id="wx", budget_usd=0.05)
    # two requests (0.021 USD each) fit; the third would pass 0.05 and is refused before the wire: what is left
    # after its input buys fewer output tokens than the model's floor
    assert out.status == "exhausted"
    assert len(fake.requests) == 2 and calls == ["find_city paris", "temperature PARIS"]
    assert out.cost.total_usd == pytest.approx(0.042) and out.cost.total_usd <= 0.05
    assert "output floor" in str(out.error)
    tree = await engine.agent_tree("wx")
    assert [(a.label, a.status, a.provider_calls) for a in tree.agents] == [("weather", "error", 2)]
    # the refusal is journaled: a resume decides nothing again and pays nothing
    again = await engine.resume("wx", weather)
    assert again.status == "exhausted" and len(fake.requests) == 2
    await engine.close()


async def test_the_stream_of_a_request_is_cut_when_the_ceiling_is_reached(tmp_path: Path) -> None:
    agent: Agent[None, str] = Agent(None, name="writer")

    def script(request: ChatRequest) -> Reply:
        # more input than tether estimated: the clamped request would pass the ceiling, the live meter cuts it
        return Reply(text="word " * 400, input_tokens=100, output_tokens=400, chunks=40)

    fake = tether.models.fake("fake", script=script, prices={"m": PRICE})

    @tether.workflow(name="write")
    async def write(ctx: tether.Ctx) -> str:
        return (await tpai.run(ctx, agent, "Write a long essay.")).output

    engine = engine_for(fake, tmp_path)
    out = await engine.run(write, run_id="w", budget_usd=0.05)
    assert out.status == "exhausted" and "stream cut by the budget" in str(out.error)
    # the clamp asked for what 0.05 USD buys after the estimated input; the stream was cut at the ceiling,
    # overshooting by at most the chunk in flight (10 output tokens, 0.004 USD)
    limit = fake.requests[0].max_output_tokens
    assert limit is not None and limit < 400
    assert 0.05 <= out.cost.total_usd <= 0.05 + 0.004 and out.cost.approximate
    await engine.close()


def expert_and_planner(calls: list[str]) -> tuple[tpai.DurableAgent[None, str], Agent[None, str]]:
    expert = tpai.durable(Agent(None, name="expert", instructions="You are the expert."))
    planner: Agent[None, str] = Agent(None, name="planner", instructions="Plan; ask the expert when unsure.")

    @planner.tool
    async def ask_expert(ctx: RunContext[None], question: str) -> str:
        """Ask the expert a question."""
        calls.append(question)
        answer = await expert.run(question, usage=ctx.usage)  # pydantic-ai's delegation, as written for it
        return answer.output

    return expert, planner


def planner_script(request: ChatRequest) -> Reply:
    system = request.messages[0].text_content
    if "expert" in system and "Plan" not in system:
        return Reply(text="Use a monorepo.", input_tokens=200, output_tokens=25)
    if not any(m.role == "tool" for m in request.messages):
        return Reply(tool_calls=[ToolCall("ask_expert", {"question": "Monorepo?"})], input_tokens=100,
                     output_tokens=25)
    return Reply(text="Plan: monorepo.", input_tokens=100, output_tokens=25)


async def test_a_sub_agent_run_from_a_tool_folds_into_the_tree_and_the_cost_report(tmp_path: Path) -> None:
    calls: list[str] = []
    _, planner = expert_and_planner(calls)
    fake = tether.models.fake("fake", script=planner_script, prices={"m": PRICE})
    usages: list[Any] = []

    @tether.workflow(name="plan")
    async def plan(ctx: tether.Ctx) -> str:
        answer = await tpai.run(ctx, planner, "Plan the repository layout.")
        usages.append(answer.usage)
        return answer.output

    engine = engine_for(fake, tmp_path)
    out = await engine.run(plan, run_id="plan", budget_usd=1.0)
    assert out.status == "ok" and out.value == "Plan: monorepo." and calls == ["Monorepo?"]
    assert len(fake.requests) == 3
    tree = await engine.agent_tree("plan")
    nodes = {a.label: a for a in tree.agents}
    assert nodes["expert"].parent_agent_id == nodes["planner"].agent_id and nodes["planner"].parent_agent_id is None
    assert (nodes["planner"].provider_calls, nodes["expert"].provider_calls) == (2, 1)
    assert nodes["expert"].cost_usd == pytest.approx(0.03) and nodes["planner"].cost_usd == pytest.approx(0.04)
    assert nodes["expert"].tokens == 225 and nodes["planner"].tokens == 250
    assert out.cost.total_usd == pytest.approx(0.07)
    assert out.cost.by_agent_type == {"pydantic-ai:planner": pytest.approx(0.04),
                                      "pydantic-ai:expert": pytest.approx(0.03)}
    events = await engine.agent_events("plan")
    spawn = [e for e in events if e.kind == "spawn"]
    assert [(e.agent_id, e.child_agent_id) for e in spawn] == [(nodes["planner"].agent_id, nodes["expert"].agent_id)]
    draws = [(e.agent_id, e.tokens) for e in events if e.kind == "budget_draw"]
    assert sorted(draws) == sorted([(nodes["planner"].agent_id, 125), (nodes["expert"].agent_id, 225),
                                    (nodes["planner"].agent_id, 125)])
    # pydantic-ai's own accounting counts the delegated run too (usage=ctx.usage)
    assert usages[0].requests == 3 and usages[0].input_tokens == 400

    command = [str(Path(sys.executable).with_name("tether")), "tree", "plan", "--store", f"sqlite:///{tmp_path}/t.db",
               "--json"]
    cli = await asyncio.to_thread(subprocess.run, command, capture_output=True, text=True, timeout=60)
    assert cli.returncode == 0, cli.stderr
    drawn = {a["label"]: (a["parent_agent_id"], a["provider_calls"], a["tokens"]) for a in json.loads(cli.stdout)["agents"]}
    assert drawn == {"planner": (None, 2, 250), "expert": (nodes["planner"].agent_id, 1, 225)}

    again = await engine.resume("plan", plan)
    assert again.status == "ok" and len(fake.requests) == 3 and calls == ["Monorepo?"]
    assert usages[1].requests == 3  # the replayed run reports what pydantic-ai counted live
    await engine.close()


async def test_pydantic_ai_usage_limits_still_stop_the_run_and_replay_as_the_same_error(tmp_path: Path) -> None:
    calls: list[str] = []
    agent = weather_agent(calls)
    fake = tether.models.fake("fake", script=weather_script, prices={"m": PRICE})

    @tether.workflow(name="weather")
    async def weather(ctx: tether.Ctx, limits: dict[str, float]) -> str:
        try:
            await tpai.run(ctx, agent, "Weather in Paris?", usage_limits=UsageLimits(**limits))
        except UsageLimitExceeded as exc:
            return f"limited: {exc}"
        return "finished"

    @tether.workflow(name="capped")
    async def capped_weather(ctx: tether.Ctx) -> str:
        try:
            await tpai.run(ctx, agent, "Weather in Paris?", max_turns=1)
        except UsageLimitExceeded as exc:
            return f"limited: {exc}"
        return "finished"

    engine = engine_for(fake, tmp_path)
    out = await engine.run(weather, {"limits": {"request_limit": 2}}, run_id="req", budget_usd=1.0)
    assert out.status == "ok" and out.value.startswith("limited: ") and "request_limit of 2" in out.value
    assert len(fake.requests) == 2  # the third request never left
    again = await engine.resume("req", weather, {"limits": {"request_limit": 2}})
    assert again.value == out.value and len(fake.requests) == 2  # the limit is journaled, not re-run

    tokens = await engine.run(weather, {"limits": {"output_tokens_limit": 40}}, run_id="tok", budget_usd=1.0)
    assert tokens.value.startswith("limited: ") and "output_tokens_limit" in tokens.value
    assert len(fake.requests) == 4  # the second request's 25 output tokens passed 40
    tree = await engine.agent_tree("tok")
    assert [(a.status, a.provider_calls) for a in tree.agents] == [("limit", 2)]

    # tether's max_turns stops it the same way (a usage limit, before the request)
    turns = await engine.run(weather, {"limits": {}}, run_id="turns", budget_usd=1.0)
    assert turns.value == "finished"
    capped = await engine.run(capped_weather, run_id="capped", budget_usd=1.0)
    assert capped.value.startswith("limited: max_turns=1 model turns reached") and len(fake.requests) == 8

    # pydantic-ai's own cost_limit sees tether's prices; it compares what was spent, after the fact
    spent = await engine.run(weather, {"limits": {"cost_limit": 0.03}}, run_id="usd", budget_usd=1.0)
    assert spent.value.startswith("limited: ") and "cost_limit" in spent.value
    assert spent.cost.total_usd == pytest.approx(0.04)  # the request that crossed 0.03 was sent and paid
    await engine.close()


async def test_a_durable_agent_outside_tether_is_the_plain_agent_and_inside_a_workflow_needs_ctx(
    tmp_path: Path,
) -> None:
    from pydantic_ai.models.test import TestModel

    plain = tpai.durable(Agent(TestModel(custom_output_text="plain"), name="plain"))
    outside = await plain.run("hi")
    assert outside.output == "plain" and outside.result is None and not outside.replayed

    fake = tether.models.fake("fake", script=[Reply(text="from tether", input_tokens=10, output_tokens=2)],
                              prices={"m": PRICE})

    @tether.workflow(name="forgot")
    async def forgot(ctx: tether.Ctx) -> str:
        return (await plain.run("hi")).output

    @tether.workflow(name="mapped")
    async def mapped(ctx: tether.Ctx) -> str:
        return (await plain.run("hi", ctx=ctx)).output

    engine = engine_for(fake, tmp_path)
    bad = await engine.run(forgot, run_id="forgot")
    assert bad.status == "error" and "pass ctx=ctx" in str(bad.error)
    # a TestModel maps to no tether adapter: say so before any call
    unmapped = await engine.run(mapped, run_id="mapped")
    assert unmapped.status == "error" and "model='adapter:model'" in str(unmapped.error)
    assert fake.requests == []
    await engine.close()


async def test_parallel_tool_calls_native_output_and_a_stream_handler_take_the_same_journaled_path(
    tmp_path: Path,
) -> None:
    from pydantic_ai import NativeOutput

    class Sum(BaseModel):
        a: int
        b: int

    agent = Agent(None, output_type=NativeOutput(Sum), name="adder")
    ran: list[str] = []

    @agent.tool_plain
    async def one() -> int:
        """One."""
        await asyncio.sleep(0.01)  # finishes after `two`: both results are checkpointed, one at a time
        ran.append("one")
        return 1

    @agent.tool_plain
    def two() -> int:
        """Two."""
        ran.append("two")
        return 2

    def script(request: ChatRequest) -> Reply:
        if not any(m.role == "tool" for m in request.messages):
            return Reply(tool_calls=[ToolCall("one", {}), ToolCall("two", {})], input_tokens=50, output_tokens=10)
        return Reply(text='{"a": 1, "b": 2}', input_tokens=80, output_tokens=10)

    events: list[str] = []

    async def handler(ctx: RunContext[None], stream: Any) -> None:
        async for event in stream:
            events.append(type(event).__name__)

    fake = tether.models.fake("fake", script=script, prices={"m": PRICE}, structured_output="native")

    @tether.workflow(name="add")
    async def add(ctx: tether.Ctx) -> dict[str, int]:
        answer = await tpai.run(ctx, agent, "Add one and two.", event_stream_handler=handler)
        return answer.output.model_dump()

    engine = engine_for(fake, tmp_path)
    out = await engine.run(add, run_id="add", budget_usd=1.0)
    assert out.status == "ok" and out.value == {"a": 1, "b": 2} and sorted(ran) == ["one", "two"]
    assert all(r.output_format is not None for r in fake.requests)  # the schema went natively, as tether sends it
    assert "FinalResultEvent" in events
    ledger = await engine.effect_ledger("add")
    assert sorted((r.tool, r.outcome) for r in ledger) == [("one", "ok"), ("two", "ok")]
    transcript = await engine.transcript("add", 1)
    assert [m.role for m in transcript.messages] == ["user", "assistant", "tool", "assistant"]
    await engine.close()


def test_a_pydantic_ai_model_maps_to_the_tether_adapter_of_its_provider() -> None:
    assert tpai.tether_model("openai:gpt-4o") == "openai:gpt-4o"
    assert tpai.tether_model("anthropic:claude-sonnet-4-5") == "anthropic:claude-sonnet-4-5"
    assert tpai.tether_model("google:gemini-2.5-flash") == "google:gemini-2.5-flash"
    assert tpai.tether_model("google-cloud:gemini-2.5-pro") == "vertex:gemini-2.5-pro"
    assert tpai.tether_model("ollama:qwen3:8b") == "ollama:qwen3:8b"
    assert tpai.tether_model(None) is None
    with pytest.raises(tether.ConfigError, match="maps to no tether adapter"):
        tpai.tether_model("test")


def test_the_bridge_without_pydantic_ai_installed_says_which_extra_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib

    for name in [m for m in sys.modules if m.startswith("tether.integrations.pydantic_ai")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "pydantic_ai", None)  # as if it were not installed
    with pytest.raises(tether.ConfigError, match=r"pip install 'tether\[pydantic-ai\]'"):
        importlib.import_module("tether.integrations.pydantic_ai")


def test_import_tether_imports_no_pydantic_ai() -> None:
    code = "import sys, tether, tether.testing; print(sorted(m for m in sys.modules if m.startswith('pydantic_ai')))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.strip() == "[]", done.stderr
