"""Every wire fixture of every provider, through the engine.

A loopback server on 127.0.0.1 serves the recorded bytes; the adapter is built by its public factory with
`base_url` pointing there, so the official SDK (anthropic, openai, google-genai, aiobotocore) opens its own
connection and parses them. A workflow calls `ctx.agent(...)` on a model priced by the table below, inside a
real `Engine` run. Per fixture the test declares, from the fixture's bytes, what the run must end with: the
agent's status, finish reason and typed error kind, the usage of each billed call, how many requests the
engine made (a retryable error is retried, a terminal one is not), which tools ran and what went back for
them (each result answering a call the request sends back, and the raw parts, signatures and server-tool
blocks a reply carried), and so the cost: the price row times that usage, read back from the cost report.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import pytest
from pydantic import BaseModel
from wirekit import WIRE, Handler, Loopback, aws_frames, json_error, sse_events, stream_of

import tether
from tether.contracts import ChatModel, Usage

Provider = Literal["anthropic", "openai", "openai_compatible", "google", "bedrock"]
PROVIDERS: tuple[Provider, ...] = ("anthropic", "openai", "openai_compatible", "google", "bedrock")

KEY = "sk-matrix-KEY-0123456789abcdef"
GEMINI_KEY = "AIzaSyMATRIX-tether-0123456789abcdefghij"
AWS_ID, AWS_SECRET = "AKIAZZTETHERMATRIX00", "matrix/SECRET+key/that-must-never-leak"

# USD per million tokens, distinct per kind so that a count billed at the wrong rate shows.
PRICE = tether.Price(input=2.0, output=10.0, cache_read=0.25, cache_write=3.75)


def priced(usage: Usage) -> float:
    """The price row times one call's usage (input counts include cache reads and writes)."""
    uncached = usage.input_tokens - usage.cache_read_tokens - usage.cache_write_tokens
    return (uncached * 2.0 + usage.cache_read_tokens * 0.25 + usage.cache_write_tokens * 3.75
            + usage.output_tokens * 10.0) / 1_000_000


EST_IN = 18
"""The engine's input estimate for the matrix's one-line prompt: what a call that streamed output and failed
before reporting usage is charged for its input (docs/budgets.md, *Calls that fail mid-stream*)."""


def U(inp: int = 0, out: int = 0, *, cr: int = 0, cw: int = 0, r: int = 0, approx: bool = False) -> Usage:
    """One call's usage, short: input, output, cache reads, cache writes, reasoning (part of output)."""
    return Usage(input_tokens=inp, output_tokens=out, cache_read_tokens=cr, cache_write_tokens=cw,
                 reasoning_tokens=r, approximate=approx)


# --- what the fixtures are served as ------------------------------------------------------------------


@dataclass(frozen=True)
class Body:
    """A 200 streamed body: a recorded event stream (or a Bedrock event-stream)."""

    name: str


@dataclass(frozen=True)
class Err:
    """An HTTP error with a recorded JSON body; `code` is Bedrock's `x-amzn-ErrorType`."""

    name: str
    status: int
    headers: tuple[tuple[str, str], ...] = ()
    code: str | None = None


Served = Body | Err


@dataclass(frozen=True)
class Prefix:
    """A long recorded answer, named by how it starts."""

    text: str


def handler(provider: Provider, served: Served) -> Handler:
    """How the loopback server answers one request with a fixture, in the provider's own framing."""
    if isinstance(served, Err):
        headers = dict(served.headers)
        if served.code:
            headers["x-amzn-ErrorType"] = f"{served.code}:http://internal.amazon.com/coral/com.amazon.bedrock/"
        return json_error(provider, served.name, served.status, headers)
    if provider == "bedrock":
        return stream_of(aws_frames(served.name), "application/vnd.amazon.eventstream")
    return stream_of(sse_events(provider, served.name), "text/event-stream")


# --- tools and output types the fixtures call for -----------------------------------------------------


RAN: list[str] = []
SLEEPS: list[float] = []


def ran(name: str, value: str) -> str:
    """A tool's answer, noting that it ran."""
    RAN.append(name)
    return value


@tether.tool
def get_weather(location: str, unit: str = "celsius") -> str:
    """The weather at a location."""
    return ran("get_weather", f"14C in {location}")


@tether.tool
def get_time(tz: str) -> str:
    """The time in a zone."""
    return ran("get_time", f"09:00 in {tz}")


@tether.tool
def list_cities() -> str:
    """Known cities."""
    return ran("list_cities", "Paris, Tokyo")


@tether.tool
def record_forecast(city: str, summary: str) -> str:
    """Record a forecast (a cut call must never reach it)."""
    return ran("record_forecast", "recorded")


@tether.tool
def lookup(q: str) -> str:
    """Look something up."""
    return ran("lookup", f"{q}: an engine")


@tether.tool
def get_country() -> str:
    """The user's country."""
    return ran("get_country", "Mexico")


@tether.tool
def get_user_country() -> str:
    """The user's country."""
    return ran("get_user_country", "Mexico")


@tether.tool
def get_capital(country: str) -> str:
    """A country's capital."""
    return ran("get_capital", "Paris")


@tether.tool
def get_temperature(city: str) -> str:
    """A city's temperature."""
    return ran("get_temperature", "30°C")


@tether.tool
def final_result(result: float) -> str:
    """The final response which ends this conversation."""
    return ran("final_result", "Final result processed.")


@tether.tool(name="nova_code_interpreter")
def local_interpreter(snippet: str) -> str:
    """A local tool named like Bedrock's server tool: it must never run."""
    return ran("nova_code_interpreter", "local")


TOOL_OUTPUT = {"get_weather": "14C in", "get_time": "09:00 in Asia/Tokyo", "list_cities": "Paris, Tokyo",
               "lookup": "tether: an engine", "get_country": "Mexico", "get_user_country": "Mexico",
               "get_capital": "Paris", "get_temperature": "30°C", "final_result": "Final result processed."}
TOOLS = {t.name: t for t in (get_weather, get_time, list_cities, record_forecast, lookup, get_country,
                             get_user_country, get_capital, get_temperature, final_result, local_interpreter)}


class CityLocation(BaseModel):
    city: str
    country: str


class Forecast(BaseModel):
    city: str
    celsius: int


OUTPUTS: dict[str, type[BaseModel]] = {"CityLocation": CityLocation, "Forecast": Forecast}


def summary(result: tether.AgentResult[Any]) -> dict[str, Any]:
    """What the test reads of an agent result, as the workflow's (journaled) value."""
    output = result.output.model_dump() if isinstance(result.output, BaseModel) else result.output
    return {
        "status": result.status, "output": output, "finish_reason": result.finish_reason,
        "error": result.error.kind if result.error else None,
        "retryable": result.error.retryable if result.error else None,
        "cost_usd": result.cost_usd, "usage": result.usage, "turns": result.turns,
    }


@tether.workflow(name="fixture-matrix")
async def matrix_flow(ctx: tether.Ctx, tools: list[str], output: str | None, full: bool) -> Any:
    """One agent on the routed model, with the tools and output type the fixture calls for."""
    options: dict[str, Any] = {"tools": [TOOLS[name] for name in tools], "max_output_tokens": 1024}
    if output:
        options["output"] = OUTPUTS[output]
    if not full:  # a failed agent fails the run: the error kind is the outcome's
        return await ctx.agent("Answer the question.", **options)
    return summary(await ctx.agent("Answer the question.", full=True, **options))


# --- the matrix ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    provider: Provider
    name: str
    served: tuple[Served, ...]
    status: Literal["ok", "error", "limit"]
    finish: str | None
    calls: tuple[Usage, ...]
    """The usage of each call that bills (what the provider reported; a cut one `approximate`)."""
    error: str | None = None
    output: Any = None
    model: str | None = None
    tools: tuple[str, ...] = ()
    ran: tuple[str, ...] = ()
    output_type: str | None = None
    turns: int | None = None
    retries: int = 0
    """Attempts the engine made again after a retryable error (each after a backoff sleep)."""
    wait: float = 0.0
    """The least backoff before a retry: the provider's retry-after (header or Gemini's `RetryInfo`)."""
    sent_back: str | None = None
    """Bytes of a raw part (thinking signature, encrypted reasoning, server-tool block) the reply carried that
    the follow-up request must send back as they came."""

    @property
    def requests(self) -> int:
        return len(self.served)

    @property
    def fixtures(self) -> set[str]:
        return {s.name for s in self.served}

    @property
    def id(self) -> str:
        return f"{self.provider}/{self.name}"


MODELS: dict[Provider, str] = {
    "anthropic": "claude-sonnet-4-5", "openai": "gpt-4.1", "openai_compatible": "qwen3:8b",
    "google": "gemini-2.5-flash", "bedrock": "amazon.nova-micro-v1:0",
}
ADAPTER_ID: dict[Provider, str] = {
    "anthropic": "anthropic", "openai": "openai", "openai_compatible": "compat", "google": "google",
    "bedrock": "bedrock",
}

# What each provider's plain answer is: the reply that follows a retried error or a tool call.
A_TEXT, A_TEXT_U = Body("text.sse"), U(25, 6)
O_TEXT, O_TEXT_U = Body("text.sse"), U(37, 11)
C_TEXT, C_TEXT_U = Body("text.sse"), U(19, 4)
G_TEXT, G_TEXT_U = Body("text.sse"), U(15, 8 + 16, r=16)
B_TEXT, B_TEXT_U = Body("text.jsonl"), U(13, 82)
B_TEXT_OUT = Prefix("The capital of France is Paris. Paris is not only the capital city")
G_TEXT_OUT = "The capital of France is **Paris**."


def ok(provider: Provider, name: str, served: tuple[Served, ...], calls: tuple[Usage, ...], output: Any,
       finish: str = "stop", **kw: Any) -> Case:
    """A fixture whose agent settles ok."""
    return Case(provider, name, served, "ok", finish, calls, output=output, **kw)


def terminal(provider: Provider, name: str, served: Served, calls: tuple[Usage, ...] = (),
             finish: str | None = None, **kw: Any) -> Case:
    """A fixture whose agent settles error, kind terminal: one request, never retried."""
    return Case(provider, name, (served,), "error", finish, calls, error="terminal", **kw)


def overflow(provider: Provider, name: str, served: Served) -> Case:
    """A context-window refusal: one request, never retried, typed `context-overflow` (no `Context`: not compacted)."""
    return Case(provider, name, (served,), "error", None, (), error="context-overflow")


def retried(provider: Provider, name: str, first: Served, answer: Served, answer_usage: Usage, output: Any,
            billed_first: tuple[Usage, ...] = (), wait: float = 0.0) -> Case:
    """A retryable failure, then the answer: two requests, and only what billed is charged."""
    return ok(provider, name, (first, answer), (*billed_first, answer_usage), output, retries=1, wait=wait)


def exhausted(provider: Provider, name: str, served: Served, kind: str, wait: float = 0.0) -> Case:
    """A retryable failure every time: the engine's 3 attempts, then the error, and nothing billed."""
    return Case(provider, name, (served,) * 3, "error", None, (), error=kind, retries=2, wait=wait)


ANTHROPIC = [
    ok("anthropic", "text", (A_TEXT,), (A_TEXT_U,), "Hello, world"),
    ok("anthropic", "tool_use", (Body("tool_use.sse"), A_TEXT), (U(412, 89), A_TEXT_U), "Hello, world",
       tools=("get_weather",), ran=("get_weather",), turns=2),
    ok("anthropic", "parallel_tools", (Body("parallel_tools.sse"), A_TEXT), (U(500, 120), A_TEXT_U),
       "Hello, world", tools=("get_weather", "get_time", "list_cities"),
       ran=("get_weather", "get_time", "list_cities"), turns=2),
    ok("anthropic", "thinking", (Body("thinking.sse"),), (U(80, 64),), "27 * 453 = 12231"),
    ok("anthropic", "thinking_usage", (Body("thinking_usage.sse"),), (U(90, 140, r=118),), "Yes, 17 is prime."),
    ok("anthropic", "cache_usage", (Body("cache_usage.sse"),), (U(12 + 248 + 2048, 57, cr=2048, cw=248),),
       "Cached answer."),
    ok("anthropic", "pause_turn", (Body("pause_turn.sse"), Body("after_pause.sse")), (U(150, 41), U(260, 11)),
       "Paris: 14C, light rain.", turns=2, sent_back='"id": "srvtoolu_01Pause"'),
    Case("anthropic", "max_tokens_in_tool_use", (Body("max_tokens_in_tool_use.sse"),), "limit", "max_tokens",
         (U(412, 32),), output="I'll record the forecast for Paris.", tools=("record_forecast",)),
    terminal("anthropic", "refusal", Body("refusal.sse"), (U(33, 9),), finish="refusal"),
    retried("anthropic", "truncated", Body("truncated.sse"), A_TEXT, A_TEXT_U, "Hello, world",
            billed_first=(U(20, 1, approx=True),)),
    retried("anthropic", "midstream_error", Body("midstream_error.sse"), A_TEXT, A_TEXT_U, "Hello, world",
            billed_first=(U(40, 1, approx=True),)),
    retried("anthropic", "error_429", Err("error_429.json", 429, (("retry-after", "20"),)), A_TEXT, A_TEXT_U,
            "Hello, world", wait=20),
    exhausted("anthropic", "error_429_x3", Err("error_429.json", 429, (("retry-after", "20"),)), "rate-limit",
              wait=20),
    retried("anthropic", "error_529", Err("error_529.json", 529), A_TEXT, A_TEXT_U, "Hello, world"),
    terminal("anthropic", "error_429_billing", Err("error_429_billing.json", 429, (("retry-after", "5"),))),
    terminal("anthropic", "error_401", Err("error_401.json", 401)),
    overflow("anthropic", "error_400_context", Err("error_400_context.json", 400)),
]

OPENAI = [
    ok("openai", "text", (O_TEXT,), (O_TEXT_U,), "Hello, world"),
    ok("openai", "tool_call", (Body("tool_call.sse"), O_TEXT), (U(291, 23), O_TEXT_U), "Hello, world",
       tools=("get_weather",), ran=("get_weather",), turns=2),
    ok("openai", "parallel_tools", (Body("parallel_tools.sse"), O_TEXT), (U(310, 60), O_TEXT_U), "Hello, world",
       tools=("get_weather", "get_time", "list_cities"), ran=("get_weather", "get_time", "list_cities"), turns=2),
    ok("openai", "reasoning", (Body("reasoning.sse"), O_TEXT), (U(120, 300, r=256), O_TEXT_U), "Hello, world",
       model="o4-mini", tools=("lookup",), ran=("lookup",), turns=2,
       sent_back='"encrypted_content": "gAAAAABoIPOG-encrypted-reasoning-blob=="'),
    ok("openai", "cache_usage", (Body("cache_usage.sse"),), (U(2300, 40, cr=2048),), "Cached answer."),
    Case("openai", "incomplete", (Body("incomplete.sse"),), "limit", "max_tokens", (U(30, 16),),
         output="A very long"),
    Case("openai", "incomplete_cut_call", (Body("incomplete_cut_call.sse"),), "limit", "max_tokens",
         (U(210, 64, r=48),), output="Recording the forecast now.", model="o4-mini", tools=("record_forecast",)),
    terminal("openai", "refusal", Body("refusal.sse"), (U(25, 12),), finish="refusal"),
    retried("openai", "failed", Body("failed.sse"), O_TEXT, O_TEXT_U, "Hello, world"),
    retried("openai", "midstream_error", Body("midstream_error.sse"), O_TEXT, O_TEXT_U, "Hello, world",
            billed_first=(U(EST_IN, 2, approx=True),)),
    retried("openai", "error_429", Err("error_429.json", 429, (("retry-after-ms", "2020"),)), O_TEXT, O_TEXT_U,
            "Hello, world", wait=2.02),
    exhausted("openai", "error_429_x3", Err("error_429.json", 429, (("retry-after-ms", "2020"),)), "rate-limit",
              wait=2.02),
    terminal("openai", "error_429_quota", Err("error_429_quota.json", 429)),
    terminal("openai", "error_401", Err("error_401.json", 401)),
    overflow("openai", "error_400_context", Err("error_400_context.json", 400)),
]

COMPAT = [
    ok("openai_compatible", "text", (C_TEXT,), (C_TEXT_U,), "Hello, world"),
    ok("openai_compatible", "tool_calls", (Body("tool_calls.sse"), C_TEXT), (U(150, 40), C_TEXT_U),
       "Hello, world", tools=("get_weather", "get_time"), ran=("get_weather", "get_time"), turns=2),
    ok("openai_compatible", "cache_usage", (Body("cache_usage.sse"),), (U(1500, 8, cr=1024),), "Cached."),
    ok("openai_compatible", "json_answer", (Body("json_answer.sse"),), (U(95, 12),),
       {"city": "Paris", "celsius": 14}, output_type="Forecast"),
    ok("openai_compatible", "length_after_brace", (Body("length_after_brace.sse"), Body("json_answer.sse")),
       (U(58, 2), U(95, 12)), {"city": "Paris", "celsius": 14}, output_type="Forecast", turns=2),
    ok("openai_compatible", "reasoning_usage", (Body("reasoning_usage.sse"),), (U(40, 230, r=224),),
       "17 is prime.", model="deepseek-r1"),
    ok("openai_compatible", "no_usage", (Body("no_usage.sse"),), (U(approx=True),), "Hi"),
    Case("openai_compatible", "length", (Body("length.sse"),), "limit", "max_tokens", (U(12, 16),),
         output="A very long"),
    terminal("openai_compatible", "refusal", Body("refusal.sse"), (U(20, 7),), finish="refusal"),
    terminal("openai_compatible", "refusal_delta", Body("refusal_delta.sse"), (U(24, 10),), finish="refusal"),
    terminal("openai_compatible", "openrouter_error_400", Body("openrouter_error_400.sse"), (U(31, 3),)),
    retried("openai_compatible", "midstream_error", Body("midstream_error.sse"), C_TEXT, C_TEXT_U,
            "Hello, world", billed_first=(U(EST_IN, 1, approx=True),)),
    retried("openai_compatible", "error_429", Err("error_429.json", 429, (("retry-after", "3"),)), C_TEXT,
            C_TEXT_U, "Hello, world", wait=3),
    exhausted("openai_compatible", "error_429_x3", Err("error_429.json", 429, (("retry-after", "3"),)),
              "rate-limit", wait=3),
]

GOOGLE = [
    ok("google", "text", (G_TEXT,), (G_TEXT_U,), G_TEXT_OUT),
    ok("google", "tool_call", (Body("tool_call.sse"), Body("tool_answer.sse")), (U(29, 120, r=110), U(165, 8)),
       "The capital of Mexico is Mexico City.", model="gemini-3-pro-preview", tools=("get_country",),
       ran=("get_country",), turns=2, sent_back='"thoughtSignature": "Et8ECtwEAXLI2nyCB1jKZUE4ZxdH07XhZ'),
    ok("google", "tools3", (Body("tools3_capital.sse"), Body("tools3_temperature.sse"), Body("tools3_answer.sse")),
       (U(36, 5), U(48, 5), U(63, 11)), "The temperature in Paris is 30°C.", model="gemini-2.0-flash",
       tools=("get_capital", "get_temperature"), ran=("get_capital", "get_temperature"), turns=3),
    ok("google", "structured", (Body("structured.sse"),), (U(9, 10 + 261, r=261),),
       {"city": "Mexico City", "country": "Mexico"}, model="gemini-3-flash-preview", output_type="CityLocation"),
    ok("google", "thinking", (Body("thinking.sse"),), (U(34, 387 + 759, r=759),),
       Prefix("Here is a step-by-step guide to crossing the street safely:"), model="gemini-2.5-pro"),
    ok("google", "cache_usage", (Body("cache_usage.sse"),), (U(2071, 2 + 18, cr=2048, r=18),), "Paris."),
    Case("google", "max_tokens", (Body("max_tokens.sse"),), "limit", "max_tokens", (U(15, 5),),
         output="The capital of France is"),
    terminal("google", "safety", Body("safety.sse"), (U(14),), finish="content_filter"),
    terminal("google", "prompt_blocked", Body("prompt_blocked.sse"), (), finish="content_filter"),
    retried("google", "midstream_error", Body("midstream_error.sse"), G_TEXT, G_TEXT_U, G_TEXT_OUT,
            billed_first=(U(55, 8, approx=True),)),
    # RetryInfo.retryDelay "34s" in the body
    retried("google", "error_429", Err("error_429.json", 429), G_TEXT, G_TEXT_U, G_TEXT_OUT, wait=34),
    exhausted("google", "error_429_x3", Err("error_429.json", 429), "rate-limit", wait=34),
    retried("google", "error_500", Err("error_500.json", 500), G_TEXT, G_TEXT_U, G_TEXT_OUT),
    retried("google", "error_503", Err("error_503.json", 503), G_TEXT, G_TEXT_U, G_TEXT_OUT),
    terminal("google", "error_429_daily", Err("error_429_daily.json", 429)),
    terminal("google", "error_400_api_key", Err("error_400_api_key.json", 400)),
    overflow("google", "error_400_context", Err("error_400_context.json", 400)),
    terminal("google", "error_403", Err("error_403.json", 403)),
]

NOVA2 = "us.amazon.nova-2-lite-v1:0"
BEDROCK = [
    ok("bedrock", "text_jsonl", (B_TEXT,), (B_TEXT_U,), B_TEXT_OUT),
    ok("bedrock", "text_eventstream", (Body("text.eventstream"),), (B_TEXT_U,), B_TEXT_OUT),
    ok("bedrock", "server_tool_eventstream", (Body("server_tool.eventstream"), B_TEXT), (U(1002, 59), B_TEXT_U),
       B_TEXT_OUT, model=NOVA2, tools=("final_result", "nova_code_interpreter"), ran=("final_result",), turns=2,
       sent_back='"type": "nova_code_interpreter_result"'),
    ok("bedrock", "server_tool_jsonl", (Body("server_tool.jsonl"), B_TEXT), (U(1002, 59), B_TEXT_U),
       B_TEXT_OUT, model=NOVA2, tools=("final_result", "nova_code_interpreter"), ran=("final_result",), turns=2,
       sent_back='"type": "nova_code_interpreter_result"'),
    ok("bedrock", "tool_use", (Body("tool_use.jsonl"), Body("tool_answer.jsonl")), (U(397, 138), U(547, 79)),
       Prefix("Based on your location, you're in Mexico."), model="us.anthropic.claude-3-7-sonnet-20250219-v1:0", tools=("get_user_country",),
       ran=("get_user_country",), turns=2, sent_back='"signature": "ErcBCkgICxABGAIiQFX7K5soRl8+TpP81l9a'),
    ok("bedrock", "structured", (Body("structured.jsonl"),), (U(180, 12),), {"city": "Paris", "country": "France"},
       model="us.anthropic.claude-sonnet-4-6", output_type="CityLocation"),
    ok("bedrock", "thinking", (Body("thinking.jsonl"),), (U(37, 74),),
       "Hello! How are you doing today? Is there anything I can help you with?",
       model="us.anthropic.claude-sonnet-4-20250514-v1:0"),
    ok("bedrock", "cache_usage", (Body("cache_usage.jsonl"),), (U(13 + 1504, 5, cr=1504),), "5",
       model="us.anthropic.claude-sonnet-4-5-20250929-v1:0"),
    Case("bedrock", "max_tokens", (Body("max_tokens.jsonl"),), "limit", "max_tokens", (U(13, 5),),
         output="The capital of France is"),
    terminal("bedrock", "guardrail", Body("guardrail.jsonl"), (U(13, 0),), finish="content_filter"),
    retried("bedrock", "midstream_error", Body("midstream_error.jsonl"), B_TEXT, B_TEXT_U, B_TEXT_OUT,
            billed_first=(U(EST_IN, 18, approx=True),)),
    retried("bedrock", "error_429", Err("error_429.json", 429, code="ThrottlingException"), B_TEXT, B_TEXT_U,
            B_TEXT_OUT),
    exhausted("bedrock", "error_429_x3", Err("error_429.json", 429, code="ThrottlingException"), "rate-limit"),
    retried("bedrock", "error_500", Err("error_500.json", 500, code="InternalServerException"), B_TEXT, B_TEXT_U,
            B_TEXT_OUT),
    retried("bedrock", "error_503", Err("error_503.json", 503, code="ServiceUnavailableException"), B_TEXT,
            B_TEXT_U, B_TEXT_OUT),
    overflow("bedrock", "error_400_context", Err("error_400_context.json", 400, code="ValidationException")),
    terminal("bedrock", "error_400_model", Err("error_400_model.json", 400, code="ValidationException")),
    terminal("bedrock", "error_403", Err("error_403.json", 403, code="UnrecognizedClientException")),
    terminal("bedrock", "error_403_access", Err("error_403_access.json", 403, code="AccessDeniedException")),
]

CASES = ANTHROPIC + OPENAI + COMPAT + GOOGLE + BEDROCK


@pytest.fixture(autouse=True)
def no_ambient_aws(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Only what a test passes: no AWS credentials, config files or instance metadata from the machine."""
    for name in ("AWS_PROFILE", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
                 "AWS_BEARER_TOKEN_BEDROCK", "AWS_REGION", "AWS_DEFAULT_REGION", "AWS_CONTAINER_CREDENTIALS_FULL_URI",
                 "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "AWS_WEB_IDENTITY_TOKEN_FILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-aws-credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    RAN.clear()
    SLEEPS.clear()


def adapter(provider: Provider, url: str) -> ChatModel:
    """The adapter as a user builds it: the public factory, its `base_url` on the loopback server."""
    if provider == "anthropic":
        return tether.models.anthropic(api_key=KEY, base_url=url)
    if provider == "openai":
        return tether.models.openai(api_key=KEY, base_url=f"{url}/v1")
    if provider == "openai_compatible":
        return tether.models.openai_compatible("compat", f"{url}/v1", api_key=KEY)
    if provider == "google":
        return tether.models.google(api_key=GEMINI_KEY, base_url=url)
    return tether.models.bedrock(region="us-east-1", base_url=url, aws_access_key_id=AWS_ID,
                                 aws_secret_access_key=AWS_SECRET)


async def no_sleep(seconds: float) -> None:
    """The engine's backoff, kept instead of slept."""
    SLEEPS.append(seconds)


async def run_case(case: Case, tmp_path: Path, *, full: bool) -> tuple[tether.RunOutcome, tether.CostReport, Loopback]:
    """One engine run of the case's fixtures; the outcome, the cost report read back, and the server."""
    ref = f"{ADAPTER_ID[case.provider]}:{case.model or MODELS[case.provider]}"
    async with Loopback(*(handler(case.provider, s) for s in case.served)) as server:
        engine = tether.Engine(
            models=[adapter(case.provider, server.url)], routing={"loop": ref},
            store=f"sqlite:///{tmp_path}/run.db", prices=tether.PriceTable({ref: PRICE}), sleep=no_sleep,
        )
        try:
            outcome = await engine.run(
                matrix_flow, {"tools": list(case.tools), "output": case.output_type, "full": full}, run_id="m-1"
            )
            report = await engine.cost("m-1")
        finally:
            await engine.close()
    return outcome, report, server


def round_trip(provider: Provider, body: dict[str, Any]) -> tuple[list[str], list[tuple[str, str]]]:
    """The client tool calls a request sends back (wire ids) and the results it sends for them (id, text)."""
    calls: list[str] = []
    results: list[tuple[str, str]] = []
    if provider == "anthropic":
        for message in body["messages"]:
            for block in message["content"] if isinstance(message["content"], list) else ():
                if block.get("type") == "tool_use":
                    calls.append(block["id"])
                elif block.get("type") == "tool_result":
                    results.append((block["tool_use_id"], str(block["content"])))
    elif provider == "openai":
        for item in body["input"]:
            if item.get("type") == "function_call":
                calls.append(item["call_id"])
            elif item.get("type") == "function_call_output":
                results.append((item["call_id"], item["output"]))
    elif provider == "openai_compatible":
        for message in body["messages"]:
            calls += [c["id"] for c in message.get("tool_calls") or ()]
            if message["role"] == "tool":
                results.append((message["tool_call_id"], message["content"]))
    elif provider == "google":
        for content in body["contents"]:
            for part in content["parts"]:
                if "functionCall" in part:
                    calls.append(part["functionCall"]["id"])
                elif "functionResponse" in part:
                    response = part["functionResponse"]
                    results.append((response["id"], str(response["response"])))
    else:
        for message in body["messages"]:
            for block in message["content"]:
                if "toolUse" in block and block["toolUse"].get("type") != "server_tool_use":
                    calls.append(block["toolUse"]["toolUseId"])
                elif "toolResult" in block and message["role"] == "user":
                    result = block["toolResult"]
                    results.append((result["toolUseId"], json.dumps(result["content"], ensure_ascii=False)))
    return calls, results


def total(calls: tuple[Usage, ...]) -> Usage:
    """The usage of several calls summed (`approximate` if any was)."""
    summed = Usage()
    for call in calls:
        summed = summed + call
    return summed


def counts(usage: Usage) -> tuple[int, int, int, int, int]:
    """The five token counts of a usage."""
    return (usage.input_tokens, usage.output_tokens, usage.cache_read_tokens, usage.cache_write_tokens,
            usage.reasoning_tokens)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
async def test_each_fixture_through_the_engine(case: Case, tmp_path: Path) -> None:
    outcome, report, server = await run_case(case, tmp_path, full=True)
    assert outcome.status == "ok", outcome.error
    result = outcome.value
    # what the run ended with
    assert (result["status"], result["finish_reason"], result["error"]) == (case.status, case.finish, case.error)
    if case.error is not None:
        assert result["retryable"] == (case.error not in ("terminal", "context-overflow"))
    if isinstance(case.output, Prefix):
        assert result["output"].startswith(case.output.text), result["output"]
    else:
        assert result["output"] == case.output
    if case.turns is not None:
        assert result["turns"] == case.turns
    # retries: a retryable failure is sent again, a terminal one never; every reply queued was asked for
    assert len(server.requests) == case.requests
    assert report.provider_calls == case.requests
    assert list(case.ran) == RAN
    assert len(SLEEPS) == case.retries and all(s >= case.wait for s in SLEEPS), SLEEPS
    # each tool that ran went back once, answering a call the same request sends back, with its output
    calls, results = round_trip(case.provider, server.requests[-1]["body"])
    assert len(results) == len(case.ran)
    assert {call_id for call_id, _ in results} <= set(calls)
    assert all(TOOL_OUTPUT[name] in text for name, (_, text) in zip(case.ran, results, strict=True)), results
    if case.sent_back is not None:
        assert case.sent_back in json.dumps(server.requests[-1]["body"], ensure_ascii=False)
    # usage: the sum of what each billed call reported
    expected = total(case.calls)
    assert counts(result["usage"]) == counts(expected)
    assert counts(report.usage) == counts(expected)
    assert report.approximate == expected.approximate
    # cost: the price row times that usage, in the cost report and on the agent result
    cost = sum(priced(call) for call in case.calls)
    assert report.total_usd == pytest.approx(cost, abs=1e-12)
    assert outcome.cost.total_usd == pytest.approx(cost, abs=1e-12)
    assert result["cost_usd"] == pytest.approx(cost, abs=1e-12)


FAILING = [c for c in CASES if c.status != "ok"]


@pytest.mark.parametrize("case", FAILING, ids=lambda c: c.id)
async def test_a_failed_agent_fails_the_run_with_its_typed_error(case: Case, tmp_path: Path) -> None:
    outcome, report, server = await run_case(case, tmp_path, full=False)
    assert outcome.status == "error"
    assert isinstance(outcome.error, tether.AgentCallError), outcome.error
    assert outcome.error.data["status"] == case.status
    # a `limit` carries no provider error: ctx.agent raises it as a terminal "agent ended limit"
    assert outcome.error.error.kind == (case.error or "terminal")
    assert len(server.requests) == case.requests
    assert report.total_usd == pytest.approx(sum(priced(call) for call in case.calls), abs=1e-12)


@pytest.mark.parametrize("provider", PROVIDERS)
def test_every_fixture_of_the_provider_is_in_the_matrix(provider: Provider) -> None:
    on_disk = {p.name for p in (WIRE / provider).iterdir() if p.name != "SOURCES.md"}
    served = set().union(*(c.fixtures for c in CASES if c.provider == provider))
    assert on_disk - served == set()
    assert len(on_disk) >= 13
