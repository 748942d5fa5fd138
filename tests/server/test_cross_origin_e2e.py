"""The cross-origin attacks of issue 34 in a real browser: Debian's Chromium against uvicorn on a free port.

An attacker's page is served by a second HTTP server on another port of 127.0.0.1 (same site, another
origin), or under a name Chromium resolves to 127.0.0.1 (`--host-resolver-rules`), which is what a
DNS-rebinding page looks like to the server.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from browser_kit import CHROMIUM, CHROMIUM_ARGS, TIMEOUT_MS, WIDE, watch_errors
from playwright.sync_api import Browser, expect, sync_playwright
from server_apps import make_engine, record_research
from server_kit import http, uvicorn_thread, wait_for
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from tether.server import create_app

RESOLVER = "--host-resolver-rules=MAP evil.test 127.0.0.1, MAP tether.test 127.0.0.1"
TOKEN = "s3cret"

ATTACK_PAGE = """<!doctype html><html><head><meta charset="utf-8"><title>cute cats</title></head><body>
<iframe name="sink1"></iframe><iframe name="sink2"></iframe><iframe name="sink3"></iframe>
<form id="resolve-plain" method="POST" enctype="text/plain" target="sink1" action="TARGET/api/runs/w-1/resolve">
  <input name='{"key": "approve", "value": "pwn' value='ed"}'></form>
<form id="start-form" method="POST" target="sink2" action="TARGET/api/runs">
  <input name="workflow" value="echo"><input name="run_id" value="csrf-form"></form>
<form id="start-plain" method="POST" enctype="text/plain" target="sink3" action="TARGET/api/runs">
  <input name='{"workflow": "echo", "run_id": "csrf-plain", "args": {"a": "' value='"}}'></form>
</body></html>"""


@pytest.fixture
def browser() -> Iterator[Browser]:
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=[*CHROMIUM_ARGS, RESOLVER])
        yield b
        b.close()


class Answered:
    """ASGI wrapper: what the server answered each request, `(method, path, status)`, as the server sent it.

    The browser keeps some answers from the page and from Playwright (an opaque answer withheld under
    Cross-Origin-Resource-Policy is a network error there), so the server side is where to look.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.log: list[tuple[str, str, int]] = []
        self.cookies: list[str] = []
        """The `Cookie` header of each logged request, as it arrived."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def record(message: Message) -> None:
            if message["type"] == "http.response.start":
                self.cookies.append(next((v.decode() for k, v in scope["headers"] if k == b"cookie"), ""))
            if message["type"] == "http.response.start":
                self.log.append((scope["method"], scope["path"], message["status"]))
            await send(message)

        await self.app(scope, receive, record if scope["type"] == "http" else send)

    def to(self, *methods: str) -> list[tuple[str, str, int]]:
        return [row for row in self.log if row[0] in methods]


@pytest.fixture
def tether_server(tmp_path: Path) -> Iterator[Callable[..., tuple[str, Answered]]]:
    """`tether_server(token=None)`: the app engine over a store holding the recorded run, on uvicorn; answers
    the name `tether.test` besides the defaults. Returns the base URL and the log of its answers."""
    url = f"sqlite:///{tmp_path}/tether.db"
    asyncio.run(record_research(url))
    stack: list[Iterator[str]] = []

    def start(token: str | None = None) -> tuple[str, Answered]:
        app = Answered(create_app(make_engine(url), token=token, owns_engine=True, allowed_hosts=["tether.test"]))
        served = uvicorn_thread(app)
        stack.append(served)
        return served.__enter__(), app

    yield start
    for served in reversed(stack):
        served.__exit__(None, None, None)


@pytest.fixture
def attacker() -> Iterator[Callable[[str], str]]:
    """`attacker(target)`: serves ATTACK_PAGE aimed at `target` from another port; returns the page's URL."""
    servers: list[ThreadingHTTPServer] = []

    def start(target: str) -> str:
        page = ATTACK_PAGE.replace("TARGET", target).encode()

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(page)))
                self.end_headers()
                self.wfile.write(page)

            def log_message(self, *args: object) -> None:
                pass

        srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        servers.append(srv)
        return f"http://127.0.0.1:{srv.server_address[1]}/"

    yield start
    for srv in servers:
        srv.shutdown()
        srv.server_close()


def test_a_page_on_another_port_cannot_resolve_a_suspension_or_start_a_run(
    tether_server: Callable[..., tuple[str, Answered]], attacker: Callable[[str], str], browser: Browser
) -> None:
    base, answered = tether_server()
    assert http(base + "/api/runs", {"workflow": "wait", "run_id": "w-1"})[0] == 201
    wait_for(lambda: http(base + "/api/runs/w-1")[1]["status"] == "suspended", what="the run to suspend")
    answered.log.clear()
    page = browser.new_page(viewport=WIDE)
    page.goto(attacker(base))
    resolve = json.dumps({"key": "approve", "value": "pwned"})
    # fetch() with text/plain and no-cors: a simple request, sent without asking. The browser then withholds
    # even the opaque answer (Cross-Origin-Resource-Policy), so the page sees a network error.
    outcomes = page.evaluate("""async ([t, body]) => {
        const attempt = (p) => p.then(() => "answered", () => "withheld");
        const out = [
            await attempt(fetch(t + "/api/runs/w-1/resolve", {method: "POST", mode: "no-cors", body,
                                                              headers: {"Content-Type": "text/plain"}})),
            await attempt(fetch(t + "/api/runs", {method: "POST", mode: "no-cors",
                                                  body: JSON.stringify({workflow: "echo", run_id: "csrf-fetch"})})),
        ];
        out.push(navigator.sendBeacon(t + "/api/runs/w-1/resolve", body) ? "queued" : "refused");
        return out;
    }""", [base, resolve])
    assert outcomes == ["withheld", "withheld", "queued"]
    # a JSON fetch needs a CORS preflight; the server approves none, so the POST is never sent
    blocked = page.evaluate("""async (t) => {
        try {
            await fetch(t + "/api/runs/w-1/resolve", {method: "POST", body: '{"key": "approve", "value": 1}',
                        headers: {"Content-Type": "application/json", "X-Tether-Request": "1"}});
            return "sent";
        } catch (e) { return "blocked"; }
    }""", base)
    assert blocked == "blocked"
    for form in ("resolve-plain", "start-form", "start-plain"):  # form posts: navigations of hidden frames
        with page.expect_response(lambda r: r.url.startswith(base) and r.request.method == "POST"):
            page.evaluate("id => document.getElementById(id).submit()", form)
    wait_for(lambda: len(answered.to("POST")) >= 6, what="every post to arrive")
    assert sorted(answered.to("POST")) == sorted([
        ("POST", "/api/runs/w-1/resolve", 415), ("POST", "/api/runs", 415), ("POST", "/api/runs/w-1/resolve", 415),
        ("POST", "/api/runs/w-1/resolve", 415), ("POST", "/api/runs", 415), ("POST", "/api/runs", 415),
    ])  # two fetches, a beacon, three forms: every one refused before its body was read
    assert answered.to("OPTIONS") == [("OPTIONS", "/api/runs/w-1/resolve", 405)]  # a preflight, not approved
    # nothing changed: the suspension is open, no run started
    status, detail = http(base + "/api/runs/w-1")
    assert detail["status"] == "suspended" and [s["key"] for s in detail["suspensions"]] == ["approve"]
    assert [r["run_id"] for r in http(base + "/api/runs")[1]["runs"]] == ["w-1", "research-1"]
    # the text/plain form's body was a valid resolve: the same JSON, sent by a program, closes the suspension
    status, done = http(base + "/api/runs/w-1/resolve", {"key": "approve", "value": "pwn=ed"})
    assert status == 200 and done["resumed"] is True


def test_a_page_under_another_host_name_cannot_read_the_api(
    tether_server: Callable[..., tuple[str, Answered]], browser: Browser
) -> None:
    base, _ = tether_server()
    port = base.rsplit(":", 1)[1]
    page = browser.new_page(viewport=WIDE)
    # DNS rebinding: evil.test now resolves to this server; the page is same-origin with what it reaches
    refused = page.goto(f"http://evil.test:{port}/")
    assert refused is not None and refused.status == 403
    assert "--allowed-host evil.test" in refused.text()
    read = page.evaluate("""async () => {
        const r = await fetch("/api/runs/research-1/journal");
        return [r.status, (await r.json()).error.code];
    }""")
    assert read == [403, "host-not-allowed"]
    # a configured name (--allowed-host tether.test) and the loopback names serve the inspector
    for origin in (f"http://tether.test:{port}", f"http://localhost:{port}", base):
        ok = browser.new_page(viewport=WIDE)
        errors = watch_errors(ok)
        ok.goto(origin + "/")
        expect(ok.locator("tr[data-run-id='research-1']")).to_have_attribute("data-status", "ok", timeout=TIMEOUT_MS)
        assert errors == [], origin


def test_the_inspector_logs_in_and_its_cookie_is_useless_to_another_ports_page(
    tether_server: Callable[..., tuple[str, Answered]], attacker: Callable[[str], str], browser: Browser
) -> None:
    base, answered = tether_server(token=TOKEN)
    port = base.rsplit(":", 1)[1]
    context = browser.new_context(viewport=WIDE)
    page = context.new_page()
    page.goto(base + "/")
    expect(page.locator("form#f")).to_contain_text("This server needs its token.")
    page.locator("#t").fill("wrong")
    page.locator("form#f button").click()
    expect(page.locator("#m")).to_have_text("Wrong token.")
    page.locator("#t").fill(TOKEN)
    page.locator("form#f button").click()
    expect(page.locator("tr[data-run-id='research-1']")).to_have_attribute("data-status", "ok", timeout=TIMEOUT_MS)
    page.locator("tr[data-run-id='research-1'] a").click()  # the run page: its fetches and event stream
    expect(page.locator("[data-testid=agent-node]")).to_have_count(5, timeout=TIMEOUT_MS)
    (cookie,) = context.cookies()
    assert cookie["name"] == f"tether_session_{port}" and cookie["domain"] == "127.0.0.1"
    assert cookie["httpOnly"] is True and cookie["sameSite"] == "Strict" and cookie["path"] == "/"
    assert TOKEN not in cookie["value"]
    assert page.evaluate("document.cookie") == ""  # no script, the inspector's included, can read it
    # the inspector's own writes still work with the cookie alone
    resolved = page.evaluate("""async () => {
        const r = await fetch("/api/runs", {method: "POST", body: JSON.stringify({workflow: "echo", run_id: "mine"}),
                              headers: {"Content-Type": "application/json", "X-Tether-Request": "1"}});
        return r.status;
    }""")
    assert resolved == 201

    evil = context.new_page()
    answered.log.clear()
    answered.cookies.clear()
    evil.goto(attacker(base))
    outcome = evil.evaluate("""async (t) => {
        try { await fetch(t + "/api/runs", {credentials: "include"}); return "read"; }
        catch (e) { return "blocked"; }
    }""", base)
    assert outcome == "blocked"
    evil.evaluate("""async (t) => {
        await fetch(t + "/api/runs", {method: "POST", mode: "no-cors", credentials: "include",
                                      body: JSON.stringify({workflow: "echo", run_id: "csrf-cookie"})}
                   ).catch(() => null);
    }""", base)
    wait_for(lambda: len(answered.log) >= 2, what="both requests to arrive")
    # the browser attached the session cookie (same site, another origin); the gate did not take it
    assert all(cookie.startswith(f"tether_session_{port}=") for cookie in answered.cookies), answered.cookies
    assert answered.log == [("GET", "/api/runs", 401), ("POST", "/api/runs", 401)]
    _, runs = http(base + "/api/runs", headers={"Authorization": f"Bearer {TOKEN}"})
    assert sorted(r["run_id"] for r in runs["runs"]) == ["mine", "research-1"]
