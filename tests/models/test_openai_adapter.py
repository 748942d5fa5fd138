"""The OpenAI adapter against recorded Responses API wire bodies, through the real SDK client."""

from __future__ import annotations

import json
from typing import Any

import httpx2
import openai
import pytest
from wirekit import BRIEF, WEATHER, asker, run, terminal, weather_turns

from tether.contracts import (
    ChatModel,
    Finish,
    Message,
    OutputFormat,
    RawPart,
    RawPartEvent,
    StreamError,
    TextDelta,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
    ToolSpec,
    Usage,
    UsageDelta,
)
from tether.models.openai_responses import OpenAIModel, wire_id

MODEL = "gpt-4.1"
REASONER = "o4-mini"
SECRET = "sk-test-SECRET123"


def adapter(wire: Any, api_key: str = "test-key") -> OpenAIModel:
    client = openai.AsyncOpenAI(api_key=api_key, http_client=wire.http_client(), max_retries=0)
    return OpenAIModel(client=client)


ask = asker(MODEL, max_output_tokens=1024)


async def test_plain_text_streams_deltas_then_one_finish(kit: Any) -> None:
    wire = kit.wire(kit.sse("openai", "text.sse"))
    events = await run(adapter(wire), ask())
    assert [e.text for e in events if isinstance(e, TextDelta)] == ["Hello", ", world"]
    assert terminal(events) == Finish(reason="stop", usage=Usage(input_tokens=37, output_tokens=11))
    assert UsageDelta(usage=Usage(input_tokens=37, output_tokens=11)) in events


async def test_request_body_uses_instructions_input_and_max_output_tokens(kit: Any) -> None:
    wire = kit.wire(kit.sse("openai", "text.sse"))
    request = ask(messages=BRIEF, max_output_tokens=321)
    await run(adapter(wire), request)
    body = wire.body
    assert wire.requests[0].url.path == "/v1/responses"
    assert body["max_output_tokens"] == 321
    assert body["instructions"] == "Be brief."
    assert body["input"] == [{"role": "user", "content": "Hi"}]
    assert body["store"] is False and body["stream"] is True
    assert not {"tools", "tool_choice", "text", "reasoning", "include"} & body.keys()


async def test_function_call_streams_start_deltas_and_parsed_end(kit: Any) -> None:
    wire = kit.wire(kit.sse("openai", "tool_call.sse"))
    events = await run(adapter(wire), ask())
    wid = "call_unLAR8MvFNptuiZK6K6HCy5k"
    assert ToolCallStart(index=0, wire_id=wid, name="get_weather") in events
    deltas = "".join(e.args_delta for e in events if isinstance(e, ToolCallDelta))
    assert json.loads(deltas) == {"location": "Paris, France"}
    assert (
        ToolCallEnd(index=0, wire_id=wid, name="get_weather", args={"location": "Paris, France"})
        in events
    )
    assert TextDelta(text="Checking.") in events
    assert terminal(events).reason == "tool_calls"


async def test_parallel_function_calls_keep_their_order(kit: Any) -> None:
    wire = kit.wire(kit.sse("openai", "parallel_tools.sse"))
    events = await run(adapter(wire), ask())
    ends = [e for e in events if isinstance(e, ToolCallEnd)]
    assert [(e.index, e.wire_id, e.name, e.args) for e in ends] == [
        (0, "call_Paris0001", "get_weather", {"location": "Paris"}),
        (1, "call_Tokyo0002", "get_time", {"tz": "Asia/Tokyo"}),
        (2, "call_NoArgs003", "list_cities", {}),
    ]
    assert terminal(events).reason == "tool_calls"


async def test_cached_tokens_are_reported_and_included_in_input(kit: Any) -> None:
    wire = kit.wire(kit.sse("openai", "cache_usage.sse"))
    events = await run(adapter(wire), ask())
    expected = Usage(input_tokens=2300, output_tokens=40, cache_read_tokens=2048)
    assert terminal(events).usage == expected
    assert [e.usage for e in events if isinstance(e, UsageDelta)] == [expected]


async def test_reasoning_items_become_raw_parts_and_reasoning_settings_are_sent(kit: Any) -> None:
    wire = kit.wire(kit.sse("openai", "reasoning.sse"))
    events = await run(adapter(wire), ask(model=REASONER, effort="high"))
    raws = [e.part for e in events if isinstance(e, RawPartEvent)]
    assert len(raws) == 1 and raws[0].family == "openai"
    assert raws[0].data["type"] == "reasoning"
    assert raws[0].data["encrypted_content"] == "gAAAAABoIPOG-encrypted-reasoning-blob=="
    assert raws[0].data["id"].startswith("rs_")
    body = wire.body
    assert body["reasoning"] == {"effort": "high"}
    assert body["include"] == ["reasoning.encrypted_content"]
    assert terminal(events).reason == "tool_calls"


async def test_history_is_projected_with_call_ids_results_and_only_own_raw_parts(kit: Any) -> None:
    wire = kit.wire(kit.sse("openai", "text.sse"))
    reasoning = {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "enc"}
    history = (
        Message.text("system", "You are terse."),
        Message.text("user", "Weather in Paris?"),
        *weather_turns(
            RawPart(family="anthropic", data={"type": "thinking", "thinking": "t", "signature": "s"}),
            RawPart(family="openai", data=reasoning),
            result="12C",
            is_error=False,
        ),
    )
    request = ask(
        messages=history, tools=(WEATHER,), tool_choice="get_weather", max_output_tokens=700,
        output_format=OutputFormat(name="verdict", schema={"type": "object"}),
    )
    await run(adapter(wire), request)
    body = wire.body
    assert body["instructions"] == "You are terse."
    assert body["max_output_tokens"] == 700
    assert body["input"] == [
        {"role": "user", "content": "Weather in Paris?"},
        reasoning,
        {"role": "assistant", "content": "Checking."},
        {
            "type": "function_call",
            "call_id": "call_call_3_0",
            "name": "get_weather",
            "arguments": '{"city":"Paris"}',
        },
        {"type": "function_call_output", "call_id": "call_call_3_0", "output": "12C"},
    ]
    assert "signature" not in json.dumps(body)  # the anthropic part stayed home
    assert body["tools"] == [
        {
            "type": "function",
            "name": "get_weather",
            "description": "Weather.",
            "parameters": {"type": "object"},
            "strict": False,
        }
    ]
    assert body["tool_choice"] == {"type": "function", "name": "get_weather"}
    assert body["text"] == {
        "format": {
            "type": "json_schema",
            "name": "verdict",
            "schema": {"type": "object"},
            "strict": True,
        }
    }


@pytest.mark.parametrize("choice", ["auto", "none", "required"])
async def test_builtin_tool_choices_pass_through(kit: Any, choice: str) -> None:
    wire = kit.wire(kit.sse("openai", "text.sse"))
    await run(adapter(wire), ask(tools=(ToolSpec(name="t"),), tool_choice=choice))
    assert wire.body["tool_choice"] == choice


async def test_mid_stream_error_event_is_a_retryable_transport_error(kit: Any) -> None:
    wire = kit.wire(kit.sse("openai", "midstream_error.sse"))
    events = await run(adapter(wire), ask())
    assert TextDelta(text="Partial") in events
    end = terminal(events)
    assert isinstance(end, StreamError)
    assert (end.kind, end.retryable) == ("transport", True)
    assert "server had an error" in end.message


async def test_a_failed_response_maps_its_error_code(kit: Any) -> None:
    wire = kit.wire(kit.sse("openai", "failed.sse"))
    end = terminal(await run(adapter(wire), ask()))
    assert (end.kind, end.retryable) == ("rate-limit", True)


async def test_429_with_retry_after_is_a_retryable_rate_limit(kit: Any) -> None:
    wire = kit.wire(kit.error("openai", "error_429.json", 429, **{"retry-after-ms": "2020"}))
    end = terminal(await run(adapter(wire), ask()))
    assert (end.kind, end.retryable, end.retry_after_ms, end.status) == (
        "rate-limit",
        True,
        2020,
        429,
    )
    assert len(wire.requests) == 1


async def test_insufficient_quota_429_is_terminal_and_not_retried(kit: Any) -> None:
    wire = kit.wire(kit.error("openai", "error_429_quota.json", 429))
    end = terminal(await run(adapter(wire), ask()))
    assert (end.kind, end.retryable, end.status) == ("terminal", False, 429)
    assert "quota" in end.message


async def test_401_is_terminal_and_masks_the_key_the_provider_echoed(kit: Any) -> None:
    wire = kit.wire(kit.error("openai", "error_401.json", 401))
    events = await run(adapter(wire, api_key=SECRET), ask())
    end = terminal(events)
    assert (end.kind, end.retryable, end.status) == ("terminal", False, 401)
    assert "OPENAI_API_KEY" in end.message
    assert wire.requests[0].headers["authorization"] == f"Bearer {SECRET}"
    dumped = json.dumps([e.model_dump(mode="json") for e in events])
    assert SECRET not in dumped and "sk-test-" not in dumped


async def test_context_window_error_is_a_typed_context_overflow_with_a_clear_message(kit: Any) -> None:
    wire = kit.wire(kit.error("openai", "error_400_context.json", 400))
    end = terminal(await run(adapter(wire), ask()))
    assert (end.kind, end.retryable, end.status) == ("context-overflow", False, 400)
    assert "context window exceeded" in end.message


async def test_a_context_overflow_is_read_from_the_structured_code_whatever_the_wording(kit: Any) -> None:
    body = {"error": {"message": "Request rejected.", "type": "invalid_request_error", "param": "input",
                      "code": "context_length_exceeded"}}
    wire = kit.wire(httpx2.Response(400, headers={"content-type": "application/json"}, content=json.dumps(body)))
    end = terminal(await run(adapter(wire), ask()))
    assert (end.kind, end.retryable, end.status) == ("context-overflow", False, 400)


async def test_server_error_status_is_retryable_transport(kit: Any) -> None:
    wire = kit.wire(httpx2.Response(502, content=b"bad gateway"))
    end = terminal(await run(adapter(wire), ask()))
    assert (end.kind, end.retryable, end.status) == ("transport", True, 502)


async def test_connection_failure_is_a_retryable_transport_error(kit: Any) -> None:
    wire = kit.wire(httpx2.ConnectError("connection refused"))
    end = terminal(await run(adapter(wire), ask()))
    assert (end.kind, end.retryable) == ("transport", True)


async def test_refusal_finishes_with_reason_refusal(kit: Any) -> None:
    wire = kit.wire(kit.sse("openai", "refusal.sse"))
    events = await run(adapter(wire), ask())
    assert terminal(events).reason == "refusal"
    assert (
        "".join(e.text for e in events if isinstance(e, TextDelta))
        == "I'm sorry, I can't help with that."
    )


async def test_incomplete_response_finishes_with_max_tokens(kit: Any) -> None:
    wire = kit.wire(kit.sse("openai", "incomplete.sse"))
    end = terminal(await run(adapter(wire), ask()))
    assert end == Finish(reason="max_tokens", usage=Usage(input_tokens=30, output_tokens=16))


def test_caps_know_reasoning_models_and_leave_unknown_ones_unpriced() -> None:
    model = OpenAIModel(api_key="unused")
    assert model.caps("gpt-5").efforts and model.caps("gpt-5").structured_output == "native"
    assert model.caps(MODEL).price is not None and model.caps(MODEL).efforts == ()
    unknown = model.caps("my-finetune")
    assert unknown.price is None and unknown.structured_output == "tool"


def test_wire_ids_are_deterministic() -> None:
    assert wire_id("call_3_0") == "call_call_3_0" == wire_id("call_3_0")


def test_factory_builds_a_chat_model_every_time() -> None:
    import tether.models.openai_responses  # loading the adapter module leaves the factory intact

    for _ in range(2):
        model = tether.models.openai(api_key="unused")
        assert isinstance(model, OpenAIModel) and isinstance(model, ChatModel)
        assert (model.id, model.family) == ("openai", "openai")


async def test_strict_output_is_asked_only_when_every_property_is_required(kit: Any) -> None:
    wire = kit.wire(kit.sse("openai", "text.sse"), kit.sse("openai", "text.sse"))
    full = {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]}
    partial = {"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "string"}}, "required": ["a"]}
    for schema in (full, partial):
        await run(adapter(wire), ask(output_format=OutputFormat(schema=schema)))
    first, second = (b["text"]["format"] for b in wire.bodies)
    assert first["strict"] is True and first["schema"] == {**full, "additionalProperties": False}
    assert second["strict"] is False and second["schema"] == {**partial, "additionalProperties": False}
