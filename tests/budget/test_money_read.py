"""What a user reads about money: pricing checked before reserves, the refusal that exhausted a run, parked
agents in every count, and a clamp-cut reply's paid output on its error."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from starlette.testclient import TestClient

import tether
from tether.server import create_app
from tether.testing import Reply, ToolCall

PRICE = tether.Price(input=10.0, output=20.0)
TETHER = Path(sys.executable).with_name("tether")

APP = '''
import tether
from tether.testing import Reply

unpriced = tether.models.fake("fake", script=lambda r: Reply(text="free?", input_tokens=20, output_tokens=5))
engine = tether.Engine(models=[unpriced], routing={"loop": "fake:m"})


@tether.workflow
async def ask(ctx: tether.Ctx) -> str:
    return await ctx.agent("hello")


@tether.workflow
async def fan(ctx: tether.Ctx) -> list:
    out = await ctx.parallel([lambda i=i: ctx.agent(f"t{i}", est_cost=0.02) for i in range(4)], settle=True)
    return [o.status for o in out]
'''


async def no_sleep(_: float) -> None:
    return None


def tether_cli(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "moneyapp.py").write_text(textwrap.dedent(APP))
    env = {**os.environ, "PYTHONPATH": str(tmp_path), "COLUMNS": "200"}
    return subprocess.run([str(TETHER), *args, "--store", f"sqlite:///{tmp_path}/t.db"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)


def test_an_unpriced_model_under_a_small_ceiling_is_a_pricing_error_and_allow_unpriced_runs_it(
    tmp_path: Path,
) -> None:
    refused = tether_cli(tmp_path, "run", "moneyapp:ask", "--budget", "0.05", "--run-id", "a", "--json")
    doc = json.loads(refused.stdout)
    assert refused.returncode == 1 and doc["status"] == "error"
    assert doc["error"]["type"] == "PricingError" and "--allow-unpriced" in doc["error"]["message"]
    allowed = tether_cli(tmp_path, "run", "moneyapp:ask", "--budget", "0.05", "--run-id", "b", "--allow-unpriced",
                         "--json")
    doc = json.loads(allowed.stdout)
    assert allowed.returncode == 0 and doc["value"] == "free?", allowed.stdout + allowed.stderr
    assert doc["cost"]["unpriced"]["fake:m"]["input_tokens"] == 20 and doc["warnings"]
    # a resume may accept unpriced models for a run that started without (journaled), never the reverse
    resumed = tether_cli(tmp_path, "resume", "a", "--app", "moneyapp:engine", "--workflow", "moneyapp:ask",
                         "--allow-unpriced", "--reason", "local model", "--json")
    assert resumed.returncode == 0 and json.loads(resumed.stdout)["value"] == "free?", resumed.stdout


async def test_an_exhausted_run_whose_parallel_branch_was_refused_says_which_refusal_stopped_it(
    tmp_path: Path,
) -> None:
    model = tether.models.fake("fake", script=lambda r: Reply(text="ok", input_tokens=1_000, output_tokens=500),
                               prices={"m": PRICE})
    engine = tether.Engine(models=[model], routing={"loop": "fake:m"}, store=f"sqlite:///{tmp_path}/t.db",
                           sleep=no_sleep)

    @tether.workflow(name="fan")
    async def fan(ctx: tether.Ctx) -> Any:
        try:
            out = await ctx.parallel([lambda i=i: ctx.agent(f"t{i}", est_cost=0.02) for i in range(4)], settle=True)
        except tether.BudgetExhaustedError as exc:  # the body keeps what the admitted branches did
            out = exc.data["outcomes"]
        return [o.status for o in out]

    async def settled(run_id: str) -> tether.RunOutcome:
        out = await engine.run(fan, run_id=run_id, budget_usd=0.05)
        assert out.status == "exhausted" and out.value == ["ok", "ok", "error", "error"]
        return out

    out = await settled("r")
    assert isinstance(out.error, tether.BudgetExhaustedError)  # typed, though the body caught it (issue 40, item 6)
    data = out.error.data
    assert data["kind"] == "budget" and data["account"] == "run" and data["what"] == "agent 't2'"
    assert data["reserve_usd"] == 0.02 and data["remaining_usd"] == pytest.approx(0.01)
    assert data["reason"] is tether.StopReason.USD_CEILING
    assert "the reserve of 0.02 for agent 't2' does not fit" in str(out.error)
    resumed = await engine.resume("r", fan)  # read back on resume, never decided again: the same refusal
    assert resumed.status == "exhausted" and isinstance(resumed.error, tether.BudgetExhaustedError)
    assert str(resumed.error) == str(out.error) and resumed.error.data == data
    # the API and the inspector's Outcome read the settle entry: the refusal's JSON form
    client = TestClient(create_app(engine, mode="store"), base_url="http://localhost")
    detail = client.get("/api/runs/r").json()
    assert detail["outcome"]["error"] == {"type": "BudgetExhaustedError", "code": "budget-exhausted",
                                          "message": str(out.error), "data": {**data, "reason": "usd-ceiling"}}
    await engine.close()


async def test_an_agent_parked_on_an_approval_counts_its_calls_tokens_and_usd_everywhere(tmp_path: Path) -> None:
    @tether.tool(needs_approval=True)
    def publish(text: str) -> str:
        """Publish a text."""
        return "published"

    @tether.tool
    def draft(topic: str) -> str:
        """Draft a text."""
        return f"draft on {topic}"

    def script(request: Any) -> Reply:
        if not request.tools:
            return Reply(text="quick answer", input_tokens=100, output_tokens=20)
        tools_seen = sum(1 for m in request.messages if m.role == "tool")
        if tools_seen == 0:
            return Reply(tool_calls=[ToolCall("draft", {"topic": "x"})], input_tokens=100, output_tokens=20)
        return Reply(tool_calls=[ToolCall("publish", {"text": "y"})], input_tokens=120, output_tokens=30)

    spans = InMemorySpanExporter()
    tracing = TracerProvider()
    tracing.add_span_processor(SimpleSpanProcessor(spans))
    model = tether.models.fake("fake", script=script, prices={"m": PRICE})
    engine = tether.Engine(models=[model], routing={"loop": "fake:m"}, store=f"sqlite:///{tmp_path}/t.db",
                           tracer_provider=tracing)

    @tether.workflow(name="two")
    async def two(ctx: tether.Ctx) -> Any:
        return await ctx.parallel([lambda: ctx.agent("quick", label="quick"),
                                   lambda: ctx.agent("writer", tools=[draft, publish], label="writer")])

    out = await engine.run(two, run_id="r", budget_usd=1.0)
    assert out.status == "suspended" and model.calls == 3
    assert out.cost.provider_calls == 3  # the parked writer's two calls with the quick agent's one
    parked_usd = (100 * 10 + 20 * 20 + 120 * 10 + 30 * 20) / 1e6
    assert out.cost.usage.input_tokens == 100 + 100 + 120 and out.cost.usage.output_tokens == 20 + 20 + 30
    tree = await engine.agent_tree("r")
    writer = next(n for n in tree.agents if n.label == "writer")
    assert writer.status == "running" and writer.tokens == 100 + 20 + 120 + 30
    assert writer.cost_usd == pytest.approx(parked_usd) and writer.provider_calls == 2
    assert sum(n.cost_usd for n in tree.agents) == pytest.approx(out.cost.total_usd)
    [span] = [s for s in spans.get_finished_spans() if s.name == "invoke_agent writer"]
    attrs = dict(span.attributes or {})
    assert attrs["tether.parked"] is True and attrs["tether.provider_calls"] == 2
    assert attrs["tether.cost_usd"] == pytest.approx(parked_usd)
    assert attrs["gen_ai.usage.input_tokens"] == 220 and attrs["gen_ai.usage.output_tokens"] == 50
    await engine.close()


async def test_a_reply_cut_by_the_budget_clamp_carries_its_paid_text_usage_and_finish_reason(
    tmp_path: Path,
) -> None:
    model = tether.models.fake("fake", script=lambda r: Reply(text="word " * 400, input_tokens=50), prices={"m": PRICE})
    engine = tether.Engine(models=[model], routing={"loop": "fake:m"}, store=f"sqlite:///{tmp_path}/t.db")

    @tether.workflow(name="essay")
    async def essay(ctx: tether.Ctx) -> Any:
        try:
            return await ctx.agent("Write an essay.")
        except tether.BudgetExhaustedError as exc:
            return {"paid": exc.data["output"], "usage": exc.data["usage"].model_dump(),
                    "finish_reason": exc.data["finish_reason"], "cost_usd": exc.data["cost_usd"],
                    "message": exc.message}

    # 0.004 USD buys 200 output tokens after the prompt: the 400-token reply is cut there
    out = await engine.run(essay, run_id="r", budget_usd=0.004)
    assert out.status == "exhausted"
    got = out.value
    assert got["finish_reason"] == "max_tokens" and got["paid"] and got["paid"].startswith("word word")
    assert got["usage"]["output_tokens"] > 0 and got["cost_usd"] == pytest.approx(out.cost.total_usd)
    assert "--raise-budget" in got["message"]
    await engine.close()


def test_settling_and_raising_refuse_what_makes_no_sense(tmp_path: Path) -> None:
    model = tether.models.fake("fake", script=lambda r: Reply(text="ok", input_tokens=10, output_tokens=5),
                               prices={"m": PRICE})
    engine = tether.Engine(models=[model], routing={"loop": "fake:m"}, store=f"sqlite:///{tmp_path}/t.db")

    @tether.workflow(name="one")
    async def one(ctx: tether.Ctx) -> Any:
        return await ctx.agent("hello")

    async def go() -> None:
        await engine.run(one, run_id="r", budget_usd=0.5)
        await engine.run(one, run_id="free")
        with pytest.raises(tether.ConfigError, match="no calls a crash cut off"):
            await engine.settle_orphans("r", 0.001)
        with pytest.raises(tether.ConfigError, match="usd must be"):
            await engine.settle_orphans("r", -1.0)
        with pytest.raises(tether.RunNotFoundError):
            await engine.settle_orphans("nope", 0.001)
        with pytest.raises(tether.ConfigError, match="a ceiling is never lowered"):
            await engine.resume("r", one, raise_budget_usd=0.25)
        with pytest.raises(tether.ConfigError, match="has no USD ceiling to raise"):
            await engine.resume("free", one, raise_budget_usd=1.0)
        with pytest.raises(tether.RunNotFoundError):
            await engine.resume("new", one, raise_budget_usd=1.0)
        await engine.close()

    asyncio.run(go())


async def test_a_raised_ceiling_decides_an_earlier_refusal_again_and_the_report_uses_it(tmp_path: Path) -> None:
    model = tether.models.fake("fake", script=lambda r: Reply(text="ok", input_tokens=1_000, output_tokens=500),
                               prices={"m": PRICE})
    engine = tether.Engine(models=[model], routing={"loop": "fake:m"}, store=f"sqlite:///{tmp_path}/t.db",
                           sleep=no_sleep)

    @tether.workflow(name="fan")
    async def fan(ctx: tether.Ctx) -> Any:
        try:
            out = await ctx.parallel([lambda i=i: ctx.agent(f"t{i}", est_cost=0.02) for i in range(4)], settle=True)
        except tether.BudgetExhaustedError as exc:  # the body keeps what the admitted branches did
            out = exc.data["outcomes"]
        return [o.status for o in out]

    first = await engine.run(fan, run_id="r", budget_usd=0.05)
    assert first.value == ["ok", "ok", "error", "error"] and model.calls == 2
    raised = await engine.resume("r", fan, raise_budget_usd=0.10, raise_reason="needed")
    assert raised.status == "ok" and raised.value == ["ok"] * 4 and model.calls == 4  # two live calls, not four
    assert raised.cost.ceiling_usd == 0.10 and (await engine.run_meta("r")).budget_usd == 0.10
    again = await engine.resume("r", fan)  # the raise holds for every later segment
    assert again.status == "ok" and model.calls == 4
    await engine.close()
