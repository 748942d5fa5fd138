"""The Bedrock adapter against recorded ConverseStream bodies, served to the real aiobotocore client by a loopback server.

Bodies are kept as JSON lines (one event a line) and encoded into AWS event-stream frames on the way out;
`text.eventstream` is a recorded body byte for byte, and the encoder reproduces it exactly.
"""

from __future__ import annotations

import json
import struct
import sys
import zlib
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import genai_prices
import pytest
from aiobotocore.session import AioSession
from aiohttp import web
from aiohttp.test_utils import TestServer
from pydantic import BaseModel
from wirekit import WEATHER, WIRE, asker, run, summed, terminal, weather_turns

import tether
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
    ToolCallEnd,
    ToolCallPart,
    ToolCallStart,
    ToolResultPart,
    ToolSpec,
    Usage,
)
from tether.models.bedrock_converse import BedrockModel

ACCESS_KEY = "AKIAZZTETHERTEST0000"
SECRET_KEY = "tether/SECRET+access/key/that-must-never-leak"
NOVA = "amazon.nova-micro-v1:0"
SONNET37 = "us.anthropic.claude-3-7-sonnet-20250219-v1:0"
BEDROCK = WIRE / "bedrock"

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


# --- the wire: AWS event-stream frames from JSON lines, served over loopback ----------------------


def _header(name: str, value: str) -> bytes:
    key, val = name.encode(), value.encode()
    return struct.pack("B", len(key)) + key + b"\x07" + struct.pack(">H", len(val)) + val


def frame(headers: dict[str, str], payload: dict[str, Any]) -> bytes:
    """One event-stream message: prelude (lengths, CRC), string headers, JSON payload, message CRC."""
    head = b"".join(_header(k, v) for k, v in headers.items())
    body = json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode()
    prelude = struct.pack(">II", 16 + len(head) + len(body), len(head))
    message = prelude + struct.pack(">I", zlib.crc32(prelude)) + head + body
    return message + struct.pack(">I", zlib.crc32(message))


def lines(name: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (BEDROCK / name).read_text().splitlines() if line]


def encode(name: str) -> list[bytes]:
    """The fixture's events (and exceptions) as frames, headers in the order AWS sends them."""
    frames = []
    for line in lines(name):
        kind = "exception" if "exception" in line else "event"
        headers = {f":{kind}-type": line[kind], ":content-type": "application/json", ":message-type": kind}
        frames.append(frame(headers, line["data"]))
    return frames


def events(name: str) -> Handler:
    """A 200 event stream of a fixture, one frame per write, as Bedrock streams it."""

    async def reply(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"content-type": "application/vnd.amazon.eventstream"})
        await response.prepare(request)
        for chunk in encode(name) if name.endswith(".jsonl") else [(BEDROCK / name).read_bytes()]:
            await response.write(chunk)
        await response.write_eof()
        return response

    return reply


def error(name: str, status: int, code: str) -> Handler:
    async def reply(request: web.Request) -> web.StreamResponse:
        headers = {"x-amzn-ErrorType": f"{code}:http://internal.amazon.com/coral/com.amazon.bedrock/"}
        return web.json_response(json.loads((BEDROCK / name).read_text()), status=status, headers=headers)

    return reply


class Bedrock:
    """A loopback bedrock-runtime: answers queued replies in order and keeps every request it got."""

    def __init__(self, *replies: Handler) -> None:
        self.replies = list(replies)
        self.requests: list[dict[str, Any]] = []
        app = web.Application()
        app.router.add_post("/{tail:.*}", self.handle)
        self.server = TestServer(app, host="127.0.0.1")

    async def __aenter__(self) -> Bedrock:
        await self.server.start_server()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.server.close()

    @property
    def url(self) -> str:
        return str(self.server.make_url("")).rstrip("/")

    async def handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        self.requests.append({"path": request.path, "headers": dict(request.headers), "body": json.loads(body)})
        if not self.replies:
            raise AssertionError(f"unexpected request to {request.path}")
        return await self.replies.pop(0)(request)

    @property
    def body(self) -> dict[str, Any]:
        assert len(self.requests) == 1, f"expected one request, got {len(self.requests)}"
        body: dict[str, Any] = self.requests[0]["body"]
        return body


@pytest.fixture(autouse=True)
def no_ambient_aws(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Only what a test passes: no credentials, config files or instance metadata from the machine."""
    for name in ("AWS_PROFILE", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
                 "AWS_BEARER_TOKEN_BEDROCK", "AWS_REGION", "AWS_DEFAULT_REGION", "AWS_CONTAINER_CREDENTIALS_FULL_URI",
                 "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "AWS_WEB_IDENTITY_TOKEN_FILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-aws-credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


def converse(server: Bedrock, **kwargs: Any) -> BedrockModel:
    kwargs.setdefault("aws_access_key_id", ACCESS_KEY)
    kwargs.setdefault("aws_secret_access_key", SECRET_KEY)
    return BedrockModel(region="us-east-1", base_url=server.url, **kwargs)


async def stream(server: Bedrock, request: ChatRequest, signal: Signal | None = None, **kwargs: Any) -> list[Any]:
    model = converse(server, **kwargs)
    try:
        return await run(model, request, signal)
    finally:
        await model.aclose()


def genai_cost(model: str, *names: str) -> float:
    """What genai-prices charges for the usage the `metadata` event of each fixture reports."""
    total = 0.0
    for name in names:
        usage = next(line["data"]["usage"] for line in lines(name) if line.get("event") == "metadata")
        extracted = genai_prices.extract_usage({"usage": usage}, provider_id="aws").usage
        total += float(genai_prices.calc_price(extracted, model, provider_id="aws").total_price)
    return total


ask = asker(NOVA, max_output_tokens=1024)


# --- streams, one call at a time ----------------------------------------------------------------


@pytest.mark.parametrize("name", ["text", "server_tool"])
def test_the_encoder_reproduces_the_recorded_event_stream_byte_for_byte(name: str) -> None:
    assert b"".join(encode(f"{name}.jsonl")) == (BEDROCK / f"{name}.eventstream").read_bytes()


async def test_recorded_text_streams_deltas_then_one_finish_with_bedrocks_usage() -> None:
    async with Bedrock(events("text.eventstream")) as server:
        events_ = await stream(server, ask())
    text = "".join(e.text for e in events_ if isinstance(e, TextDelta))
    assert text.startswith("The capital of France is Paris.") and text.endswith('"The City of Love."')
    deltas = [line for line in lines("text.jsonl") if line["event"] == "contentBlockDelta"]
    assert [e.text for e in events_ if isinstance(e, TextDelta)] == [d["data"]["delta"]["text"] for d in deltas]
    end = terminal(events_)
    assert end == Finish(reason="stop", usage=Usage(input_tokens=13, output_tokens=82))
    assert summed(events_) == end.usage


NOVA2 = "us.amazon.nova-2-lite-v1:0"
FINAL_RESULT = ToolSpec(name="final_result", parameters={
    "type": "object", "properties": {"result": {"type": "number"}}, "required": ["result"]})
# What Bedrock answered and ran itself in the recording: pydantic-ai's second request sends both back as they came.
SERVER_USE = {"toolUse": {"toolUseId": "tooluse_MDxh6LALUXgZvnf9Dqd0fQ", "name": "nova_code_interpreter",
                          "input": {"snippet": "1234 * 5678"}, "type": "server_tool_use"}}
SERVER_RESULT = {"toolResult": {"toolUseId": "tooluse_MDxh6LALUXgZvnf9Dqd0fQ", "type": "nova_code_interpreter_result",
                                "status": "success", "content": [
                                    {"json": {"stdOut": "7006652", "stdErr": "", "exitCode": 0, "isError": False}}]}}


async def test_a_server_tool_and_its_result_are_raw_parts_and_only_the_client_call_is_a_tool_call() -> None:
    async with Bedrock(events("server_tool.eventstream")) as server:
        events_ = await stream(server, ask("What is 1234 * 5678?", model=NOVA2, tools=(FINAL_RESULT,)))
    starts = [e for e in events_ if isinstance(e, ToolCallStart)]
    assert starts == [ToolCallStart(index=0, wire_id="tooluse_GAkD3pNGSYeUBAwXiRVwIQ", name="final_result")]
    (end,) = [e for e in events_ if isinstance(e, ToolCallEnd)]
    assert (end.index, end.name, end.args) == (0, "final_result", {"result": 7006652.0})
    raws = [e.part for e in events_ if isinstance(e, RawPartEvent)]
    assert raws == [RawPart(family="bedrock", data=SERVER_USE), RawPart(family="bedrock", data=SERVER_RESULT)]
    assert terminal(events_) == Finish(reason="tool_calls", usage=Usage(input_tokens=1002, output_tokens=59))


async def test_the_request_is_a_signed_converse_stream_call_with_system_and_max_tokens() -> None:
    async with Bedrock(events("text.jsonl")) as server:
        await stream(server, ask(messages=(Message.text("system", "Be brief."), Message.text("user", "Hi")),
                                 max_output_tokens=321))
    request = server.requests[0]
    assert request["path"] == f"/model/{NOVA}/converse-stream"
    assert request["headers"]["Authorization"].startswith(f"AWS4-HMAC-SHA256 Credential={ACCESS_KEY}/")
    assert SECRET_KEY not in json.dumps(request["headers"])  # SigV4 signs with the secret, never sends it
    assert server.body == {  # the model id rides in the path
        "messages": [{"role": "user", "content": [{"text": "Hi"}]}],
        "inferenceConfig": {"maxTokens": 321},
        "system": [{"text": "Be brief."}],
    }


async def test_a_tool_call_streams_start_and_parsed_end_and_reasoning_becomes_a_raw_part() -> None:
    async with Bedrock(events("tool_use.jsonl")) as server:
        events_ = await stream(server, ask(model=SONNET37, tools=(ToolSpec(name="get_user_country"),)))
    assert ToolCallStart(index=0, wire_id="tooluse_4Lo0VS-FT5yev_-skOCQdw", name="get_user_country") in events_
    end = next(e for e in events_ if isinstance(e, ToolCallEnd))
    assert (end.name, end.args) == ("get_user_country", {})
    (raw,) = [e.part for e in events_ if isinstance(e, RawPartEvent)]
    delta = lines("tool_use.jsonl")[1:3]
    assert raw == RawPart(family="bedrock", data={"reasoningContent": {"reasoningText": {
        "text": delta[0]["data"]["delta"]["reasoningContent"]["text"],
        "signature": delta[1]["data"]["delta"]["reasoningContent"]["signature"],
    }}})
    assert "".join(e.text for e in events_ if isinstance(e, TextDelta)).startswith("I'll need to check")
    assert terminal(events_) == Finish(reason="tool_calls", usage=Usage(input_tokens=397, output_tokens=138))


async def test_the_next_turn_sends_reasoning_text_and_tool_use_back_as_the_recording_shows() -> None:
    async with Bedrock(events("tool_use.jsonl"), events("tool_answer.jsonl")) as server:
        request = ask("What is the largest city in the user country?", model=SONNET37,
                      tools=(ToolSpec(name="get_user_country"),))
        events_ = await stream(server, request)
        raws = tuple(e.part for e in events_ if isinstance(e, RawPartEvent))
        text = "".join(e.text for e in events_ if isinstance(e, TextDelta))
        call = ToolCallPart(id="call_1_0", name="get_user_country", args={})
        assistant = Message(role="assistant", parts=(*raws, tether.contracts.TextPart(text=text), call))
        result = Message(role="tool", parts=(ToolResultPart(call_id="call_1_0", name="get_user_country",
                                                           content="Mexico"),))
        await stream(server, request.model_copy(update={"messages": (*request.messages, assistant, result)}))
    sent = server.requests[1]["body"]["messages"]
    # pydantic-ai's recorded second request, with tether's wire id for the call
    recorded_reasoning = lines("tool_use.jsonl")[1]["data"]["delta"]["reasoningContent"]["text"]
    assert sent[1] == {"role": "assistant", "content": [
        {"reasoningContent": {"reasoningText": {"text": recorded_reasoning, "signature": raws[0].data[
            "reasoningContent"]["reasoningText"]["signature"]}}},
        {"text": "I'll need to check which country you're in first to answer your question about the largest city."},
        {"toolUse": {"toolUseId": "tooluse_call_1_0", "name": "get_user_country", "input": {}}},
    ]}
    assert sent[2] == {"role": "user", "content": [
        {"toolResult": {"toolUseId": "tooluse_call_1_0", "content": [{"text": "Mexico"}], "status": "success"}},
    ]}


async def test_history_sends_tool_errors_as_error_results_and_keeps_other_families_home() -> None:
    async with Bedrock(events("text.jsonl")) as server:
        openai_part = RawPart(family="openai", data={"type": "reasoning", "encrypted_content": "x"})
        history = (Message.text("user", "Weather?"), *weather_turns(openai_part), Message.text("user", "And now?"))
        await stream(server, ask(messages=history, tools=(WEATHER,), tool_choice="required"))
    body = server.body
    assert body["messages"][1] == {"role": "assistant", "content": [
        {"text": "Checking."},
        {"toolUse": {"toolUseId": "tooluse_call_3_0", "name": "get_weather", "input": {"city": "Paris"}}},
    ]}
    assert body["messages"][2]["content"] == [
        {"toolResult": {"toolUseId": "tooluse_call_3_0", "content": [{"text": "boom"}], "status": "error"}},
        {"text": "And now?"},
    ]
    assert body["toolConfig"] == {
        "tools": [{"toolSpec": {"name": "get_weather", "description": "Weather.", "inputSchema": {"json": {"type": "object"}}}}],
        "toolChoice": {"any": {}},
    }
    assert "encrypted_content" not in json.dumps(body)


@pytest.mark.parametrize(
    ("choice", "wire_choice"),
    [("auto", {"auto": {}}), ("none", {"auto": {}}), ("required", {"any": {}}),
     ("get_weather", {"tool": {"name": "get_weather"}})],
)
async def test_tool_choice_maps_to_converse(choice: str, wire_choice: Any) -> None:
    async with Bedrock(events("text.jsonl")) as server:
        await stream(server, ask(tools=(WEATHER,), tool_choice=choice))
    assert server.body["toolConfig"]["toolChoice"] == wire_choice


async def test_structured_output_is_sent_as_a_closed_json_schema_text_format() -> None:
    async with Bedrock(events("structured.jsonl")) as server:
        schema = {"type": "object", "properties": {"city": {"type": "string"}, "country": {"type": "string"}},
                  "required": ["city", "country"]}
        events_ = await stream(server, ask(model="us.anthropic.claude-sonnet-4-6", output_format=OutputFormat(
            name="CityLocation", schema=schema)))
    fmt = server.body["outputConfig"]["textFormat"]
    assert (fmt["type"], fmt["structure"]["jsonSchema"]["name"]) == ("json_schema", "CityLocation")
    assert json.loads(fmt["structure"]["jsonSchema"]["schema"]) == {**schema, "additionalProperties": False}
    text = "".join(e.text for e in events_ if isinstance(e, TextDelta))
    assert json.loads(text) == {"city": "Paris", "country": "France"}
    assert terminal(events_) == Finish(reason="stop", usage=Usage(input_tokens=180, output_tokens=12))


async def test_recorded_thinking_keeps_its_text_and_signature_for_the_next_turn() -> None:
    async with Bedrock(events("thinking.jsonl")) as server:
        events_ = await stream(server, ask(model="us.anthropic.claude-sonnet-4-20250514-v1:0"),
                               additional_model_request_fields={"thinking": {"type": "enabled", "budget_tokens": 1024}})
    assert server.body["additionalModelRequestFields"] == {"thinking": {"type": "enabled", "budget_tokens": 1024}}
    (raw,) = [e.part for e in events_ if isinstance(e, RawPartEvent)]
    reasoning = raw.data["reasoningContent"]["reasoningText"]
    assert reasoning["text"].startswith("The human has just said \"Hello\" to me.")
    assert reasoning["signature"].startswith("EvYCCkgICxABGAIqQH+vdAorxvHnWTPEdc8BK")
    assert "".join(e.text for e in events_ if isinstance(e, TextDelta)) == (
        "Hello! How are you doing today? Is there anything I can help you with?")
    assert terminal(events_) == Finish(reason="stop", usage=Usage(input_tokens=37, output_tokens=74))


async def test_max_tokens_finishes_max_tokens() -> None:
    async with Bedrock(events("max_tokens.jsonl")) as server:
        end = terminal(await stream(server, ask(max_output_tokens=5)))
    assert end == Finish(reason="max_tokens", usage=Usage(input_tokens=13, output_tokens=5))


async def test_a_guardrail_intervention_finishes_content_filter() -> None:
    guardrail = {"guardrailIdentifier": "xbgw7g293v7o", "guardrailVersion": "DRAFT", "trace": "enabled"}
    async with Bedrock(events("guardrail.jsonl")) as server:
        end = terminal(await stream(server, ask(), guardrail_config=guardrail))
    assert server.body["guardrailConfig"] == guardrail
    assert end == Finish(reason="content_filter", usage=Usage(input_tokens=13))


async def test_cache_reads_are_folded_into_input_and_reported() -> None:
    async with Bedrock(events("cache_usage.jsonl")) as server:
        end = terminal(await stream(server, ask(model="us.anthropic.claude-sonnet-4-5-20250929-v1:0")))
    assert end.usage == Usage(input_tokens=13 + 1504, output_tokens=5, cache_read_tokens=1504)


async def test_effort_is_sent_only_to_models_that_support_it() -> None:
    async with Bedrock(events("text.jsonl"), events("text.jsonl")) as server:
        model = converse(server)
        await run(model, ask(model="us.anthropic.claude-sonnet-4-6", effort="high"))
        await run(model, ask(effort="high"))
        await model.aclose()
    assert server.requests[0]["body"]["outputConfig"] == {"effort": "high"}
    assert "outputConfig" not in server.requests[1]["body"]


# --- errors -----------------------------------------------------------------------------------


async def test_a_mid_stream_exception_event_is_a_retryable_transport_error() -> None:
    async with Bedrock(events("midstream_error.jsonl")) as server:
        events_ = await stream(server, ask())
    assert [e.text for e in events_ if isinstance(e, TextDelta)][:2] == ["The", " capital of France is Paris."]
    end = terminal(events_)
    assert isinstance(end, StreamError)
    assert (end.kind, end.retryable, end.status) == ("transport", True, 424)  # modelStreamErrorException
    assert "unable to process your request" in end.message
    assert end.usage is None  # ConverseStream reports usage only at the end: nothing to bill yet


async def test_throttling_429_is_a_retryable_rate_limit_and_the_sdk_does_not_retry() -> None:
    async with Bedrock(error("error_429.json", 429, "ThrottlingException")) as server:
        end = terminal(await stream(server, ask()))
    assert (end.kind, end.retryable, end.status) == ("rate-limit", True, 429)
    assert "Rate exceeded" in end.message
    assert len(server.requests) == 1


@pytest.mark.parametrize(
    ("name", "status", "code"),
    [("error_500.json", 500, "InternalServerException"), ("error_503.json", 503, "ServiceUnavailableException")],
)
async def test_server_errors_are_retryable_transport(name: str, status: int, code: str) -> None:
    async with Bedrock(error(name, status, code)) as server:
        end = terminal(await stream(server, ask()))
    assert (end.kind, end.retryable, end.status) == ("transport", True, status)


async def test_an_invalid_model_is_a_terminal_400() -> None:
    async with Bedrock(error("error_400_model.json", 400, "ValidationException")) as server:
        end = terminal(await stream(server, ask(model="us.does-not-exist-model-v1:0")))
    assert (end.kind, end.retryable, end.status) == ("terminal", False, 400)
    assert "model identifier is invalid" in end.message


async def test_context_window_400_is_a_typed_context_overflow_with_a_clear_message() -> None:
    async with Bedrock(error("error_400_context.json", 400, "ValidationException")) as server:
        end = terminal(await stream(server, ask()))
    assert (end.kind, end.retryable, end.status) == ("context-overflow", False, 400)
    assert "context window exceeded" in end.message


@pytest.mark.parametrize(
    ("name", "code"),
    [("error_403.json", "UnrecognizedClientException"), ("error_403_access.json", "AccessDeniedException")],
)
async def test_403_is_terminal_names_the_credential_chain_and_leaks_no_key(name: str, code: str) -> None:
    async with Bedrock(error(name, 403, code)) as server:
        events_ = await stream(server, ask())
    end = terminal(events_)
    assert (end.kind, end.retryable, end.status) == ("terminal", False, 403)
    assert "AWS_ACCESS_KEY_ID" in end.message and code in end.message
    dumped = json.dumps([e.model_dump(mode="json") for e in events_])
    assert ACCESS_KEY not in dumped and SECRET_KEY not in dumped


def write_profile(tmp_path: Path, access_key: str) -> None:
    (tmp_path / "no-aws-credentials").write_text(
        f"[tether]\naws_access_key_id = {access_key}\naws_secret_access_key = {SECRET_KEY}\n")
    (tmp_path / "no-aws-config").write_text("[profile tether]\nregion = ap-southeast-2\n")


async def test_credentials_and_region_come_from_the_standard_chain_profile(tmp_path: Path) -> None:
    profile_key = "AKIAZZTETHERPROFILE0"
    write_profile(tmp_path, profile_key)  # the shared credentials and config files the fixture points at
    async with Bedrock(events("text.jsonl")) as server:
        model = tether.models.bedrock(profile="tether", base_url=server.url)
        end = terminal(await run(model, ask()))
        await model.aclose()
    assert end.reason == "stop"
    authorization = server.requests[0]["headers"]["Authorization"]
    assert f"Credential={profile_key}/" in authorization and "/ap-southeast-2/bedrock/" in authorization


async def test_no_credentials_anywhere_is_terminal_and_says_where_they_come_from() -> None:
    async with Bedrock() as server:
        model = BedrockModel(region="us-east-1", base_url=server.url)
        end = terminal(await run(model, ask()))
        await model.aclose()
    assert (end.kind, end.retryable) == ("terminal", False)
    assert "no AWS credentials" in end.message and "AWS_PROFILE" in end.message
    assert server.requests == []


async def test_a_bedrock_api_key_is_sent_as_a_bearer_token_and_never_echoed() -> None:
    token = "ABSKQmVkcm9ja0FQSUtleS10ZXRoZXItdGVzdA=="
    async with Bedrock(error("error_403.json", 403, "UnrecognizedClientException")) as server:
        model = BedrockModel(region="us-east-1", base_url=server.url, api_key=token)
        events_ = await run(model, ask())
        await model.aclose()
    assert server.requests[0]["headers"]["Authorization"] == f"Bearer {token}"
    assert token not in json.dumps([e.model_dump(mode="json") for e in events_])


async def test_credentials_echoed_back_in_an_error_body_are_masked() -> None:
    async def echo(request: web.Request) -> web.StreamResponse:
        message = f"bad signature from {ACCESS_KEY} with secret {SECRET_KEY}"
        return web.json_response({"message": message}, status=403,
                                 headers={"x-amzn-ErrorType": "InvalidSignatureException"})

    async with Bedrock(echo) as server:
        end = terminal(await stream(server, ask()))
    assert ACCESS_KEY not in end.message and SECRET_KEY not in end.message
    assert end.message.count("[redacted]") == 2


async def test_a_refused_connection_is_a_retryable_transport_error() -> None:
    async with Bedrock() as server:
        url = server.url
    model = BedrockModel(region="us-east-1", base_url=url, aws_access_key_id=ACCESS_KEY,
                         aws_secret_access_key=SECRET_KEY)
    end = terminal(await run(model, ask()))
    await model.aclose()
    assert (end.kind, end.retryable) == ("transport", True)


async def test_an_aborted_signal_makes_no_request() -> None:
    async with Bedrock() as server:
        signal = Signal()
        signal.abort("budget")
        events_ = await stream(server, ask(), signal)
    assert events_ == [Finish(reason="cancelled", usage=Usage(approximate=True))]
    assert server.requests == []


async def test_a_client_passed_in_is_used_as_is_and_stays_open() -> None:
    async with Bedrock(events("text.jsonl"), events("text.jsonl")) as server:
        creator = AioSession().create_client(
            "bedrock-runtime", region_name="eu-west-1", endpoint_url=server.url,
            aws_access_key_id=ACCESS_KEY, aws_secret_access_key=SECRET_KEY,
        )
        async with creator as client:
            model = BedrockModel(client=client)
            assert terminal(await run(model, ask())).reason == "stop"
            await model.aclose()
            assert terminal(await run(model, ask())).reason == "stop"  # still open
    assert "/eu-west-1/bedrock/" in server.requests[0]["headers"]["Authorization"]


# --- set-up, caps -------------------------------------------------------------------------------


def test_without_a_region_the_factory_fails_at_construction_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with pytest.raises(tether.ConfigError) as caught:
        tether.models.bedrock()
    assert "AWS_REGION" in caught.value.message and caught.value.data["env"] == "AWS_REGION"
    monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-central-1")
    assert tether.models.bedrock().id == "bedrock"  # credentials are resolved on the first call, not here


def test_a_missing_sdk_is_a_config_error_with_the_pip_command(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [m for m in sys.modules if m == "aiobotocore" or m.startswith("aiobotocore.")]:
        monkeypatch.setitem(sys.modules, name, None)  # as if the SDK were not installed
    monkeypatch.delitem(sys.modules, "tether.models.bedrock_converse", raising=False)
    with pytest.raises(tether.ConfigError) as caught:
        tether.models.bedrock(region="us-east-1")
    assert "pip install 'tether[bedrock]'" in caught.value.message
    assert caught.value.data["package"] == "aiobotocore"


def test_caps_come_from_genai_prices_and_the_model_vendor() -> None:
    model = BedrockModel(region="us-east-1")
    claude = model.caps("us.anthropic.claude-sonnet-4-6")
    assert claude.price is not None and claude.price.input > 0 and claude.price.cache_read is not None
    assert (claude.structured_output, claude.max_output_tokens) == ("native", 64_000)
    assert claude.efforts == ("low", "medium", "high")
    assert model.caps(SONNET37).structured_output == "tool" and model.caps(SONNET37).efforts == ()
    nova = model.caps(NOVA)
    assert nova.price is not None and nova.structured_output == "tool"
    other = model.caps("meta.llama3-3-70b-instruct-v1:0")
    assert other.structured_output == "prompt" and other.price is not None
    assert model.caps("acme.unknown-v1:0").price is None
    caps = ModelCaps(context_window=1_000, max_output_tokens=100)
    assert BedrockModel(region="us-east-1", model_caps=caps).caps(NOVA) is caps


def test_the_factory_builds_a_chat_model() -> None:
    model = tether.models.bedrock(region="us-east-1", profile=None)
    assert isinstance(model, BedrockModel) and isinstance(model, ChatModel)
    assert (model.id, model.family) == ("bedrock", "bedrock")


# --- through the engine: a workflow calling ctx.agent -----------------------------------------------


class CityLocation(BaseModel):
    city: str
    country: str


@tether.tool
def get_user_country() -> str:
    """The user's country."""
    return "Mexico"


def summary(result: tether.AgentResult[Any]) -> dict[str, Any]:
    output = result.output.model_dump() if isinstance(result.output, BaseModel) else result.output
    return {
        "status": result.status, "output": output, "finish_reason": result.finish_reason,
        "error": result.error.kind if result.error else None, "cost_usd": result.cost_usd,
        "usage": result.usage.model_dump(), "turns": result.turns,
    }


@tether.workflow(name="bedrock-ask")
async def ask_flow(ctx: tether.Ctx, prompt: str, max_output_tokens: int = 1024) -> dict[str, Any]:
    return summary(await ctx.agent(prompt, max_output_tokens=max_output_tokens, full=True))


@tether.workflow(name="bedrock-tools")
async def tools_flow(ctx: tether.Ctx, prompt: str) -> dict[str, Any]:
    return summary(await ctx.agent(prompt, tools=[get_user_country], full=True))


@tether.workflow(name="bedrock-structured")
async def structured_flow(ctx: tether.Ctx, prompt: str) -> dict[str, Any]:
    return summary(await ctx.agent(prompt, output=CityLocation, full=True))


async def no_sleep(seconds: float) -> None:
    return None


async def run_engine(
    server: Bedrock, name: str, flow: tether.Workflow, tmp_path: Path, **args: Any
) -> tuple[tether.RunOutcome, dict[str, Any]]:
    model = converse(server)
    engine = tether.Engine(
        models=[model], routing={"loop": f"bedrock:{name}"}, store=f"sqlite:///{tmp_path}/run.db",
        sleep=no_sleep, event_log=tmp_path / "events-{run_id}.jsonl",
    )
    try:
        outcome = await engine.run(flow, {"prompt": "Hi", **args}, run_id="bedrock-1")
    finally:
        await engine.close()
        await model.aclose()
    assert outcome.status == "ok", outcome.error
    assert_no_secret(tmp_path, ACCESS_KEY, SECRET_KEY)
    return outcome, outcome.value


def assert_no_secret(tmp_path: Path, *secrets: str) -> None:
    for path in tmp_path.iterdir():  # the journal (sqlite) and the event log
        data = path.read_bytes()
        for secret in secrets:
            assert secret.encode() not in data, path


def assert_cost(outcome: tether.RunOutcome, result: dict[str, Any], expected: float) -> None:
    assert result["cost_usd"] == pytest.approx(expected, abs=1e-12)
    assert outcome.cost.total_usd == pytest.approx(expected, abs=1e-9)


async def test_engine_text_costs_what_genai_prices_charges(tmp_path: Path) -> None:
    model = "us.anthropic.claude-sonnet-4-5-20250929-v1:0"
    async with Bedrock(events("cache_usage.jsonl")) as server:
        outcome, result = await run_engine(server, model, ask_flow, tmp_path)
    assert (result["status"], result["output"], result["finish_reason"]) == ("ok", "5", "stop")
    assert result["usage"]["cache_read_tokens"] == 1504
    assert_cost(outcome, result, genai_cost(model, "cache_usage.jsonl"))


async def test_engine_streamed_text_costs_what_genai_prices_charges(tmp_path: Path) -> None:
    async with Bedrock(events("text.eventstream")) as server:
        outcome, result = await run_engine(server, NOVA, ask_flow, tmp_path)
    assert result["output"].startswith("The capital of France is Paris.")
    assert_cost(outcome, result, genai_cost(NOVA, "text.jsonl"))


async def test_engine_tool_round_trip_keeps_the_reasoning_and_costs_both_calls(tmp_path: Path) -> None:
    async with Bedrock(events("tool_use.jsonl"), events("tool_answer.jsonl")) as server:
        outcome, result = await run_engine(server, SONNET37, tools_flow, tmp_path)
    assert (result["status"], result["turns"]) == ("ok", 2)
    assert result["output"].startswith("Based on your location, you're in Mexico.")
    assistant, tool = server.requests[1]["body"]["messages"][1:3]
    assert "reasoningContent" in assistant["content"][0]
    assert assistant["content"][-1]["toolUse"]["name"] == "get_user_country"
    assert tool["content"][0]["toolResult"]["content"] == [{"text": "Mexico"}]
    assert_cost(outcome, result, genai_cost(SONNET37, "tool_use.jsonl", "tool_answer.jsonl"))


async def test_engine_structured_output_is_validated_and_costs_what_genai_prices_charges(tmp_path: Path) -> None:
    model = "us.anthropic.claude-sonnet-4-6"
    async with Bedrock(events("structured.jsonl")) as server:
        outcome, result = await run_engine(server, model, structured_flow, tmp_path)
    assert result["output"] == {"city": "Paris", "country": "France"}
    assert "textFormat" in server.body["outputConfig"]
    assert_cost(outcome, result, genai_cost(model, "structured.jsonl"))


async def test_engine_max_tokens_cut_settles_limit_with_the_partial_text(tmp_path: Path) -> None:
    async with Bedrock(events("max_tokens.jsonl")) as server:
        outcome, result = await run_engine(server, NOVA, ask_flow, tmp_path, max_output_tokens=5)
    assert (result["status"], result["finish_reason"], result["output"]) == (
        "limit", "max_tokens", "The capital of France is")
    assert server.body["inferenceConfig"] == {"maxTokens": 5}
    assert_cost(outcome, result, genai_cost(NOVA, "max_tokens.jsonl"))


async def test_engine_guardrail_intervention_is_a_terminal_error_billed_for_its_prompt(tmp_path: Path) -> None:
    async with Bedrock(events("guardrail.jsonl")) as server:
        outcome, result = await run_engine(server, NOVA, ask_flow, tmp_path)
    assert (result["status"], result["error"], result["finish_reason"]) == ("error", "terminal", "content_filter")
    assert len(server.requests) == 1
    assert_cost(outcome, result, genai_cost(NOVA, "guardrail.jsonl"))


async def test_engine_mid_stream_error_is_retried_and_the_answer_is_billed(tmp_path: Path) -> None:
    async with Bedrock(events("midstream_error.jsonl"), events("text.jsonl")) as server:
        outcome, result = await run_engine(server, NOVA, ask_flow, tmp_path)
    assert result["status"] == "ok" and len(server.requests) == 2
    # The failed attempt streamed 70 characters and reported no usage: it is charged an approximate estimate
    # (its input estimate, and 70 / 4 -> 18 output tokens), priced like any usage (docs/budgets.md).
    answered = genai_prices.Usage(input_tokens=13, output_tokens=82)  # text.jsonl's metadata
    assert outcome.cost.approximate and outcome.cost.usage.output_tokens == 82 + 18
    estimate = genai_prices.Usage(input_tokens=outcome.cost.usage.input_tokens - 13, output_tokens=18)
    assert 0 < (estimate.input_tokens or 0) < 100
    charged = float(genai_prices.calc_price(estimate, NOVA, provider_id="aws").total_price)
    assert float(genai_prices.calc_price(answered, NOVA, provider_id="aws").total_price) == pytest.approx(
        genai_cost(NOVA, "text.jsonl"))
    assert_cost(outcome, result, genai_cost(NOVA, "text.jsonl") + charged)


async def test_engine_thinking_costs_what_genai_prices_charges(tmp_path: Path) -> None:
    model = "us.anthropic.claude-sonnet-4-20250514-v1:0"
    async with Bedrock(events("thinking.jsonl")) as server:
        outcome, result = await run_engine(server, model, ask_flow, tmp_path)
    assert result["output"] == "Hello! How are you doing today? Is there anything I can help you with?"
    assert_cost(outcome, result, genai_cost(model, "thinking.jsonl"))


@tether.tool
def final_result(result: float) -> str:
    """The final response which ends this conversation."""
    return "Final result processed."


async def test_engine_leaves_a_server_tool_to_bedrock_and_sends_its_blocks_back_unchanged(tmp_path: Path) -> None:
    ran: list[str] = []

    @tether.tool(name="nova_code_interpreter")
    def local_interpreter(snippet: str) -> str:
        """A local tool of the server tool's name: it must never run."""
        ran.append(snippet)
        return "local"

    @tether.workflow(name="bedrock-server-tool")
    async def flow(ctx: tether.Ctx, prompt: str) -> dict[str, Any]:
        return summary(await ctx.agent(prompt, tools=[final_result, local_interpreter], full=True))

    # The second reply is any recorded Nova answer: what matters is the request that asks for it.
    async with Bedrock(events("server_tool.eventstream"), events("text.jsonl")) as server:
        outcome, result = await run_engine(server, NOVA2, flow, tmp_path, prompt="What is 1234 * 5678?")
    assert (result["status"], result["finish_reason"], result["turns"]) == ("ok", "stop", 2)
    assert ran == []
    assistant, user = server.requests[1]["body"]["messages"][1:3]
    # pydantic-ai's recorded follow-up request, with tether's wire id for the client call
    assert assistant == {"role": "assistant", "content": [
        SERVER_USE, SERVER_RESULT,
        {"toolUse": {"toolUseId": "tooluse_call_1_0", "name": "final_result", "input": {"result": 7006652.0}}},
    ]}
    assert user == {"role": "user", "content": [{"toolResult": {
        "toolUseId": "tooluse_call_1_0", "content": [{"text": "Final result processed."}], "status": "success"}}]}
    usage = result["usage"]
    assert (usage["input_tokens"], usage["output_tokens"]) == (1002 + 13, 59 + 82)
    assert_cost(outcome, result, genai_cost(NOVA2, "server_tool.jsonl") + genai_cost(NOVA2, "text.jsonl"))
