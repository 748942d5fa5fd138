"""The Chat Completions adapter against recorded wire bodies, through the real `openai` SDK."""

from __future__ import annotations

import json
from typing import Any

import openai
import pytest
from wirekit import BRIEF, WEATHER, asker, run, terminal, weather_turns

from tether.contracts import (
    ChatModel,
    Finish,
    Message,
    ModelCaps,
    OutputFormat,
    RawPart,
    StreamError,
    TextDelta,
    ToolCallEnd,
    ToolCallStart,
    ToolSpec,
    Usage,
)
from tether.models.openai_chat import OpenAICompatibleModel

MODEL = "qwen3:8b"
BASE = "http://localhost:11434/v1"


def adapter(wire: Any, **kwargs: Any) -> OpenAICompatibleModel:
    client = openai.AsyncOpenAI(
        api_key="test-key", base_url=BASE, http_client=wire.http_client(), max_retries=0
    )
    return OpenAICompatibleModel(id="ollama", base_url=BASE, client=client, **kwargs)


ask = asker(MODEL, max_output_tokens=256)


async def test_plain_text_with_usage_from_the_last_chunk(kit: Any) -> None:
    wire = kit.wire(kit.sse("openai_compatible", "text.sse"))
    events = await run(adapter(wire), ask())
    assert [e.text for e in events if isinstance(e, TextDelta)] == ["Hello", ", world"]
    assert terminal(events) == Finish(reason="stop", usage=Usage(input_tokens=19, output_tokens=4))


async def test_request_body_streams_with_usage_and_max_tokens(kit: Any) -> None:
    wire = kit.wire(kit.sse("openai_compatible", "text.sse"))
    request = ask(messages=BRIEF, max_output_tokens=99)
    await run(adapter(wire), request)
    body = wire.body
    assert str(wire.requests[0].url) == f"{BASE}/chat/completions"
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert body["max_tokens"] == 99
    assert body["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi"},
    ]


async def test_parallel_tool_calls_are_assembled_by_index(kit: Any) -> None:
    wire = kit.wire(kit.sse("openai_compatible", "tool_calls.sse"))
    events = await run(adapter(wire), ask())
    assert [e for e in events if isinstance(e, ToolCallStart)] == [
        ToolCallStart(index=0, wire_id="call_Paris01", name="get_weather"),
        ToolCallStart(index=1, wire_id="call_Tokyo02", name="get_time"),
    ]
    assert [e for e in events if isinstance(e, ToolCallEnd)] == [
        ToolCallEnd(
            index=0, wire_id="call_Paris01", name="get_weather", args={"location": "Paris"}
        ),
        ToolCallEnd(index=1, wire_id="call_Tokyo02", name="get_time", args={"tz": "Asia/Tokyo"}),
    ]
    assert terminal(events) == Finish(
        reason="tool_calls", usage=Usage(input_tokens=150, output_tokens=40)
    )


async def test_cached_prompt_tokens_are_reported(kit: Any) -> None:
    wire = kit.wire(kit.sse("openai_compatible", "cache_usage.sse"))
    end = terminal(await run(adapter(wire), ask()))
    assert end.usage == Usage(input_tokens=1500, output_tokens=8, cache_read_tokens=1024)


async def test_history_and_tools_are_projected_and_raw_parts_dropped(kit: Any) -> None:
    wire = kit.wire(kit.sse("openai_compatible", "text.sse"))
    history = (
        Message.text("user", "Weather?"),
        *weather_turns(RawPart(family="anthropic", data={"type": "thinking", "signature": "sig"})),
    )
    request = ask(
        messages=history, tools=(WEATHER,), tool_choice="required", max_output_tokens=50,
        output_format=OutputFormat(schema={"type": "object"}),
    )
    await run(adapter(wire), request)
    body = wire.body
    assert body["messages"] == [
        {"role": "user", "content": "Weather?"},
        {
            "role": "assistant",
            "content": "Checking.",
            "tool_calls": [
                {
                    "id": "call_call_3_0",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_call_3_0", "content": "[error] boom"},
    ]
    assert "sig" not in json.dumps(body["messages"])
    assert body["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "Weather.",
                "parameters": {"type": "object"},
            },
        }
    ]
    assert body["tool_choice"] == "required"
    assert body["response_format"]["type"] == "json_schema"


async def test_named_tool_choice_uses_the_function_form(kit: Any) -> None:
    wire = kit.wire(kit.sse("openai_compatible", "text.sse"))
    await run(adapter(wire), ask(tools=(ToolSpec(name="t"),), tool_choice="t"))
    assert wire.body["tool_choice"] == {"type": "function", "function": {"name": "t"}}


async def test_mid_stream_error_chunk_is_a_retryable_transport_error(kit: Any) -> None:
    wire = kit.wire(kit.sse("openai_compatible", "midstream_error.sse"))
    events = await run(adapter(wire), ask())
    assert TextDelta(text="Par") in events
    end = terminal(events)
    assert isinstance(end, StreamError)
    assert (end.kind, end.retryable) == ("transport", True)


async def test_429_with_retry_after_is_a_retryable_rate_limit(kit: Any) -> None:
    wire = kit.wire(kit.error("openai_compatible", "error_429.json", 429, **{"retry-after": "3"}))
    end = terminal(await run(adapter(wire), ask()))
    assert (end.kind, end.retryable, end.retry_after_ms) == ("rate-limit", True, 3000)
    assert end.message.startswith("ollama ")


@pytest.mark.parametrize(
    ("fixture", "reason"), [("refusal.sse", "refusal"), ("length.sse", "max_tokens")]
)
async def test_finish_reasons_map(kit: Any, fixture: str, reason: str) -> None:
    wire = kit.wire(kit.sse("openai_compatible", fixture))
    assert terminal(await run(adapter(wire), ask())).reason == reason


async def test_a_server_without_usage_reports_approximate_usage(kit: Any) -> None:
    wire = kit.wire(kit.sse("openai_compatible", "no_usage.sse"))
    end = terminal(await run(adapter(wire), ask()))
    assert end == Finish(reason="stop", usage=Usage(approximate=True))


def test_caps_are_conservative_unless_overridden() -> None:
    model = OpenAICompatibleModel(id="ollama", base_url=BASE)
    caps = model.caps(MODEL)
    assert caps.price is None and caps.structured_output == "prompt"
    custom = ModelCaps(context_window=128_000, structured_output="native")
    assert OpenAICompatibleModel(id="vllm", base_url=BASE, model_caps=custom).caps("x") is custom


def test_the_environment_key_is_never_sent_to_a_third_party(monkeypatch: Any) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-live-should-not-leak")
    model = OpenAICompatibleModel(id="gw", base_url=BASE)
    assert model.client().api_key == "unused"


def test_factory_builds_a_chat_model_every_time() -> None:
    import tether.models.openai_chat  # loading the adapter module leaves the factory intact

    for _ in range(2):
        model = tether.models.openai_compatible("ollama", BASE)
        assert isinstance(model, OpenAICompatibleModel) and isinstance(model, ChatModel)
        assert (model.id, model.family) == ("ollama", "openai-compatible")


async def test_a_server_that_cannot_be_reached_is_named_with_its_url_and_no_credentials() -> None:
    """A transport error says where it failed to connect (issue 33): the URL, without its user:password or query."""
    import socket

    from tether.contracts.messages import ChatRequest, Message
    from tether.contracts.stream import StreamError
    from tether.models import openai_compatible

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    client = openai.AsyncOpenAI(base_url=f"http://gateway-user:s3cret-pw@127.0.0.1:{port}/v1", api_key="k",
                                max_retries=0)
    model = openai_compatible("local", base_url=f"http://127.0.0.1:{port}/v1", client=client)
    events = [e async for e in model.stream(ChatRequest(model="m", messages=(Message.text("user", "hi"),)))]
    (error,) = [e for e in events if isinstance(e, StreamError)]
    assert error.kind == "transport" and error.retryable
    assert f"127.0.0.1:{port}/v1/chat/completions" in error.message, error.message
    assert "s3cret-pw" not in error.message and "gateway-user" not in error.message
