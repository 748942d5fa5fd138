"""The Gemini adapter against recorded Gemini API bodies, served to the real google-genai SDK through its httpx client."""

from __future__ import annotations

import base64
import json
import sys
from pathlib import Path
from typing import Any

import genai_prices
import google.genai as genai
import httpx2
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from google.genai import types as genai_types
from google.oauth2.credentials import Credentials
from pydantic import BaseModel
from wirekit import BRIEF, WEATHER, WIRE, asker, run, summed, terminal, weather_turns

import tether
from tether.contracts import (
    ChatModel,
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
from tether.models.google_genai import GoogleModel, build_contents
from tether.pricing import bundled_model_info
from tether.testing import cassette

KEY = "AIzaSyTEST-tether-0123456789abcdefghij"
FLASH = "gemini-2.5-flash"
PRO3 = "gemini-3-pro-preview"
FLASH20 = "gemini-2.0-flash"
# The thought signature pydantic-ai's recorded second request sent back for the recorded get_country call.
SENT_SIGNATURE = (
    "Et8ECtwEAXLI2nyCB1jKZUE4ZxdH07XhZlpU7X7tlcbNO8oQurN910Rmh6fTq1azIzM7kzq_xMB7GilOxBK6VMDoMgkGuIHttwPgPiwD2jO3a3ra"
    "4gFE-zxUPPx9R9bsRWd5641CymAZnsFeXVvrwYeeymh7gxR0a8F0pYkxwvuMDgGJwopaCXSuP8-6d8OgA-uoGTyyzr6f9Qi2N0sZwDcURV1S-8QSYs"
    "z8Ilijh_lfKAoEJ7g8qWJil47hvc_4QnVueKCcIsFCb2mto2w-awtagbg3DXF52epHnQyCe7RaKAHyvRqZ7NOSi9Aya4LkGnf7uoeG_yLPwZMPSet3"
    "xzygCMuyU-P7sG7T7g7KfQtlHPTpSAuJZIexbYi91N-RJJAhSNMX5tt1zlDRHAWcZ_8e0zBbg1CiWJ3dI8YsVGRXdDIh5KUx1b7SVNwVIqj6oeISXL"
    "BHJKZHXXrnhceKcIKbVZ1UscQTKZGOFnIzilGl_5H64Cjp3_IK1kpsypchhXVR478xb3jlbsgtUaSC1bifszV7kD5XROIYHE3nrt_hI75yABz_naoN"
    "xuJIHV6ZUqC1d6T8mB3U8DfhS65PF0JVjcOv7j-PifCb6nSMb_eaJAYKTOx37cfZTcmQIoFDofypBC6UVGt_GbCr76mpFqjENZ5QTN5nfbH_rfuM00"
    "_mBQPbuRdcmEgujEIo_BelxPEVOC6tszKkQlEoJfO7qazAvRvksWHQHNQtUFO6n1HmRaK1sq6Ana1c5vSj8Mv7uDLmJNTV8_iGNlLqwj6FjB4rbYIju"
    "0HegvoS6z1_ufbMdg=="
)


def gemini(wire: Any, api_key: str = KEY, **kwargs: Any) -> GoogleModel:
    """The adapter over a real SDK client whose httpx2 client is the mock transport."""
    http = genai_types.HttpOptions(httpx_async_client=wire.http_client())
    return GoogleModel(client=genai.Client(api_key=api_key, http_options=http), **kwargs)


def chunks(name: str) -> list[dict[str, Any]]:
    text = (WIRE / "google" / name).read_text()
    return [json.loads(line[len("data: "):]) for line in text.splitlines() if line.startswith("data: ")]


def genai_cost(model: str, *bodies: dict[str, Any]) -> float:
    """What genai-prices charges for the usage each body reports."""
    total = 0.0
    for body in bodies:
        usage = genai_prices.extract_usage(body, provider_id="google").usage
        total += float(genai_prices.calc_price(usage, model, provider_id="google").total_price)
    return total


ask = asker(FLASH, max_output_tokens=1024)


# --- streams, one call at a time ----------------------------------------------------------------


async def test_plain_text_finishes_stop_with_thinking_tokens_counted_as_output(kit: Any) -> None:
    wire = kit.wire(kit.sse("google", "text.sse"))
    events = await run(gemini(wire), ask())
    assert [e.text for e in events if isinstance(e, TextDelta)] == ["The capital of France is **Paris**."]
    end = terminal(events)
    assert end == Finish(reason="stop", usage=Usage(input_tokens=15, output_tokens=8 + 16, reasoning_tokens=16))
    assert summed(events) == Usage(output_tokens=8 + 16, reasoning_tokens=16)  # input is settled by the Finish


async def test_streamed_text_arrives_chunk_by_chunk_and_the_last_usage_snapshot_wins(kit: Any) -> None:
    wire = kit.wire(kit.sse("google", "tool_answer.sse"))
    events = await run(gemini(wire), ask(model=PRO3))
    assert [e.text for e in events if isinstance(e, TextDelta)] == ["The capital of Mexico", " is Mexico City."]
    assert terminal(events) == Finish(reason="stop", usage=Usage(input_tokens=165, output_tokens=8))
    assert summed(events) == Usage(output_tokens=8)


async def test_the_final_usage_snapshot_settles_a_prompt_count_revised_down_and_no_delta_is_a_credit(
    kit: Any,
) -> None:
    # Gemini 2.0 reports 169 prompt tokens in the first chunk and corrects them to 63 in the last.
    assert [c["usageMetadata"]["promptTokenCount"] for c in chunks("tools3_answer.sse")] == [169, 63]
    wire = kit.wire(kit.sse("google", "tools3_answer.sse"))
    events = await run(gemini(wire), ask(model=FLASH20))
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == "The temperature in Paris is 30°C."
    assert terminal(events) == Finish(reason="stop", usage=Usage(input_tokens=63, output_tokens=11))
    deltas = [e.usage for e in events if isinstance(e, UsageDelta)]
    assert deltas == [Usage(output_tokens=11)]  # input is never metered from an interim count
    assert summed(events).minus(terminal(events).usage).is_empty()  # what was metered never exceeds the total


async def test_a_stream_cut_before_its_last_chunk_is_charged_the_interim_count_it_reached(kit: Any) -> None:
    first = (WIRE / "google" / "tools3_answer.sse").read_bytes().split(b"\r\n\r\n")[0] + b"\r\n\r\n"
    wire = kit.wire(httpx2.Response(200, headers={"content-type": "text/event-stream"}, content=first))
    events = await run(gemini(wire), ask(model=FLASH20))
    end = terminal(events)
    assert isinstance(end, StreamError) and (end.kind, end.retryable) == ("transport", True)
    assert end.usage == Usage(input_tokens=169, approximate=True)  # metered so far: the best count there is


async def test_the_request_goes_to_stream_generate_content_with_the_key_in_a_header(kit: Any) -> None:
    wire = kit.wire(kit.sse("google", "text.sse"))
    await run(gemini(wire), ask(messages=BRIEF, max_output_tokens=321))
    request = wire.requests[0]
    assert request.url.path == f"/v1/models/{FLASH}:streamGenerateContent"
    assert request.url.params["alt"] == "sse"
    assert request.headers["x-goog-api-key"] == KEY
    body = wire.body
    assert body["contents"] == [{"role": "user", "parts": [{"text": "Hi"}]}]
    assert body["systemInstruction"] == {"parts": [{"text": "Be brief."}], "role": "user"}
    assert body["generationConfig"] == {"maxOutputTokens": 321, "thinkingConfig": {"include_thoughts": True}}
    assert "tools" not in body and "toolConfig" not in body


async def test_a_tool_call_streams_start_delta_end_and_keeps_its_thought_signature(kit: Any) -> None:
    wire = kit.wire(kit.sse("google", "tool_call.sse"))
    events = await run(gemini(wire), ask(model=PRO3, tools=(ToolSpec(name="get_country"),)))
    start = next(e for e in events if isinstance(e, ToolCallStart))
    assert (start.index, start.name) == (0, "get_country")
    assert [e.args_delta for e in events if isinstance(e, ToolCallDelta)] == ["{}"]
    end = next(e for e in events if isinstance(e, ToolCallEnd))
    assert (end.index, end.name, end.args) == (0, "get_country", {})
    (raw,) = [e.part for e in events if isinstance(e, RawPartEvent)]
    recorded = chunks("tool_call.sse")[0]["candidates"][0]["content"]["parts"][0]["thoughtSignature"]
    assert raw == RawPart(family="google", data={"thoughtSignature": recorded, "part": "functionCall", "call": 0})
    assert terminal(events) == Finish(
        reason="tool_calls", usage=Usage(input_tokens=29, output_tokens=120, reasoning_tokens=110)
    )


async def test_the_next_turn_sends_the_call_its_signature_and_the_result_as_the_recording_shows(kit: Any) -> None:
    first, second = kit.wire(kit.sse("google", "tool_call.sse")), kit.wire(kit.sse("google", "tool_answer.sse"))
    request = ask("What is the capital of the user country? Call the tool", model=PRO3,
                  tools=(ToolSpec(name="get_country"),))
    events = await run(gemini(first), request)
    raws = tuple(e.part for e in events if isinstance(e, RawPartEvent))
    call = tether.contracts.ToolCallPart(id="call_1_0", name="get_country", args={})
    result = tether.contracts.ToolResultPart(call_id="call_1_0", name="get_country", content="Mexico")
    history = (*request.messages, Message(role="assistant", parts=(*raws, call)), Message(role="tool", parts=(result,)))
    await run(gemini(second), request.model_copy(update={"messages": history}))
    contents = second.body["contents"]
    assert contents[1] == {
        "role": "model",
        "parts": [{"functionCall": {"id": "call_1_0", "args": {}, "name": "get_country"},
                   "thoughtSignature": SENT_SIGNATURE}],
    }
    assert contents[2] == {
        "role": "user",
        "parts": [{"functionResponse": {"id": "call_1_0", "name": "get_country", "response": {"output": "Mexico"}}}],
    }


async def test_history_keeps_thoughts_signatures_and_tool_errors_and_drops_other_families(kit: Any) -> None:
    wire = kit.wire(kit.sse("google", "text.sse"))
    sig = base64.b64encode(b"text-signature").decode()
    raws = (
        RawPart(family="google", data={"thought": True, "text": "Let me think.", "thoughtSignature": sig}),
        RawPart(family="google", data={"thoughtSignature": sig, "part": "text"}),
        RawPart(family="anthropic", data={"type": "thinking", "thinking": "x", "signature": "y"}),
    )
    history = (Message.text("system", "Terse."), Message.text("user", "Weather?"), *weather_turns(*raws),
               Message.text("user", "And now?"))
    await run(gemini(wire), ask(messages=history, tools=(WEATHER,)))
    contents = wire.body["contents"]
    assert contents[1]["role"] == "model"
    assert contents[1]["parts"] == [
        {"text": "Let me think.", "thought": True, "thoughtSignature": sig},
        {"text": "Checking.", "thoughtSignature": sig},
        {"functionCall": {"id": "call_3_0", "args": {"city": "Paris"}, "name": "get_weather"}},
    ]
    assert contents[2] == {"role": "user", "parts": [
        {"functionResponse": {"id": "call_3_0", "name": "get_weather", "response": {"error": "boom"}}},
        {"text": "And now?"},
    ]}
    assert "thinking" not in json.dumps(contents)  # the anthropic part stayed home


def test_an_empty_assistant_turn_is_not_sent() -> None:
    messages = (Message.text("user", "hi"), Message(role="assistant", parts=()), Message.text("user", "again"))
    assert build_contents(messages, "google") == [{"role": "user", "parts": [{"text": "hi"}, {"text": "again"}]}]


@pytest.mark.parametrize(
    ("choice", "wire_choice"),
    [
        ("auto", {"mode": "AUTO"}),
        ("none", {"mode": "NONE"}),
        ("required", {"mode": "ANY"}),
        ("get_weather", {"mode": "ANY", "allowedFunctionNames": ["get_weather"]}),
    ],
)
async def test_tool_choice_maps_to_function_calling_modes(kit: Any, choice: str, wire_choice: Any) -> None:
    wire = kit.wire(kit.sse("google", "text.sse"))
    await run(gemini(wire), ask(tools=(WEATHER,), tool_choice=choice))
    assert wire.body["toolConfig"] == {"functionCallingConfig": wire_choice}
    assert wire.body["tools"] == [{"functionDeclarations": [
        {"description": "Weather.", "name": "get_weather", "parameters_json_schema": {"type": "object"}}
    ]}]


async def test_structured_output_is_a_response_json_schema(kit: Any) -> None:
    wire = kit.wire(kit.sse("google", "structured.sse"))
    schema = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    events = await run(gemini(wire), ask(model="gemini-3-flash-preview", output_format=OutputFormat(schema=schema)))
    config = wire.body["generationConfig"]
    assert (config["responseMimeType"], config["responseJsonSchema"]) == ("application/json", schema)
    text = "".join(e.text for e in events if isinstance(e, TextDelta))
    assert json.loads(text) == {"city": "Mexico City", "country": "Mexico"}
    assert terminal(events).usage == Usage(input_tokens=9, output_tokens=271, reasoning_tokens=261)


async def test_before_gemini_3_a_schema_beside_tools_goes_into_the_system_instruction(kit: Any) -> None:
    wire = kit.wire(kit.sse("google", "text.sse"), kit.sse("google", "text.sse"))
    model = gemini(wire)
    schema = {"type": "object", "properties": {"city": {"type": "string"}}}
    await run(model, ask(tools=(WEATHER,), output_format=OutputFormat(schema=schema)))
    await run(model, ask(model=PRO3, tools=(WEATHER,), output_format=OutputFormat(schema=schema)))
    older, gemini3 = wire.bodies
    assert "responseJsonSchema" not in older["generationConfig"]
    assert '"city"' in older["systemInstruction"]["parts"][0]["text"]
    assert gemini3["generationConfig"]["responseJsonSchema"] == schema and "systemInstruction" not in gemini3


async def test_thought_summaries_become_one_raw_part_and_the_text_keeps_its_signature(kit: Any) -> None:
    wire = kit.wire(kit.sse("google", "thinking.sse"))
    events = await run(gemini(wire), ask(model="gemini-2.5-pro"))
    recorded = chunks("thinking.sse")
    thought, signature = (e.part for e in events if isinstance(e, RawPartEvent))
    assert thought.data["thought"] is True
    assert thought.data["text"] == "".join(c["candidates"][0]["content"]["parts"][0]["text"] for c in recorded[:4])
    assert signature.data == {"thoughtSignature": recorded[4]["candidates"][0]["content"]["parts"][0]["thoughtSignature"],
                              "part": "text"}
    text = "".join(e.text for e in events if isinstance(e, TextDelta))
    assert text.startswith("Here is a step-by-step guide") and text.endswith("Stay alert and stay safe")
    assert "Defining the Goal" not in text  # thoughts are never answer text
    assert terminal(events) == Finish(
        reason="stop", usage=Usage(input_tokens=34, output_tokens=387 + 759, reasoning_tokens=759)
    )


@pytest.mark.parametrize(
    ("model", "effort", "thinking"),
    [
        (PRO3, "high", {"include_thoughts": True, "thinking_level": "HIGH"}),
        (PRO3, "medium", {"include_thoughts": True}),  # Gemini 3 Pro has no medium level: not sent
        ("gemini-2.5-pro", "low", {"include_thoughts": True, "thinking_budget": 1024}),
        ("gemini-2.0-flash", "high", None),
    ],
)
async def test_effort_becomes_a_thinking_level_or_budget_only_where_supported(
    kit: Any, model: str, effort: str, thinking: Any
) -> None:
    wire = kit.wire(kit.sse("google", "text.sse"))
    await run(gemini(wire), ask(model=model, effort=effort))
    assert wire.body["generationConfig"].get("thinkingConfig") == thinking


async def test_max_tokens_cut_finishes_max_tokens(kit: Any) -> None:
    wire = kit.wire(kit.sse("google", "max_tokens.sse"))
    events = await run(gemini(wire), ask(max_output_tokens=5))
    assert wire.body["generationConfig"]["maxOutputTokens"] == 5
    assert terminal(events) == Finish(reason="max_tokens", usage=Usage(input_tokens=15, output_tokens=5))


async def test_safety_block_finishes_content_filter(kit: Any) -> None:
    wire = kit.wire(kit.sse("google", "safety.sse"))
    events = await run(gemini(wire), ask())
    assert not [e for e in events if isinstance(e, TextDelta)]
    assert terminal(events) == Finish(reason="content_filter", usage=Usage(input_tokens=14))


async def test_cached_tokens_are_part_of_the_input_and_reported(kit: Any) -> None:
    wire = kit.wire(kit.sse("google", "cache_usage.sse"))
    end = terminal(await run(gemini(wire), ask()))
    assert end.usage == Usage(input_tokens=2071, output_tokens=20, cache_read_tokens=2048, reasoning_tokens=18)


# --- errors -----------------------------------------------------------------------------------


async def test_mid_stream_error_is_a_retryable_transport_error_that_keeps_its_usage(kit: Any) -> None:
    wire = kit.wire(kit.sse("google", "midstream_error.sse"))
    events = await run(gemini(wire), ask(model=PRO3))
    assert TextDelta(text="The capital of Mexico") in events
    end = terminal(events)
    assert isinstance(end, StreamError)
    assert (end.kind, end.retryable, end.status) == ("transport", True, 503)
    assert "overloaded" in end.message
    assert end.usage == Usage(input_tokens=55, output_tokens=8, approximate=True)


async def test_per_minute_429_is_a_rate_limit_that_waits_the_retry_info_delay(kit: Any) -> None:
    wire = kit.wire(kit.error("google", "error_429.json", 429))
    end = terminal(await run(gemini(wire), ask()))
    assert (end.kind, end.retryable, end.retry_after_ms, end.status) == ("rate-limit", True, 34_000, 429)
    assert len(wire.requests) == 1  # SDK retries are off; the engine retries


async def test_daily_quota_429_is_terminal_and_not_retried(kit: Any) -> None:
    wire = kit.wire(kit.error("google", "error_429_daily.json", 429))
    end = terminal(await run(gemini(wire), ask()))
    assert (end.kind, end.retryable) == ("terminal", False)
    assert "daily quota" in end.message and "will not help" in end.message


async def test_a_bad_key_is_terminal_names_the_env_var_and_is_never_echoed(kit: Any) -> None:
    wire = kit.wire(kit.error("google", "error_400_api_key.json", 400))
    events = await run(gemini(wire), ask())
    end = terminal(events)
    assert (end.kind, end.retryable, end.status) == ("terminal", False, 400)
    assert "credentials" in end.message and "GEMINI_API_KEY" in end.message
    assert KEY not in json.dumps([e.model_dump(mode="json") for e in events])


async def test_a_key_echoed_back_in_an_error_body_is_masked(kit: Any) -> None:
    body = {"error": {"code": 400, "message": f"API key not valid: {KEY}", "status": "INVALID_ARGUMENT"}}
    wire = kit.wire(httpx2.Response(400, json=body))
    end = terminal(await run(gemini(wire), ask()))
    assert KEY not in end.message and "[redacted]" in end.message


async def test_403_is_terminal(kit: Any) -> None:
    wire = kit.wire(kit.error("google", "error_403.json", 403))
    end = terminal(await run(gemini(wire), ask()))
    assert (end.kind, end.retryable, end.status) == ("terminal", False, 403)
    assert "GEMINI_API_KEY" in end.message


async def test_context_window_400_is_a_typed_context_overflow_with_a_clear_message(kit: Any) -> None:
    wire = kit.wire(kit.error("google", "error_400_context.json", 400))
    end = terminal(await run(gemini(wire), ask()))
    assert (end.kind, end.retryable, end.status) == ("context-overflow", False, 400)
    assert "context window exceeded" in end.message and "1196265" in end.message


@pytest.mark.parametrize(("name", "status"), [("error_500.json", 500), ("error_503.json", 503)])
async def test_server_errors_and_overload_are_retryable_transport(kit: Any, name: str, status: int) -> None:
    wire = kit.wire(kit.error("google", name, status))
    end = terminal(await run(gemini(wire), ask()))
    assert (end.kind, end.retryable, end.status) == ("transport", True, status)


async def test_connection_failure_is_a_retryable_transport_error_without_the_key(kit: Any) -> None:
    wire = kit.wire(httpx2.ConnectError(f"connection refused (key={KEY})"))
    end = terminal(await run(gemini(wire), ask()))
    assert (end.kind, end.retryable) == ("transport", True)
    assert KEY not in end.message


async def test_an_aborted_signal_makes_no_request(kit: Any) -> None:
    wire = kit.wire()
    signal = Signal()
    signal.abort("budget")
    events = await run(gemini(wire), ask(), signal)
    assert events == [Finish(reason="cancelled", usage=Usage(approximate=True))]
    assert wire.requests == []


# --- Vertex AI, base_url, set-up ----------------------------------------------------------------


async def test_vertex_serves_the_same_models_under_the_vertex_id_with_a_bearer_token(kit: Any) -> None:
    wire = kit.wire(kit.sse("google", "prompt_blocked.sse"))
    token = "ya29.tether-test-access-token"
    client = genai.Client(
        vertexai=True, project="tether-test", location="europe-west4", credentials=Credentials(token=token),
        http_options=genai_types.HttpOptions(httpx_async_client=wire.http_client()),
    )
    model = GoogleModel(client=client)
    assert (model.id, model.family) == ("vertex", "google")
    events = await run(model, ask())
    request = wire.requests[0]
    assert request.url.host == "europe-west4-aiplatform.googleapis.com"
    assert request.url.path == (
        f"/v1beta1/projects/tether-test/locations/europe-west4/publishers/google/models/{FLASH}:streamGenerateContent"
    )
    assert request.headers["authorization"] == f"Bearer {token}"
    assert terminal(events) == Finish(reason="content_filter", usage=Usage())  # the prompt itself was blocked
    assert token not in json.dumps([e.model_dump(mode="json") for e in events])


async def test_base_url_points_the_sdks_own_http_client_at_another_server() -> None:
    seen: list[tuple[str, str]] = []

    async def handle(request: web.Request) -> web.StreamResponse:
        seen.append((request.path, request.headers.get("x-goog-api-key", "")))
        return web.Response(body=(WIRE / "google" / "text.sse").read_bytes(), content_type="text/event-stream")

    app = web.Application()
    app.router.add_post("/{tail:.*}", handle)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    model = GoogleModel(api_key=KEY, base_url=str(server.make_url("/")))
    try:
        events = await run(model, ask())
    finally:
        await model.aclose()
        await server.close()
    assert seen == [(f"/v1/models/{FLASH}:streamGenerateContent", KEY)]
    assert terminal(events).reason == "stop"


def test_without_a_key_the_factory_fails_at_construction_naming_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GEMINI_API_KEY", raising=False)
    monkeypatch.delenv("GOOGLE_API_KEY", raising=False)
    with pytest.raises(tether.ConfigError) as caught:
        tether.models.google()
    assert "GEMINI_API_KEY" in caught.value.message and caught.value.data["env"] == "GEMINI_API_KEY"
    assert tether.models.google(api_key="k").id == "google"
    monkeypatch.setenv("GOOGLE_API_KEY", "from-env")
    assert tether.models.google().id == "google"


def test_vertex_without_a_project_fails_at_construction_naming_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GOOGLE_CLOUD_PROJECT", raising=False)
    with pytest.raises(tether.ConfigError) as caught:
        tether.models.google(vertexai=True)
    assert "GOOGLE_CLOUD_PROJECT" in caught.value.message
    model = tether.models.google(vertexai=True, project="p", location="us-central1")
    assert model.id == "vertex"  # nothing resolved yet: credentials are looked up on the first call


def test_a_missing_sdk_is_a_config_error_with_the_pip_command(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "google.genai", None)
    monkeypatch.delitem(sys.modules, "tether.models.google_genai", raising=False)
    with pytest.raises(tether.ConfigError) as caught:
        tether.models.google(api_key="k")
    assert "pip install 'tether[google]'" in caught.value.message
    assert caught.value.data["package"] == "google-genai"


async def test_aclose_leaves_a_client_passed_in_open(kit: Any) -> None:
    http = kit.wire().http_client()
    model = GoogleModel(client=genai.Client(api_key=KEY, http_options=genai_types.HttpOptions(httpx_async_client=http)))
    await model.aclose()
    assert not http.is_closed


def test_caps_come_from_genai_prices_and_the_gemini_version() -> None:
    model = GoogleModel(api_key="unused")
    flash = model.caps(FLASH)
    assert flash.context_window == bundled_model_info("google", FLASH).context_window
    assert flash.price is not None and flash.price.input > 0
    assert (flash.structured_output, flash.efforts) == ("native", ("low", "medium", "high"))
    assert model.caps(PRO3).efforts == ("low", "high")
    assert model.caps("gemini-1.5-flash").structured_output == "tool"
    unknown = model.caps("gemma-experimental")
    assert unknown.price is None and unknown.structured_output == "prompt"
    caps = ModelCaps(context_window=1_000, max_output_tokens=100)
    assert GoogleModel(api_key="unused", model_caps={"custom": caps}).caps("custom") is caps


def test_the_factory_builds_a_chat_model() -> None:
    model = tether.models.google(api_key="unused")
    assert isinstance(model, GoogleModel) and isinstance(model, ChatModel)
    assert (model.id, model.family) == ("google", "google")


# --- through the engine: a workflow calling ctx.agent -----------------------------------------------


class CityLocation(BaseModel):
    city: str
    country: str


@tether.tool
def get_country() -> str:
    """The user's country."""
    return "Mexico"


def summary(result: tether.AgentResult[Any]) -> dict[str, Any]:
    output = result.output.model_dump() if isinstance(result.output, BaseModel) else result.output
    return {
        "status": result.status, "output": output, "finish_reason": result.finish_reason,
        "error": result.error.kind if result.error else None, "cost_usd": result.cost_usd,
        "usage": result.usage.model_dump(), "turns": result.turns,
    }


@tether.workflow(name="google-ask")
async def ask_flow(ctx: tether.Ctx, prompt: str, max_output_tokens: int = 1024) -> dict[str, Any]:
    return summary(await ctx.agent(prompt, max_output_tokens=max_output_tokens, full=True))


@tether.workflow(name="google-tools")
async def tools_flow(ctx: tether.Ctx, prompt: str) -> dict[str, Any]:
    return summary(await ctx.agent(prompt, tools=[get_country], full=True))


@tether.workflow(name="google-structured")
async def structured_flow(ctx: tether.Ctx, prompt: str) -> dict[str, Any]:
    return summary(await ctx.agent(prompt, output=CityLocation, full=True))


async def no_sleep(seconds: float) -> None:
    return None


async def run_engine(
    model: ChatModel, name: str, flow: tether.Workflow, tmp_path: Path, prompt: str = "Hi", **args: Any
) -> tuple[tether.RunOutcome, dict[str, Any]]:
    engine = tether.Engine(
        models=[model], routing={"loop": f"{model.id}:{name}"}, store=f"sqlite:///{tmp_path}/run.db",
        sleep=no_sleep, event_log=tmp_path / "events-{run_id}.jsonl",
    )
    try:
        outcome = await engine.run(flow, {"prompt": prompt, **args}, run_id="gemini-1")
    finally:
        await engine.close()
    assert outcome.status == "ok", outcome.error
    return outcome, outcome.value


def subdir(tmp_path: Path, name: str) -> Path:
    (tmp_path / name).mkdir()
    return tmp_path / name


def assert_cost(outcome: tether.RunOutcome, result: dict[str, Any], expected: float) -> None:
    assert result["cost_usd"] == pytest.approx(expected, abs=1e-12)
    assert outcome.cost.total_usd == pytest.approx(expected, abs=1e-9)


def assert_no_secret(tmp_path: Path, *secrets: str) -> None:
    for path in tmp_path.iterdir():  # the journal (sqlite) and the event log
        data = path.read_bytes()
        for secret in secrets:
            assert secret.encode() not in data, path


async def test_engine_text_costs_what_genai_prices_charges_and_keeps_the_key_out(kit: Any, tmp_path: Path) -> None:
    wire = kit.wire(kit.sse("google", "text.sse"))
    outcome, result = await run_engine(gemini(wire), FLASH, ask_flow, tmp_path)
    assert (result["status"], result["output"], result["finish_reason"]) == (
        "ok", "The capital of France is **Paris**.", "stop")
    assert result["usage"]["reasoning_tokens"] == 16
    assert_cost(outcome, result, genai_cost(FLASH, *chunks("text.sse")[-1:]))
    assert_no_secret(tmp_path, KEY)


async def test_engine_streamed_text_costs_what_genai_prices_charges(kit: Any, tmp_path: Path) -> None:
    wire = kit.wire(kit.sse("google", "tool_answer.sse"))
    outcome, result = await run_engine(gemini(wire), PRO3, ask_flow, tmp_path)
    assert result["output"] == "The capital of Mexico is Mexico City."
    assert_cost(outcome, result, genai_cost(PRO3, chunks("tool_answer.sse")[-1]))


async def test_engine_tool_round_trip_sends_the_signature_back_and_costs_both_calls(kit: Any, tmp_path: Path) -> None:
    wire = kit.wire(kit.sse("google", "tool_call.sse"), kit.sse("google", "tool_answer.sse"))
    outcome, result = await run_engine(gemini(wire), PRO3, tools_flow, tmp_path, "What is the capital of the user country?")
    assert (result["status"], result["output"], result["turns"]) == ("ok", "The capital of Mexico is Mexico City.", 2)
    model_turn, tool_turn = wire.bodies[1]["contents"][1:3]
    assert model_turn["parts"][0]["thoughtSignature"] == SENT_SIGNATURE
    assert model_turn["parts"][0]["functionCall"]["name"] == "get_country"
    assert tool_turn["parts"][0]["functionResponse"]["response"] == {"output": "Mexico"}
    assert_cost(outcome, result, genai_cost(PRO3, chunks("tool_call.sse")[-1], chunks("tool_answer.sse")[-1]))
    assert_no_secret(tmp_path, KEY)


async def test_engine_structured_output_is_validated_and_costs_what_genai_prices_charges(
    kit: Any, tmp_path: Path
) -> None:
    wire = kit.wire(kit.sse("google", "structured.sse"))
    model = "gemini-3-flash-preview"
    outcome, result = await run_engine(gemini(wire), model, structured_flow, tmp_path, "Largest city in Mexico?")
    assert result["output"] == {"city": "Mexico City", "country": "Mexico"}
    assert wire.body["generationConfig"]["responseMimeType"] == "application/json"
    assert_cost(outcome, result, genai_cost(model, chunks("structured.sse")[-1]))


async def test_engine_max_tokens_cut_settles_limit_with_the_partial_text(kit: Any, tmp_path: Path) -> None:
    wire = kit.wire(kit.sse("google", "max_tokens.sse"))
    outcome, result = await run_engine(gemini(wire), FLASH, ask_flow, tmp_path, "Capital of France?", max_output_tokens=5)
    assert wire.body["generationConfig"]["maxOutputTokens"] == 5
    assert (result["status"], result["finish_reason"], result["output"]) == ("limit", "max_tokens",
                                                                           "The capital of France is")
    assert_cost(outcome, result, genai_cost(FLASH, chunks("max_tokens.sse")[-1]))


async def test_engine_safety_block_is_a_terminal_error_billed_for_its_prompt(kit: Any, tmp_path: Path) -> None:
    wire = kit.wire(kit.sse("google", "safety.sse"))
    outcome, result = await run_engine(gemini(wire), FLASH, ask_flow, tmp_path)
    assert (result["status"], result["error"], result["finish_reason"]) == ("error", "terminal", "content_filter")
    assert len(wire.requests) == 1  # never retried
    assert_cost(outcome, result, genai_cost(FLASH, chunks("safety.sse")[-1]))


async def test_engine_mid_stream_error_is_retried_and_both_attempts_are_billed(kit: Any, tmp_path: Path) -> None:
    wire = kit.wire(kit.sse("google", "midstream_error.sse"), kit.sse("google", "tool_answer.sse"))
    outcome, result = await run_engine(gemini(wire), PRO3, ask_flow, tmp_path)
    assert (result["status"], result["output"]) == ("ok", "The capital of Mexico is Mexico City.")
    assert len(wire.requests) == 2
    partial = chunks("midstream_error.sse")[1]  # the last usage before the error
    assert_cost(outcome, result, genai_cost(PRO3, partial, chunks("tool_answer.sse")[-1]))


async def test_engine_thinking_tokens_are_billed_as_output_like_genai_prices_does(kit: Any, tmp_path: Path) -> None:
    wire = kit.wire(kit.sse("google", "thinking.sse"))
    outcome, result = await run_engine(gemini(wire), "gemini-2.5-pro", ask_flow, tmp_path)
    assert result["usage"]["reasoning_tokens"] == 759 and result["usage"]["output_tokens"] == 387 + 759
    assert result["output"].startswith("Here is a step-by-step guide")
    assert_cost(outcome, result, genai_cost("gemini-2.5-pro", chunks("thinking.sse")[-1]))


async def test_a_recorded_cassette_replays_the_tool_round_trip_offline_without_the_key(
    kit: Any, tmp_path: Path
) -> None:
    path = tmp_path / "gemini.json"
    live = kit.wire(kit.sse("google", "tool_call.sse"), kit.sse("google", "tool_answer.sse"))
    recorder = cassette(gemini(live), path, mode="record")
    recorded, _ = await run_engine(recorder, PRO3, tools_flow, subdir(tmp_path, "record"), "Capital of the user country?")
    offline = kit.wire()  # any request would fail the test: "unexpected request"
    player = cassette(gemini(offline), path, mode="replay")
    replayed, _ = await run_engine(player, PRO3, tools_flow, subdir(tmp_path, "replay"), "Capital of the user country?")
    assert replayed.value == recorded.value and offline.requests == []
    assert (recorder.recorded, player.replayed) == (2, 2)
    assert KEY not in path.read_text()
    assert SENT_SIGNATURE.replace("-", "+").replace("_", "/") in path.read_text()  # the raw part is kept


@tether.tool
def get_capital(country: str) -> str:
    """The capital of a country."""
    return "Paris"


@tether.tool
def get_temperature(city: str) -> str:
    """The temperature in a city."""
    return "30°C"


@tether.workflow(name="google-weather")
async def weather_flow(ctx: tether.Ctx, prompt: str) -> dict[str, Any]:
    return summary(await ctx.agent(prompt, tools=[get_capital, get_temperature], full=True))


async def test_engine_three_turn_tool_run_is_billed_the_final_prompt_counts_not_the_interim_ones(
    kit: Any, tmp_path: Path,
) -> None:
    names = ("tools3_capital.sse", "tools3_temperature.sse", "tools3_answer.sse")
    wire = kit.wire(*(kit.sse("google", name) for name in names))
    outcome, result = await run_engine(gemini(wire), FLASH20, weather_flow, tmp_path,
                                       "What is the temperature of the capital of France?")
    assert (result["status"], result["output"], result["finish_reason"], result["turns"]) == (
        "ok", "The temperature in Paris is 30°C.", "stop", 3)
    finals = [chunks(name)[-1] for name in names]
    billed = sum(body["usageMetadata"]["promptTokenCount"] for body in finals)
    assert billed == 36 + 48 + 63  # the largest counts seen would have been 36 + 48 + 169
    assert (result["usage"]["input_tokens"], result["usage"]["output_tokens"]) == (billed, 5 + 5 + 11)
    assert_cost(outcome, result, genai_cost(FLASH20, *finals))
    sent = [part for body in wire.bodies[1:] for content in body["contents"] for part in content["parts"]]
    assert {"functionResponse": {"id": "call_1_0", "name": "get_capital", "response": {"output": "Paris"}}} in sent
