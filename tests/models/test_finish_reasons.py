"""Finish reasons end to end: vendor wire bodies, the official SDKs, each adapter, then the engine.

A reply cut by the output limit, refused, filtered or failed mid-stream never settles `ok`; what
the provider reported before the end is billed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anthropic
import httpx2
import openai
import pytest
from pydantic import BaseModel
from wirekit import Wire, asker, run, terminal

import tether
from tether.contracts import ChatModel, Finish, StreamError, TextDelta, Usage
from tether.contracts.stream import FinishReason
from tether.models.anthropic_messages import AnthropicModel
from tether.models.openai_chat import OpenAICompatibleModel
from tether.models.openai_responses import OpenAIModel
from tether.testing import Reply
from tether.testing.wire import Vendor, responder

KEY = "sk-test-FINISH-KEY-123456"
OLLAMA = "http://localhost:11434/v1"
OPENROUTER = "https://openrouter.ai/api/v1"

recorded: list[dict[str, Any]] = []


@tether.tool
def record_forecast(city: str, summary: str) -> str:
    """Record a city's forecast."""
    recorded.append({"city": city, "summary": summary})
    return "recorded"


@pytest.fixture(autouse=True)
def _no_recordings() -> None:
    recorded.clear()


class Forecast(BaseModel):
    city: str
    celsius: int


def claude(wire: Wire) -> AnthropicModel:
    return AnthropicModel(client=anthropic.AsyncAnthropic(api_key=KEY, http_client=wire.http_client(), max_retries=0))


def gpt(wire: Wire) -> OpenAIModel:
    return OpenAIModel(client=openai.AsyncOpenAI(api_key=KEY, http_client=wire.http_client(), max_retries=0))


def chat(wire: Wire, id: str = "ollama", base_url: str = OLLAMA) -> OpenAICompatibleModel:
    client = openai.AsyncOpenAI(api_key=KEY, base_url=base_url, http_client=wire.http_client(), max_retries=0)
    return OpenAICompatibleModel(id=id, base_url=base_url, client=client)


async def no_sleep(_: float) -> None:
    return None


async def settle(
    model: ChatModel, ref: str, tmp_path: Path, **agent: Any
) -> tuple[tether.AgentResult, tether.RunOutcome]:
    """One `ctx.agent(full=True)` through a fresh engine; the result and the run's outcome."""
    engine = tether.Engine(models=[model], routing={"loop": ref}, store=f"sqlite:///{tmp_path}/t.db", sleep=no_sleep)

    @tether.workflow(name="one")
    async def one(ctx: tether.Ctx) -> Any:
        return await ctx.agent("What is the forecast for Paris? Record it.", full=True, **agent)

    try:
        outcome = await engine.run(one, run_id="r")
    finally:
        await engine.close()
    assert outcome.status == "ok", outcome.error
    return outcome.value, outcome


# -- the output limit -------------------------------------------------------------------------------


async def test_an_anthropic_reply_cut_inside_a_tool_use_block_never_runs_the_tool(kit: Any, tmp_path: Path) -> None:
    wire = kit.wire(kit.sse("anthropic", "max_tokens_in_tool_use.sse"))
    result, outcome = await settle(claude(wire), "anthropic:claude-sonnet-4-6", tmp_path, tools=[record_forecast])
    assert recorded == []
    assert (result.status, result.finish_reason) == ("limit", "max_tokens")
    assert result.output == "I'll record the forecast for Paris."
    assert result.error is None  # the spec's limit, not the budget's, cut the reply
    assert len(wire.requests) == 1 and outcome.cost.provider_calls == 1
    assert result.usage == Usage(input_tokens=412, output_tokens=32)


async def test_a_chat_completions_reply_cut_after_an_open_brace_is_never_ok(kit: Any, tmp_path: Path) -> None:
    wire = kit.wire(kit.sse("openai_compatible", "length_after_brace.sse"))
    result, _ = await settle(chat(wire), "ollama:qwen3:8b", tmp_path)
    assert (result.status, result.finish_reason, result.output) == ("limit", "max_tokens", '{"')


async def test_cut_structured_output_is_re_prompted_and_a_complete_answer_validates(
    kit: Any, tmp_path: Path
) -> None:
    wire = kit.wire(kit.sse("openai_compatible", "length_after_brace.sse"), kit.sse("openai_compatible", "json_answer.sse"))
    result, _ = await settle(chat(wire), "ollama:qwen3:8b", tmp_path, output=Forecast)
    assert (result.status, result.finish_reason) == ("ok", "stop")
    assert result.output == Forecast(city="Paris", celsius=14)
    retry = wire.bodies[1]["messages"]
    assert retry[-2] == {"role": "assistant", "content": '{"'}
    assert "cut by the output limit" in retry[-1]["content"]


async def test_an_incomplete_responses_reply_settles_limit_and_keeps_its_reasoning_tokens(
    kit: Any, tmp_path: Path
) -> None:
    wire = kit.wire(kit.sse("openai", "incomplete_cut_call.sse"))
    result, outcome = await settle(gpt(wire), "openai:o4-mini", tmp_path, tools=[record_forecast])
    assert recorded == []
    assert (result.status, result.finish_reason, result.output) == ("limit", "max_tokens", "Recording the forecast now.")
    assert result.usage == Usage(input_tokens=210, output_tokens=64, reasoning_tokens=48)
    assert outcome.cost.usage.reasoning_tokens == 48


# -- refusals ---------------------------------------------------------------------------------------


async def test_a_chat_completions_refusal_delta_settles_a_terminal_error_with_the_refusal(
    kit: Any, tmp_path: Path
) -> None:
    wire = kit.wire(*[kit.sse("openai_compatible", "refusal_delta.sse")] * 3)
    result, outcome = await settle(chat(wire), "ollama:gpt-4o-mini", tmp_path)
    assert (result.status, result.finish_reason, result.output) == ("error", "refusal", None)
    assert result.error is not None and result.error.kind == "terminal" and not result.error.retryable
    assert "I'm sorry, I can't assist with picking that lock." in result.error.message
    assert len(wire.requests) == 1 and outcome.cost.provider_calls == 1


async def test_an_anthropic_refusal_is_an_error_not_an_answer(kit: Any, tmp_path: Path) -> None:
    wire = kit.wire(kit.sse("anthropic", "refusal.sse"))
    result, _ = await settle(claude(wire), "anthropic:claude-sonnet-4-6", tmp_path)
    assert (result.status, result.finish_reason) == ("error", "refusal")
    assert result.error is not None and "I can't help with" in result.error.message


# -- mid-stream errors ------------------------------------------------------------------------------


async def test_an_openrouter_in_stream_400_is_terminal_never_retried_and_its_usage_is_kept(
    kit: Any, tmp_path: Path
) -> None:
    wire = kit.wire(*[kit.sse("openai_compatible", "openrouter_error_400.sse")] * 3)
    model = chat(wire, id="openrouter", base_url=OPENROUTER)
    result, outcome = await settle(model, "openrouter:meta-llama/llama-3.3-70b-instruct", tmp_path)
    assert result.status == "error" and result.error is not None
    assert (result.error.kind, result.error.retryable) == ("terminal", False)
    assert "(400)" in result.error.message and "Provider returned error" in result.error.message
    assert len(wire.requests) == 1 and outcome.cost.provider_calls == 1
    assert result.usage == Usage(input_tokens=31, output_tokens=3)  # billed: the provider's own count
    assert outcome.cost.usage == result.usage


def _chat_error_body(error: dict[str, Any]) -> httpx2.Response:
    first = {"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "m",
             "choices": [{"index": 0, "delta": {"role": "assistant", "content": "Par"}, "finish_reason": None}]}
    body = f"data: {json.dumps(first)}\n\ndata: {json.dumps({'error': error})}\n\n"
    return httpx2.Response(200, headers={"content-type": "text/event-stream"}, content=body.encode())


@pytest.mark.parametrize(
    ("error", "kind", "status"),
    [
        ({"code": 400, "message": "bad request"}, "terminal", 400),
        ({"code": "401", "message": "no auth"}, "terminal", 401),
        ({"code": 429, "message": "slow down"}, "rate-limit", 429),
        ({"code": 502, "message": "provider down"}, "transport", 502),
        ({"message": "busy", "type": "overloaded_error"}, "transport", 529),
        ({"message": "bad tool call", "type": "invalid_request_error", "code": "tool_use_failed"}, "terminal", 400),
    ],
)
async def test_a_mid_stream_error_chunk_is_classified_by_the_status_it_states(
    error: dict[str, Any], kind: str, status: int
) -> None:
    wire = Wire(_chat_error_body(error))
    end = terminal(await run(chat(wire), asker("m", 64)()))
    assert isinstance(end, StreamError)
    assert (end.kind, end.status, end.retryable) == (kind, status, kind != "terminal")


# -- pause_turn -------------------------------------------------------------------------------------


async def test_an_anthropic_pause_turn_is_continued_with_the_paused_content(kit: Any, tmp_path: Path) -> None:
    wire = kit.wire(kit.sse("anthropic", "pause_turn.sse"), kit.sse("anthropic", "after_pause.sse"))
    result, _ = await settle(claude(wire), "anthropic:claude-sonnet-4-6", tmp_path)
    assert (result.status, result.output, result.finish_reason) == ("ok", "Paris: 14C, light rain.", "stop")
    assert result.turns == 2
    resent = wire.bodies[1]["messages"][-1]
    assert resent["role"] == "assistant"
    assert resent["content"] == [
        {"type": "server_tool_use", "id": "srvtoolu_01Pause", "name": "web_search", "input": {"query": "Paris forecast"}},
        {"type": "text", "text": "Searching for the latest forecast."},
    ]


# -- reasoning tokens from each adapter -------------------------------------------------------------


@pytest.mark.parametrize(
    ("make", "vendor", "fixture", "usage"),
    [
        (claude, "anthropic", "thinking_usage.sse", Usage(input_tokens=90, output_tokens=140, reasoning_tokens=118)),
        (gpt, "openai", "reasoning.sse", Usage(input_tokens=120, output_tokens=300, reasoning_tokens=256)),
        (chat, "openai_compatible", "reasoning_usage.sse", Usage(input_tokens=40, output_tokens=230,
                                                                  reasoning_tokens=224)),
    ],
    ids=["anthropic", "openai", "openai-compatible"],
)
async def test_every_adapter_reports_reasoning_tokens_as_a_part_of_output(
    kit: Any, make: Any, vendor: str, fixture: str, usage: Usage
) -> None:
    wire = kit.wire(kit.sse(vendor, fixture))
    end = terminal(await run(make(wire), asker("m", 1024)()))
    assert isinstance(end, Finish) and end.usage == usage
    assert end.usage.reasoning_tokens == usage.reasoning_tokens > 0


# -- the synthesized wire bodies of `tether.testing.wire` --------------------------------------------


class Responder(Wire):
    """A `Wire` whose every answer is synthesized from a `Reply` in the vendor's format."""

    def __init__(self, vendor: Vendor, reply: Reply) -> None:
        super().__init__()
        self.answer = responder(vendor, lambda body: reply)

    def handler(self, request: httpx2.Request) -> httpx2.Response:
        return self.answer(request)


@pytest.mark.parametrize(
    ("make", "vendor"), [(claude, "anthropic"), (gpt, "openai"), (chat, "openai-compatible")],
    ids=["anthropic", "openai", "openai-compatible"],
)
@pytest.mark.parametrize("reason", ["stop", "max_tokens", "refusal"])
async def test_synthesized_bodies_carry_the_finish_reason_and_reasoning_tokens(
    make: Any, vendor: Vendor, reason: FinishReason
) -> None:
    reply = Reply(text="Partly", finish_reason=reason, input_tokens=12, output_tokens=20, reasoning_tokens=7)
    events = await run(make(Responder(vendor, reply)), asker("m", 64)())
    end = terminal(events)
    assert isinstance(end, Finish) and end.reason == reason
    assert end.usage == Usage(input_tokens=12, output_tokens=20, reasoning_tokens=7)
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == "Partly"
