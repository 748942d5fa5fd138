"""The Anthropic adapter against recorded Messages API wire bodies, through the real SDK client."""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any

import anthropic
import httpx2
import pytest
from wirekit import BRIEF, WEATHER, asker, run, summed, terminal, weather_turns

from tether.contracts import (
    ChatModel,
    ChatRequest,
    Finish,
    Message,
    ModelCaps,
    OutputFormat,
    RawPart,
    RawPartEvent,
    Signal,
    StreamError,
    TextDelta,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
    ToolSpec,
    Usage,
    UsageDelta,
)
from tether.models.anthropic_messages import AnthropicModel, wire_id
from tether.pricing import bundled_model_info

MODEL = "claude-sonnet-4-6"
SECRET = "sk-ant-test-SECRET123"


def adapter(wire: Any, api_key: str = "test-key", **kwargs: Any) -> AnthropicModel:
    client = anthropic.AsyncAnthropic(
        api_key=api_key, http_client=wire.http_client(), max_retries=0
    )
    return AnthropicModel(client=client, **kwargs)


ask = asker(MODEL, max_output_tokens=1024)


async def test_plain_text_streams_deltas_then_one_finish(kit: Any) -> None:
    wire = kit.wire(kit.sse("anthropic", "text.sse"))
    events = await run(adapter(wire), ask())
    assert [e.text for e in events if isinstance(e, TextDelta)] == ["Hello", ", world"]
    assert events[0] == UsageDelta(usage=Usage(input_tokens=25, output_tokens=1))
    end = terminal(events)
    assert end == Finish(reason="stop", usage=Usage(input_tokens=25, output_tokens=6))
    assert summed(events) == end.usage


async def test_request_body_carries_system_messages_and_max_tokens(kit: Any) -> None:
    wire = kit.wire(kit.sse("anthropic", "text.sse"))
    request = ask(messages=BRIEF, max_output_tokens=321)
    await run(adapter(wire), request)
    body = wire.body
    assert wire.requests[0].url.path == "/v1/messages"
    assert body["max_tokens"] == 321
    assert body["system"] == "Be brief."
    assert body["stream"] is True
    assert body["messages"] == [{"role": "user", "content": [{"type": "text", "text": "Hi"}]}]
    assert "tools" not in body and "tool_choice" not in body and "output_config" not in body


async def test_max_tokens_defaults_to_the_models_output_cap(kit: Any) -> None:
    wire = kit.wire(kit.sse("anthropic", "text.sse"))
    model = adapter(wire)
    await run(model, ChatRequest(model=MODEL, messages=(Message.text("user", "Hi"),)))
    assert wire.body["max_tokens"] == model.caps(MODEL).max_output_tokens == 64_000


async def test_tool_use_streams_start_deltas_and_parsed_end(kit: Any) -> None:
    wire = kit.wire(kit.sse("anthropic", "tool_use.sse"))
    events = await run(adapter(wire), ask())
    wid = "toolu_01A09q90qw90lq917835lq9"
    assert ToolCallStart(index=0, wire_id=wid, name="get_weather") in events
    deltas = "".join(e.args_delta for e in events if isinstance(e, ToolCallDelta))
    assert json.loads(deltas) == {"location": "San Francisco, CA", "unit": "celsius"}
    end = next(e for e in events if isinstance(e, ToolCallEnd))
    assert end == ToolCallEnd(
        index=0,
        wire_id=wid,
        name="get_weather",
        args={"location": "San Francisco, CA", "unit": "celsius"},
    )
    assert terminal(events).reason == "tool_calls"


async def test_parallel_tool_calls_get_indexes_in_order(kit: Any) -> None:
    wire = kit.wire(kit.sse("anthropic", "parallel_tools.sse"))
    events = await run(adapter(wire), ask())
    ends = [e for e in events if isinstance(e, ToolCallEnd)]
    assert [(e.index, e.name, e.args) for e in ends] == [
        (0, "get_weather", {"location": "Paris"}),
        (1, "get_time", {"tz": "Asia/Tokyo"}),
        (2, "list_cities", {}),
    ]
    starts = [e for e in events if isinstance(e, ToolCallStart)]
    assert [s.wire_id for s in starts] == [e.wire_id for e in ends]
    assert terminal(events) == Finish(
        reason="tool_calls", usage=Usage(input_tokens=500, output_tokens=120)
    )


async def test_cache_tokens_are_folded_into_input_and_reported(kit: Any) -> None:
    wire = kit.wire(kit.sse("anthropic", "cache_usage.sse"))
    events = await run(adapter(wire), ask())
    usage_events = [e.usage for e in events if isinstance(e, UsageDelta)]
    assert usage_events[0] == Usage(
        input_tokens=12 + 248 + 2048,
        output_tokens=1,
        cache_read_tokens=2048,
        cache_write_tokens=248,
    )
    assert [u.output_tokens for u in usage_events[1:]] == [19, 37]
    assert all(u.input_tokens == 0 for u in usage_events[1:])  # repeated snapshots add nothing
    end = terminal(events)
    assert end.usage == Usage(
        input_tokens=2308, output_tokens=57, cache_read_tokens=2048, cache_write_tokens=248
    )
    assert summed(events) == end.usage


async def test_thinking_blocks_become_raw_parts_with_their_signature(kit: Any) -> None:
    wire = kit.wire(kit.sse("anthropic", "thinking.sse"))
    events = await run(adapter(wire), ask())
    raws = [e.part for e in events if isinstance(e, RawPartEvent)]
    assert raws == [
        RawPart(
            family="anthropic",
            data={
                "type": "thinking",
                "thinking": "The user wants 27 * 453. That is 12231.",
                "signature": "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds",
            },
        ),
        RawPart(
            family="anthropic",
            data={
                "type": "redacted_thinking",
                "data": "EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIw",
            },
        ),
    ]
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == "27 * 453 = 12231"


async def test_history_is_projected_with_tool_ids_results_and_only_own_raw_parts(kit: Any) -> None:
    wire = kit.wire(kit.sse("anthropic", "text.sse"))
    thinking = {"type": "thinking", "thinking": "hmm", "signature": "sig=="}
    history = (
        Message.text("system", "You are terse."),
        Message.text("user", "Weather in Paris?"),
        *weather_turns(
            RawPart(family="anthropic", data=thinking),
            RawPart(family="openai", data={"type": "reasoning", "encrypted_content": "x"}),
        ),
        Message.text("user", "And now?"),
    )
    request = ask(
        messages=history, tools=(WEATHER,), tool_choice="required", max_output_tokens=900,
        output_format=OutputFormat(schema={"type": "object"}),
    )
    await run(adapter(wire), request)
    body = wire.body
    assert body["system"] == "You are terse."
    assert body["max_tokens"] == 900
    assert body["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "Weather in Paris?"}]},
        {
            "role": "assistant",
            "content": [
                thinking,
                {"type": "text", "text": "Checking."},
                {
                    "type": "tool_use",
                    "id": "toolu_call_3_0",
                    "name": "get_weather",
                    "input": {"city": "Paris"},
                },
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_call_3_0",
                    "content": "boom",
                    "is_error": True,
                },
                {"type": "text", "text": "And now?"},
            ],
        },
    ]
    assert "encrypted_content" not in json.dumps(body)  # the openai part stayed home
    assert body["tools"] == [
        {"name": "get_weather", "description": "Weather.", "input_schema": {"type": "object"}}
    ]
    assert body["tool_choice"] == {"type": "any"}
    assert body["output_config"] == {
        "format": {"type": "json_schema", "schema": {"type": "object"}}
    }


@pytest.mark.parametrize(
    ("choice", "wire_choice"),
    [
        ("auto", {"type": "auto"}),
        ("none", {"type": "none"}),
        ("required", {"type": "any"}),
        ("get_weather", {"type": "tool", "name": "get_weather"}),
    ],
)
async def test_tool_choice_maps_to_the_messages_api(
    kit: Any, choice: str, wire_choice: Any
) -> None:
    wire = kit.wire(kit.sse("anthropic", "text.sse"))
    await run(adapter(wire), ask(tools=(ToolSpec(name="get_weather"),), tool_choice=choice))
    assert wire.body["tool_choice"] == wire_choice


async def test_effort_is_sent_only_to_models_that_support_it(kit: Any) -> None:
    wire = kit.wire(kit.sse("anthropic", "text.sse"), kit.sse("anthropic", "text.sse"))
    model = adapter(wire)
    supports = ChatRequest(model=MODEL, messages=(Message.text("user", "x"),), effort="high")
    older = ChatRequest(
        model="claude-haiku-4-5", messages=(Message.text("user", "x"),), effort="high"
    )
    await run(model, supports)
    await run(model, older)
    assert wire.bodies[0]["output_config"] == {"effort": "high"}
    assert "output_config" not in wire.bodies[1]


async def test_mid_stream_overloaded_error_is_a_retryable_transport_error(kit: Any) -> None:
    wire = kit.wire(kit.sse("anthropic", "midstream_error.sse"))
    events = await run(adapter(wire), ask())
    assert TextDelta(text="Partial") in events
    end = terminal(events)
    assert isinstance(end, StreamError)
    assert (end.kind, end.retryable) == ("transport", True)
    assert "Overloaded" in end.message
    assert end.usage == Usage(input_tokens=40, output_tokens=1, approximate=True)


async def test_429_with_retry_after_is_a_retryable_rate_limit(kit: Any) -> None:
    wire = kit.wire(kit.error("anthropic", "error_429.json", 429, **{"retry-after": "20"}))
    events = await run(adapter(wire), ask())
    end = terminal(events)
    assert (end.kind, end.retryable, end.retry_after_ms, end.status) == (
        "rate-limit",
        True,
        20_000,
        429,
    )
    assert len(wire.requests) == 1  # SDK retries are off; the engine retries


async def test_quota_exhausted_429_is_terminal_and_not_retried(kit: Any) -> None:
    wire = kit.wire(kit.error("anthropic", "error_429_billing.json", 429, **{"retry-after": "5"}))
    end = terminal(await run(adapter(wire), ask()))
    assert (end.kind, end.retryable) == ("terminal", False)
    assert "credit" in end.message and "Retrying will not help" in end.message


async def test_401_is_terminal_names_the_env_var_and_leaks_no_key(kit: Any) -> None:
    wire = kit.wire(kit.error("anthropic", "error_401.json", 401))
    events = await run(adapter(wire, api_key=SECRET), ask())
    end = terminal(events)
    assert (end.kind, end.retryable, end.status) == ("terminal", False, 401)
    assert "ANTHROPIC_API_KEY" in end.message
    assert SECRET in str(wire.requests[0].headers.raw)  # it was sent ...
    assert SECRET not in json.dumps([e.model_dump(mode="json") for e in events])  # ... not echoed


async def test_context_window_error_is_a_typed_context_overflow_with_a_clear_message(kit: Any) -> None:
    wire = kit.wire(kit.error("anthropic", "error_400_context.json", 400))
    end = terminal(await run(adapter(wire), ask()))
    assert (end.kind, end.retryable, end.status) == ("context-overflow", False, 400)
    assert "context window exceeded" in end.message and "215841" in end.message


@pytest.mark.parametrize("status", [500, 503, 529])
async def test_server_errors_and_overload_are_retryable_transport(kit: Any, status: int) -> None:
    wire = kit.wire(kit.error("anthropic", "error_529.json", status))
    end = terminal(await run(adapter(wire), ask()))
    assert (end.kind, end.retryable, end.status) == ("transport", True, status)


async def test_connection_failure_is_a_retryable_transport_error(kit: Any) -> None:
    wire = kit.wire(httpx2.ConnectError("connection refused"))
    end = terminal(await run(adapter(wire), ask()))
    assert (end.kind, end.retryable) == ("transport", True)


async def test_stream_cut_before_message_stop_is_a_transport_error(kit: Any) -> None:
    wire = kit.wire(kit.sse("anthropic", "truncated.sse"))
    events = await run(adapter(wire), ask())
    end = terminal(events)
    assert (end.kind, end.retryable) == ("transport", True)
    assert end.usage is not None and end.usage.approximate


async def test_refusal_finishes_with_reason_refusal(kit: Any) -> None:
    wire = kit.wire(kit.sse("anthropic", "refusal.sse"))
    assert terminal(await run(adapter(wire), ask())).reason == "refusal"


async def test_an_aborted_signal_makes_no_request(kit: Any) -> None:
    wire = kit.wire()
    signal = Signal()
    signal.abort("budget")
    events = await run(adapter(wire), ask(), signal)
    assert events == [Finish(reason="cancelled", usage=Usage(approximate=True))]
    assert wire.requests == []


async def test_a_signal_cuts_a_live_stream_with_approximate_usage(kit: Any) -> None:
    release = asyncio.Event()
    wire = kit.wire(kit.stalled_sse("anthropic", "truncated.sse", release))
    signal = Signal()
    events = []
    async for event in adapter(wire).stream(ask(), signal):
        events.append(event)
        if isinstance(event, TextDelta):
            signal.abort("budget")
    release.set()
    assert events[-1] == Finish(
        reason="cancelled", usage=Usage(input_tokens=20, output_tokens=1, approximate=True)
    )


def test_wire_ids_are_deterministic_and_valid() -> None:
    assert wire_id("call_3_0") == "toolu_call_3_0"
    odd = wire_id("agent:7/call 3.0")
    assert odd == wire_id("agent:7/call 3.0")
    assert re.fullmatch(r"toolu_[A-Za-z0-9_-]+", odd)
    assert wire_id("a.b") != wire_id("a_b")  # sanitizing never merges two ids


def test_caps_come_from_genai_prices_and_unknown_models_are_unpriced() -> None:
    model = AnthropicModel(api_key="unused")
    known = model.caps(MODEL)
    assert known.context_window == bundled_model_info("anthropic", MODEL).context_window
    assert known.price is not None and known.price.input > 0
    assert known.structured_output == "native"
    unknown = model.caps("claude-experimental")
    assert unknown.price is None
    assert unknown.max_output_tokens <= 8_192 and unknown.structured_output == "tool"
    assert model.caps("claude-3-5-haiku-20241022").max_output_tokens == 8_192
    assert model.caps("claude-opus-4-5").efforts == ("low", "medium", "high")
    assert model.caps("claude-haiku-4-5").efforts == ()
    assert model.caps("claude-opus-4-1").max_output_tokens == 32_000


def test_model_caps_override_wins() -> None:
    caps = ModelCaps(context_window=1_000, max_output_tokens=100)
    model = AnthropicModel(api_key="unused", model_caps={"custom": caps})
    assert model.caps("custom") is caps


def test_factory_builds_a_chat_model_every_time() -> None:
    import tether.models.anthropic_messages  # loading the adapter module leaves the factory intact

    for _ in range(2):
        model = tether.models.anthropic(api_key="unused")
        assert isinstance(model, AnthropicModel) and isinstance(model, ChatModel)
        assert (model.id, model.family) == ("anthropic", "anthropic")


async def test_native_output_schemas_are_sent_closed(kit: Any) -> None:
    wire = kit.wire(kit.sse("anthropic", "text.sse"))
    item = {"type": "object", "properties": {"k": {"type": "string"}}}
    schema = {
        "type": "object",
        "properties": {"score": {"type": "number"}, "tags": {"type": "array", "items": item}},
        "required": ["score"],
    }
    await run(adapter(wire), ask(output_format=OutputFormat(schema=schema)))
    sent = wire.body["output_config"]["format"]["schema"]
    assert sent["additionalProperties"] is False
    assert sent["properties"]["tags"]["items"] == {**item, "additionalProperties": False}
    assert set(sent["properties"]) == {"score", "tags"}  # a map of properties is not itself a schema
