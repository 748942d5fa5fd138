"""The cross-origin defences through the test client: Host names (DNS rebinding), state-changing requests
(cross-site forms and text/plain posts), the session cookie, and the headers that stop framing.

The browser side of the same attacks, in Chromium, is tests/server/test_cross_origin_e2e.py.
"""

from __future__ import annotations

from collections.abc import Callable
from http.cookies import SimpleCookie

import pytest
from server_kit import run_status, wait_for
from starlette.testclient import TestClient

import tether
from tether.server import create_app

Serve = Callable[..., TestClient]
RUN = "research-1"
OTHER_PORT = "http://127.0.0.1:9999"  # a page another program on this host serves


def browser_like(client: TestClient) -> TestClient:
    """The client without the header programs send: only what a page on another origin could make it send."""
    del client.headers["X-Tether-Request"]
    return client


def suspended_wait_run(client: TestClient, run_id: str = "w-1") -> None:
    started = client.post("/api/runs", json={"workflow": "wait", "run_id": run_id})
    assert started.status_code == 201, started.text
    wait_for(lambda: run_status(client, run_id) == "suspended", what="the run to suspend")


def open_keys(client: TestClient, run_id: str) -> list[str]:
    return [s["key"] for s in client.get(f"/api/runs/{run_id}").json()["suspensions"]]


def run_ids(client: TestClient) -> list[str]:
    return [r["run_id"] for r in client.get("/api/runs").json()["runs"]]


# -- Host: DNS rebinding ---------------------------------------------------------------------------

def test_an_unknown_host_is_refused_with_the_flag_that_would_accept_it(recorded: str, serve: Serve) -> None:
    client = serve()
    for path in ("/", "/healthz", "/api/runs", f"/api/runs/{RUN}/journal", "/api/openapi.json", "/static/app.js"):
        r = client.get(path, headers={"Host": "evil.test:8642"})
        assert r.status_code == 403, path
        error = r.json()["error"]
        assert error["code"] == "host-not-allowed" and error["data"] == {"host": "evil.test"}
        assert "start tether serve with --allowed-host evil.test to accept it" in error["message"].lower()
        assert "DNS rebinding" in error["message"]
    refused = client.post("/api/runs", json={"workflow": "echo", "run_id": "e-1"}, headers={"Host": "evil.test"})
    assert refused.status_code == 403 and run_ids(client) == [RUN]
    garbled = client.get("/api/runs", headers={"Host": "evil test"})
    assert garbled.status_code == 400 and garbled.json()["error"]["code"] == "bad-host"


def test_localhost_ip_addresses_and_configured_names_are_answered(serve: Serve) -> None:
    client = serve(allowed_hosts=["tether.example.org", "*.corp.example"])
    answered = ["localhost", "localhost:8642", "inspector.localhost:8642", "127.0.0.1", "127.0.0.1:8642",
                "[::1]:8642", "10.1.2.3:80", "tether.example.org", "TETHER.Example.org.:443", "ci.corp.example"]
    for host in answered:
        assert client.get("/api/runs", headers={"Host": host}).status_code == 200, host
    refused = ["example.org", "corp.example", "ci.corp.example.evil.test", "localhost.evil.test",
               "127.0.0.1.nip.io", "tether.example.org.evil.test"]
    for host in refused:
        assert client.get("/api/runs", headers={"Host": host}).status_code == 403, host
    anything = serve(allowed_hosts=["*"])
    assert anything.get("/api/runs", headers={"Host": "evil.test"}).status_code == 200


def test_an_allowed_host_that_is_not_a_name_is_a_config_error(store_url: str) -> None:
    engine = tether.Engine(store=store_url)
    for bad in ("evil test", "http://x.org", "*evil.test", "*.com", ""):
        with pytest.raises(tether.ConfigError) as caught:
            create_app(engine, allowed_hosts=[bad])
        assert "is not a host name" in caught.value.message


# -- state-changing requests: cross-site forms and text/plain posts --------------------------------

def test_form_and_text_plain_posts_cannot_resolve_or_start_and_change_nothing(serve: Serve) -> None:
    client = serve()
    suspended_wait_run(client)
    browser = browser_like(client)
    # the bodies a page on another origin can send unasked; the text/plain ones are valid JSON
    attacks = [
        ("/api/runs/w-1/resolve", "text/plain;charset=UTF-8", b'{"key": "approve", "value": "pwned"}'),
        ("/api/runs/w-1/resolve", "text/plain", b'{"key": "approve", "value": "pwn=ed"}\r\n'),  # <form enctype>
        ("/api/runs", "application/x-www-form-urlencoded", b"workflow=echo&run_id=csrf-1"),
        ("/api/runs", "multipart/form-data; boundary=x",
         b'--x\r\nContent-Disposition: form-data; name="workflow"\r\n\r\necho\r\n--x--\r\n'),
        ("/api/runs", "text/plain", b'{"workflow": "echo", "run_id": "csrf-2", "args": {"a": "="}}\r\n'),
    ]
    for path, ctype, body in attacks:
        for origin in ({"Origin": OTHER_PORT}, {}):
            headers = {**origin, **({"Content-Type": ctype} if ctype else {})}
            r = browser.post(path, content=body, headers=headers)
            assert r.status_code == 415, (path, ctype, r.text)
            error = r.json()["error"]
            assert error["code"] == "unsupported-media-type"
            assert "takes only 'Content-Type: application/json'" in error["message"]
    # fetch(url, {method: "POST", mode: "no-cors"}): no body and no type, so nothing to type-check; the
    # client header (which no page can add unasked) refuses it
    for origin, code in (({"Origin": OTHER_PORT}, "cross-origin"), ({}, "client-header-required")):
        r = browser.post("/api/runs/w-1/cancel", headers=origin)
        assert r.status_code == 403 and r.json()["error"]["code"] == code, (origin, r.text)
    assert open_keys(client, "w-1") == ["approve"] and run_status(client, "w-1") == "suspended"
    assert run_ids(client) == ["w-1"]


def test_a_json_post_needs_the_client_header_a_same_origin_origin_or_authorization(serve: Serve) -> None:
    client = browser_like(serve())
    bare = client.post("/api/runs", json={"workflow": "echo", "run_id": "bare"})
    assert bare.status_code == 403
    error = bare.json()["error"]
    assert error["code"] == "client-header-required"
    assert "needs the header 'X-Tether-Request: 1'" in error["message"] and "curl -H" in error["message"]
    proofs = [{"X-Tether-Request": "1"}, {"Origin": "http://localhost"}, {"Authorization": "Bearer anything"}]
    for n, proof in enumerate(proofs):
        r = client.post("/api/runs", json={"workflow": "echo", "run_id": f"ok-{n}"}, headers=proof)
        assert r.status_code == 201, (proof, r.text)
    assert sorted(run_ids(client)) == ["ok-0", "ok-1", "ok-2"]


def test_a_json_post_from_another_origins_page_is_refused_even_with_the_header(serve: Serve) -> None:
    client = serve()
    suspended_wait_run(client)
    foreign = [
        {"Origin": OTHER_PORT},
        {"Origin": "http://localhost:9999"},
        {"Origin": "https://localhost"},  # same host name, another scheme and port
        {"Origin": "http://evil.test"},
        {"Origin": "null"},  # sandboxed frames, data: URLs
        {"Sec-Fetch-Site": "same-site"},  # another port of this host
        {"Sec-Fetch-Site": "cross-site"},
    ]
    for headers in foreign:
        r = client.post("/api/runs/w-1/resolve", json={"key": "approve", "value": "pwned"}, headers=headers)
        assert r.status_code == 403, (headers, r.text)
        error = r.json()["error"]
        assert error["code"] == "cross-origin" and "Act from the inspector this server serves" in error["message"]
    assert open_keys(client, "w-1") == ["approve"]
    same = {"Origin": "http://localhost", "Sec-Fetch-Site": "same-origin"}
    r = client.post("/api/runs/w-1/resolve", json={"key": "approve", "value": "ok"}, headers=same)
    assert r.status_code == 200, r.text


# -- the session cookie ----------------------------------------------------------------------------

def session(client: TestClient, host: str) -> tuple[str, str, SimpleCookie]:
    """Log in as the inspector's page does, addressing the server as `host`; (name, value, the parsed cookie)."""
    r = client.post("/api/session", json={"token": "s3cret"},
                    headers={"Host": host, "Origin": f"http://{host}", "Sec-Fetch-Site": "same-origin"})
    assert r.status_code == 204, r.text
    client.cookies.clear()  # the tests send the cookie by hand, for the host they address
    jar: SimpleCookie = SimpleCookie()
    jar.load(r.headers["set-cookie"])
    ((name, morsel),) = jar.items()
    return name, morsel.value, jar


def test_the_session_cookie_is_httponly_strict_named_for_its_port_and_not_the_token(serve: Serve) -> None:
    client = serve(token="s3cret")
    name, value, jar = session(client, "127.0.0.1:8642")
    morsel = jar[name]
    assert name == "tether_session_8642"
    assert morsel["httponly"] is True and morsel["samesite"].lower() == "strict" and morsel["path"] == "/"
    assert morsel["domain"] == "" and morsel["secure"] == ""  # host-only; Secure when served over https
    assert "s3cret" not in value and len(value) == 64
    own = {"Host": "127.0.0.1:8642", "Cookie": f"{name}={value}"}
    assert client.get("/api/runs", headers=own).status_code == 200
    # the browser hands the same cookie to every port of the host: on another port it is worth nothing
    elsewhere = {"Host": "127.0.0.1:8643", "Cookie": f"{name}={value}; tether_session_8643={value}"}
    assert client.get("/api/runs", headers=elsewhere).status_code == 401
    assert client.get("/api/runs", headers={"Host": "127.0.0.1:8642", "Cookie": f"tether_token={value}"}
                      ).status_code == 401
    assert client.post("/api/session", json={"token": "wrong"}).status_code == 401
    forged = [({"Content-Type": "text/plain"}, 415), ({"Content-Type": "application/json", "Origin": OTHER_PORT}, 403)]
    for headers, status in forged:
        r = client.post("/api/session", content=b'{"token": "s3cret"}', headers=headers)
        assert r.status_code == status and "set-cookie" not in r.headers, r.text


def test_the_session_cookie_is_ignored_on_requests_another_origins_page_makes(serve: Serve) -> None:
    client = serve(token="s3cret")
    name, value, _ = session(client, "127.0.0.1:8642")
    cookie = {"Host": "127.0.0.1:8642", "Cookie": f"{name}={value}"}
    honoured = [{}, {"Sec-Fetch-Site": "same-origin"}, {"Sec-Fetch-Site": "none"},
                {"Sec-Fetch-Site": "same-origin", "Origin": "http://127.0.0.1:8642"}]
    for headers in honoured:
        assert client.get("/api/runs", headers={**cookie, **headers}).status_code == 200, headers
    # fetch() from http://127.0.0.1:9999 (same site, another origin) or from another site: the cookie rides
    # along, the gate does not take it
    ignored = [{"Sec-Fetch-Site": "same-site", "Sec-Fetch-Mode": "cors"}, {"Sec-Fetch-Site": "cross-site"},
               {"Origin": OTHER_PORT}, {"Sec-Fetch-Site": "same-site", "Sec-Fetch-Mode": "navigate",
                                        "Sec-Fetch-Dest": "iframe"}]
    for headers in ignored:
        r = client.get("/api/runs", headers={**cookie, **headers})
        assert r.status_code == 401 and r.json()["error"]["code"] == "unauthorized", headers
    forged = client.post("/api/runs", json={"workflow": "echo"},
                         headers={**cookie, "Origin": OTHER_PORT, "Sec-Fetch-Site": "same-site"})
    assert forged.status_code == 401
    # a link from another port's page opens the inspector (a top-level page load it cannot read)
    link = {"Sec-Fetch-Site": "same-site", "Sec-Fetch-Mode": "navigate", "Sec-Fetch-Dest": "document",
            "Accept": "text/html"}
    page = client.get("/", headers={**cookie, **link})
    assert page.status_code == 200 and "needs its token" not in page.text


# -- what other origins may do with the answers ------------------------------------------------------

def test_no_other_origin_can_frame_or_embed_the_servers_answers(serve: Serve) -> None:
    client = serve(token="s3cret")
    for path, status in (("/", 401), ("/healthz", 200), ("/api/runs", 401), ("/api/nope", 401)):
        r = client.get(path, headers={"Accept": "text/html"} if path == "/" else {})
        assert r.status_code == status, path
        assert r.headers["x-frame-options"] == "DENY"
        assert r.headers["content-security-policy"] == "frame-ancestors 'none'"
        assert r.headers["cross-origin-resource-policy"] == "same-origin"
        assert r.headers["x-content-type-options"] == "nosniff"
    refused = client.get("/healthz", headers={"Host": "evil.test"})
    assert refused.status_code == 403 and refused.headers["x-frame-options"] == "DENY"
