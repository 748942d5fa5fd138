"""Credentials are masked by value: a gateway token with no `sk-` shape, echoed back in a provider's
error body, reaches no journal, event log, cassette or error message (issue 34, item 5).

The official SDKs talk to a real local HTTP server (a thread in this process) that echoes whatever
credential each request carried, in an HTTP error body or in an error event mid-stream.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Literal
from urllib.parse import quote

import anthropic
import openai
import pytest
from wirekit import WIRE, asker, run, terminal

import tether
from tether.contracts import ChatModel, StreamError
from tether.models._sdk_errors import redact_secrets
from tether.models.anthropic_messages import AnthropicModel
from tether.models.openai_chat import OpenAICompatibleModel
from tether.models.openai_responses import OpenAIModel
from tether.stores.jsonl import JsonlStore
from tether.stores.memory import MemoryStore
from tether.stores.postgres import PostgresStore
from tether.stores.sqlite import SqliteStore
from tether.testing import cassette

TOKEN = "gw_live_9f8e7d6c5b4a39281706f5e4d3c2b1a0"
"""A gateway token: nothing about its shape says it is a secret."""
Failure = Literal["http-401", "midstream"]
_MIDSTREAM_FIXTURE = {"anthropic": "anthropic", "openai": "openai", "openai-compatible": "openai_compatible"}


class EchoGateway:
    """A local HTTP server that fails every call and echoes the credentials it was sent (every header
    whose name says so) the ways real gateways do: raw, after `Bearer`, URL-encoded."""

    def __init__(self, vendor: str, failure: Failure) -> None:
        self.vendor, self.failure = vendor, failure
        self.seen: list[str] = []
        gateway = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("content-length") or 0))
                sent = [v for k, v in self.headers.items() if re.search("auth|key|token", k, re.IGNORECASE)]
                gateway.seen += sent
                status, kind, body = gateway.reply(sent)
                self.send_response(status)
                self.send_header("content-type", kind)
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *_: Any) -> None:
                return None

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def echo(self, sent: list[str]) -> str:
        raw = [re.sub(r"^Bearer\s+", "", v) for v in sent]
        return f"invalid credentials {', '.join(raw)} (sent as {'; '.join(sent)}; url-encoded {quote(raw[0])})"

    def reply(self, sent: list[str]) -> tuple[int, str, bytes]:
        echo = self.echo(sent)
        if self.failure == "http-401":
            error = {"type": "authentication_error", "code": "invalid_api_key", "message": echo, "token": sent}
            return 401, "application/json", json.dumps({"type": "error", "error": error}).encode()
        text = (WIRE / _MIDSTREAM_FIXTURE[self.vendor] / "midstream_error.sse").read_text()
        text = re.sub(r'"message":"[^"]*"', lambda _: f'"message":{json.dumps(echo)}', text)
        return 200, "text/event-stream", text.encode()

    def __enter__(self) -> EchoGateway:
        self.thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.server.shutdown()
        self.server.server_close()


@dataclass(frozen=True)
class Setup:
    """One way an adapter gets its credential: `api_key=`, the environment, or a `client=`."""

    vendor: Literal["anthropic", "openai", "openai-compatible"]
    how: str
    model: str
    make: Callable[[str], ChatModel]
    env: str | None = None

    @property
    def name(self) -> str:
        return f"{self.vendor}-{self.how}"


SETUPS = [
    Setup("anthropic", "api_key", "claude-sonnet-4-6", lambda url: AnthropicModel(api_key=TOKEN, base_url=url)),
    Setup("anthropic", "env", "claude-sonnet-4-6", lambda url: AnthropicModel(base_url=url), env="ANTHROPIC_API_KEY"),
    Setup("anthropic", "client-auth-token", "claude-sonnet-4-6", lambda url: AnthropicModel(
        client=anthropic.AsyncAnthropic(auth_token=TOKEN, base_url=url, max_retries=0))),
    Setup("openai", "api_key", "gpt-4.1", lambda url: OpenAIModel(api_key=TOKEN, base_url=f"{url}/v1")),
    Setup("openai", "env", "gpt-4.1", lambda url: OpenAIModel(base_url=f"{url}/v1"), env="OPENAI_API_KEY"),
    Setup("openai", "client", "gpt-4.1", lambda url: OpenAIModel(
        client=openai.AsyncOpenAI(api_key=TOKEN, base_url=f"{url}/v1", max_retries=0))),
    Setup("openai-compatible", "api_key", "qwen3:8b", lambda url: OpenAICompatibleModel(
        id="gw", base_url=f"{url}/v1", api_key=TOKEN)),
    Setup("openai-compatible", "client-gateway-header", "qwen3:8b", lambda url: OpenAICompatibleModel(
        id="gw", base_url=f"{url}/v1", client=openai.AsyncOpenAI(
            api_key="unused", base_url=f"{url}/v1", max_retries=0, default_headers={"X-Gateway-Token": TOKEN}))),
]
by_setup = pytest.mark.parametrize("setup", SETUPS, ids=lambda s: s.name)
by_failure = pytest.mark.parametrize("failure", ["http-401", "midstream"])


@pytest.fixture
def gateway_env(monkeypatch: pytest.MonkeyPatch) -> Callable[[Setup], None]:
    """Puts the token in the setup's environment variable (and keeps any real key out of the others)."""
    for name in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY"):
        monkeypatch.delenv(name, raising=False)

    def apply(setup: Setup) -> None:
        if setup.env:
            monkeypatch.setenv(setup.env, TOKEN)

    return apply


@by_setup
@by_failure
async def test_an_echoed_credential_is_masked_in_the_error_the_adapter_reports(
    setup: Setup, failure: Failure, gateway_env: Callable[[Setup], None]
) -> None:
    gateway_env(setup)
    with EchoGateway(setup.vendor, failure) as gateway:
        model = setup.make(gateway.url)
        error = terminal(await run(model, asker(setup.model, 64)()))
    assert any(TOKEN in sent for sent in gateway.seen)  # the token went over the wire, and came back
    assert isinstance(error, StreamError)
    assert TOKEN not in error.model_dump_json() and quote(TOKEN) not in error.message
    assert "[redacted]" in error.message


def test_redaction_masks_each_configured_value_in_every_echoed_form_and_keeps_the_prefix_rule() -> None:
    secret = 'gw/odd+token"with\\quotes'
    text = (f"raw {secret}; Bearer {secret}; json {json.dumps(secret)}; repr {secret!r}; "
            f"url {quote(secret, safe='')}; and a stray sk-ant-abcdef123456")
    assert redact_secrets(text, [secret]) == (
        "raw [redacted]; Bearer [redacted]; json \"[redacted]\"; repr '[redacted]'; url [redacted]; "
        "and a stray [redacted]"
    )
    assert redact_secrets("unused is not a secret", ["unused"]) == "unused is not a secret"  # too short to mask
    assert redact_secrets("no route to https://bob:hunter2@gw.example/v1") == "no route to https://bob:[redacted]@gw.example/v1"


def test_an_adapter_knows_every_credential_it_was_configured_with(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "env-key-123456789")
    by_argument = OpenAIModel(api_key=TOKEN, base_url="https://bob:url-password-1@gw.example/v1")
    assert {TOKEN, "env-key-123456789", "url-password-1"} <= set(by_argument.credentials())
    client = openai.AsyncOpenAI(api_key="client-key-123456789", base_url="https://gw.example/v1",
                                default_headers={"X-Gateway-Token": TOKEN, "X-Title": "my-app"}, max_retries=0)
    by_client = OpenAICompatibleModel(id="gw", base_url="https://gw.example/v1", client=client)
    assert {TOKEN, "client-key-123456789"} <= set(by_client.credentials())
    assert "my-app" not in by_client.credentials()  # a header not named like a credential is not one
    tokened = AnthropicModel(client=anthropic.AsyncAnthropic(auth_token=TOKEN, max_retries=0))
    assert TOKEN in tokened.credentials()


@tether.workflow(name="greet")
async def greet(ctx: tether.Ctx) -> Any:
    return await ctx.agent("Greet Paris in one line.", label="greet")


@pytest.fixture(params=["memory", "jsonl", "sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "memory":
        return "memory://"
    if request.param == "jsonl":
        return f"jsonl://{tmp_path}/journals"
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/tether.db"
    return f"{request.getfixturevalue('pg_dsn')}?schema={request.getfixturevalue('pg_schema')}"


async def every_stored_byte(store: Any) -> list[bytes]:
    """Everything the store holds, as the bytes it keeps (rows, files, blobs), read around its API."""
    if isinstance(store, MemoryStore):
        held = [store._entries, store._effects, {k: m.model_dump_json() for k, m in store._meta.items()}]
        return [json.dumps(held).encode(), *store._blobs.values()]
    if isinstance(store, JsonlStore):
        return [p.read_bytes() for p in sorted(store.dir.rglob("*")) if p.is_file()]
    if isinstance(store, SqliteStore):
        return [p.read_bytes() for p in Path(store.path).parent.glob(Path(store.path).name + "*")]
    assert isinstance(store, PostgresStore)
    import psycopg

    out: list[bytes] = []
    async with await psycopg.AsyncConnection.connect(store.conninfo) as conn:
        tables = await (await conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = %s", (store.schema,))).fetchall()
        for (table,) in tables:
            for row in await (await conn.execute(f'SELECT * FROM "{store.schema}"."{table}"')).fetchall():
                out += [v if isinstance(v, bytes) else str(v).encode() for v in row]
    assert out, "the run wrote nothing to PostgreSQL"
    return out


@pytest.mark.parametrize("setup", [s for s in SETUPS if s.how in ("api_key", "client-gateway-header", "env")],
                         ids=lambda s: s.name)
async def test_an_echoed_gateway_token_reaches_no_journal_event_log_cassette_or_error(
    setup: Setup, store_url: str, tmp_path: Path, gateway_env: Callable[[Setup], None]
) -> None:
    gateway_env(setup)
    events, tape = tmp_path / "events.jsonl", tmp_path / "cassette.json"
    with EchoGateway(setup.vendor, "http-401") as gateway:
        recorder = cassette(setup.make(gateway.url), tape, mode="record")
        engine = tether.Engine(models=[recorder], routing={"loop": f"{recorder.id}:{setup.model}"}, store=store_url)
        store = await engine.store()
        try:
            out = await engine.run(greet, run_id="leak", event_log=events)
        finally:
            await engine.close()
    assert any(TOKEN in sent for sent in gateway.seen)
    assert out.status == "error" and "[redacted]" in str(out.error)
    assert TOKEN not in str(out.error) and TOKEN not in repr(out.error)
    assert recorder.recorded == 1 and TOKEN not in tape.read_text()
    assert "[redacted]" in events.read_text() and TOKEN not in events.read_text()
    held = await every_stored_byte(store)
    assert any(b"[redacted]" in chunk for chunk in held)  # the error was journaled, masked
    assert not [chunk for chunk in held if TOKEN.encode() in chunk or quote(TOKEN).encode() in chunk]
