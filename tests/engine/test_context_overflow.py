"""`tether.Context` against a provider's context-overflow refusal, and long tool results cut for the model."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import tether
from tether.contracts.messages import ChatRequest
from tether.contracts.money import usd
from tether.contracts.results import AgentResult
from tether.models.fake import FakeModel
from tether.testing import Reply, ToolCall

TETHER = Path(sys.executable).with_name("tether")
OVERFLOW = Reply(error="context-overflow", message="prompt is too long: 210000 tokens > 200000 maximum")


@tether.tool
def fetch(n: int) -> str:
    """Fetch page n."""
    return f"page {n}: " + "lorem ipsum " * 40


def tool_turns(k: int) -> list[Reply]:
    return [Reply(tool_calls=[ToolCall("fetch", {"n": i})], output_tokens=5) for i in range(1, k + 1)]


async def run_agent(engine: tether.Engine, policy: tether.Context | None, run_id: str) -> AgentResult[Any]:
    @tether.workflow(name="reader")
    async def reader(ctx: tether.Ctx) -> AgentResult[Any]:
        return await ctx.agent("read pages 1-4, then answer", tools=[fetch], context=policy, full=True)

    out = await engine.run(reader, run_id=run_id)
    assert out.status == "ok", out.error
    result = out.value
    assert isinstance(result, AgentResult)
    return result


async def decisions(engine: tether.Engine, run_id: str, name: str) -> list[dict[str, Any]]:
    entries = await (await engine.store()).load(run_id)
    return [e.value["payload"] for e in entries if e.kind == "decision" and isinstance(e.value, dict)
            and e.value.get("decision") == name]


async def test_one_overflow_compacts_once_and_the_turn_is_asked_again(
    tether_engine: tether.Engine, fake_model: FakeModel
) -> None:
    fake_model.push(*tool_turns(4), OVERFLOW, Reply(text="the answer", output_tokens=5))
    result = await run_agent(tether_engine, tether.Context(keep_last=1), "once")
    assert (result.status, result.output, result.error) == ("ok", "the answer", None)
    refused, asked_again = fake_model.requests[-2:]
    assert len(asked_again.messages) < len(refused.messages)  # compacted between the two
    assert "were dropped to fit the context window" in asked_again.messages[1].text_content
    assert asked_again.messages[-1] == refused.messages[-1]  # the last exchange is kept whole
    (compaction,) = await decisions(tether_engine, "once", "context-compaction")
    assert (compaction["why"], compaction["strategy"], compaction["n"]) == ("overflow", "drop-oldest", 1)


async def test_a_second_overflow_ends_the_agent_with_the_typed_context_overflow_error(
    tether_engine: tether.Engine, fake_model: FakeModel
) -> None:
    fake_model.push(*tool_turns(4), OVERFLOW, OVERFLOW, Reply(text="never asked"))
    result = await run_agent(tether_engine, tether.Context(keep_last=1), "twice")
    assert result.status == "error" and result.error is not None
    assert result.error.kind == "context-overflow"
    assert fake_model.remaining == 1  # asked once more after the compaction, never a third time
    assert len(await decisions(tether_engine, "twice", "context-compaction")) == 1


async def test_without_a_context_policy_an_overflow_is_terminal_at_once(
    tether_engine: tether.Engine, fake_model: FakeModel
) -> None:
    fake_model.push(*tool_turns(4), OVERFLOW, Reply(text="never asked"))
    result = await run_agent(tether_engine, None, "bare")
    assert result.status == "error" and result.error is not None and result.error.kind == "context-overflow"
    assert fake_model.remaining == 1
    assert await decisions(tether_engine, "bare", "context-compaction") == []


async def test_a_summarize_overflow_compaction_is_a_journaled_model_call_listed_by_tether_cost(
    tether_engine: tether.Engine, fake_model: FakeModel, tmp_path: Path
) -> None:
    fake_model.push(*tool_turns(4), OVERFLOW, Reply(text="pages 1-3 say lorem", output_tokens=7),
                    Reply(text="the answer", output_tokens=5))
    result = await run_agent(tether_engine, tether.Context(keep_last=1, strategy="summarize"), "summed")
    assert (result.status, result.output) == ("ok", "the answer")
    summarize, asked_again = fake_model.requests[-2:]
    assert summarize.tools == () and "compress an agent's conversation" in summarize.messages[0].text_content
    assert "pages 1-3 say lorem" in asked_again.messages[1].text_content
    (compaction,) = await decisions(tether_engine, "summed", "context-compaction")
    assert (compaction["summary"], compaction["calls"]) == ("pages 1-3 say lorem", 1)
    report = await tether_engine.cost("summed")
    assert report.compaction_calls == 1 and report.compaction_usd > 0
    assert report.provider_calls == 7
    store = f"sqlite:///{tmp_path}/tether.db"
    shell = json.loads(await asyncio.to_thread(cli, "cost", "summed", "--store", store, "--json"))
    assert (shell["compaction_calls"], shell["compaction_usd"]) == (1, report.compaction_usd)
    text = await asyncio.to_thread(cli, "cost", "summed", "--store", store)
    assert f"compaction {usd(report.compaction_usd)} USD over 1 summarize call" in text


async def test_a_long_tool_result_reaches_the_model_cut_and_the_journal_whole(
    tether_engine: tether.Engine, fake_model: FakeModel
) -> None:
    whole = "".join(f"line {i:05d}\n" for i in range(1_000))  # 11,000 characters

    @tether.tool
    def dump() -> str:
        """Dump the log."""
        return whole

    fake_model.push(Reply(tool_calls=[ToolCall("dump", {})]), Reply(text="read it"))

    @tether.workflow(name="dumper")
    async def dumper(ctx: tether.Ctx) -> str:
        policy = tether.Context(max_tool_result_tokens=200)
        return str(await ctx.agent("dump the log", tools=[dump], context=policy))

    out = await tether_engine.run(dumper, run_id="dump")
    assert (out.status, out.value) == ("ok", "read it")
    shown = tool_result(fake_model.requests[1])
    assert len(shown) < 1_000 and shown.startswith("line 00000") and shown.rstrip().endswith("line 00999")
    assert f"10200 of {len(whole)} characters" in shown  # the marker says how much was cut
    (kept,) = await decisions(tether_engine, "dump", "tool-result-cut")
    assert (kept["content"], kept["chars"], kept["tool"]) == (whole, len(whole), "dump")


def tool_result(request: ChatRequest) -> str:
    (message,) = [m for m in request.messages if m.role == "tool"]
    return str(message.parts[0].content)  # type: ignore[union-attr]


def cli(*args: str) -> str:
    done = subprocess.run([str(TETHER), *args], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


async def test_without_a_limit_the_model_window_less_the_output_limit_bounds_every_request(tmp_path: Path) -> None:
    from tether.agents.dispatch import estimate_input_tokens

    model = FakeModel("fake", [*tool_turns(30), Reply(text="read all")], context_window=3_000, max_output_tokens=500,
                      price=tether.Price(input=1.0, output=2.0))
    engine = tether.Engine(models=[model], routing={"loop": "fake:m"}, store=f"sqlite:///{tmp_path}/t.db")

    @tether.workflow(name="windowed")
    async def windowed(ctx: tether.Ctx) -> str:
        return str(await ctx.agent("read pages 1-30", tools=[fetch], max_turns=40, context=tether.Context(keep_last=2)))

    try:
        out = await engine.run(windowed, run_id="w")
        assert (out.status, out.value) == ("ok", "read all")
        sizes = [estimate_input_tokens(r) for r in model.requests]
        assert len(sizes) == 31 and max(sizes) <= 3_000 - 500
        assert sum(len(r.messages) > 1 and r.messages[1].text_content.startswith("[") for r in model.requests) > 5
        assert len(await decisions(engine, "w", "context-compaction")) >= 2
    finally:
        await engine.close()


async def test_a_summarize_call_the_ceiling_cannot_cover_is_refused_before_the_wire(tmp_path: Path) -> None:
    def engine_for(model: FakeModel, name: str) -> tether.Engine:
        return tether.Engine(models=[model], routing={"loop": "fake:m"}, store=f"sqlite:///{tmp_path}/{name}.db")

    @tether.workflow(name="summing")
    async def summing(ctx: tether.Ctx) -> AgentResult[Any]:
        policy = tether.Context(max_input_tokens=1_000, keep_last=1, strategy="summarize")
        return await ctx.agent("read pages", tools=[fetch], max_turns=20, context=policy, full=True)

    price = tether.Price(input=100.0, output=100.0)
    script = [*tool_turns(12), Reply(text="all read")]
    free = FakeModel("fake", [*script[:8], Reply(text="summary"), *script[8:]], price=price)
    engine = engine_for(free, "free")
    try:
        out = await engine.run(summing, run_id="free")
        entries = await (await engine.store()).load("free")
    finally:
        await engine.close()
    first = next(i for i, r in enumerate(free.requests) if r.tools == ())  # the first summarize request
    spent_before = sum(float(sum((e.costs or {}).values())) for e in entries if e.kind == "tree" and e.through
                       and e.through <= first)
    assert out.status == "ok" and first > 0 and spent_before > 0

    capped = FakeModel("fake", script, price=price)
    engine = engine_for(capped, "capped")
    try:
        out = await engine.run(summing, run_id="capped", budget_usd=round(spent_before + 0.02, 6))
    finally:
        await engine.close()
    # the turns before the summary fit (with room for their output), the summarize call's input does not
    assert out.status == "exhausted" and isinstance(out.error, tether.BudgetExhaustedError), out.error
    error = out.error.data["error"]
    assert (error.kind, error.stage, error.reason) == ("budget", "compaction", tether.StopReason.OUTPUT_FLOOR), error
    assert len(capped.requests) == first and all(r.tools for r in capped.requests)  # no summarize request left


async def test_a_context_that_is_not_a_tether_context_is_a_config_error(tether_engine: tether.Engine) -> None:
    @tether.workflow(name="typo")
    async def typo(ctx: tether.Ctx) -> str:
        return str(await ctx.agent("hi", context={"max_input_tokens": 8_000}))  # type: ignore[typeddict-item]

    out = await tether_engine.run(typo, run_id="typo")
    assert out.status == "error" and isinstance(out.error, tether.ConfigError)
    assert "context= must be a tether.Context" in str(out.error)


def test_a_context_policy_is_checked_when_it_is_made() -> None:
    with pytest.raises(tether.ConfigError, match="keep_last"):
        tether.Context(keep_last=0)
    with pytest.raises(tether.ConfigError, match="strategy"):
        tether.Context(strategy="forget")  # type: ignore[arg-type]
    with pytest.raises(tether.ConfigError, match="max_input_tokens"):
        tether.Context(max_input_tokens=10)
