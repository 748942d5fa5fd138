"""A `POST` with no body needs no Content-Type (`curl -X POST ... -H 'X-Tether-Request: 1'`); a body must be JSON
(issue 44, item 5)."""

from __future__ import annotations

from collections.abc import Callable

from server_kit import run_status, wait_for
from starlette.testclient import TestClient

Serve = Callable[..., TestClient]


def suspended(client: TestClient, run_id: str) -> None:
    started = client.post("/api/runs", json={"workflow": "wait", "run_id": run_id})
    assert started.status_code == 201, started.text
    wait_for(lambda: run_status(client, run_id) == "suspended", what="the run to suspend")


def test_a_bodiless_cancel_as_curl_sends_it_cancels_the_run(serve: Serve) -> None:
    client = serve()
    suspended(client, "w-1")
    request = client.build_request("POST", "/api/runs/w-1/cancel")
    request.headers.pop("content-length", None)  # curl -X POST sends no Content-Length and no Content-Type
    request.headers.pop("content-type", None)
    r = client.send(request)
    assert r.status_code == 202, r.text
    assert r.json()["cancelled"] is True and r.json()["reason"] == "cancelled from tether serve"
    assert run_status(client, "w-1") == "cancelled"


def test_a_zero_length_body_needs_no_content_type_either(serve: Serve) -> None:
    client = serve()
    suspended(client, "w-2")
    r = client.post("/api/runs/w-2/cancel", headers={"Content-Length": "0"})
    assert r.status_code == 202, r.text
    assert run_status(client, "w-2") == "cancelled"


def test_a_body_still_must_be_json_and_a_named_type_must_be_json(serve: Serve) -> None:
    client = serve()
    suspended(client, "w-3")
    for headers, body in [({}, b'{"reason": "x"}'), ({"Content-Type": "text/plain"}, b""),
                          ({"Content-Type": "application/x-www-form-urlencoded"}, b"reason=x")]:
        r = client.post("/api/runs/w-3/cancel", content=body, headers=headers)
        assert r.status_code == 415, (headers, r.text)
        assert r.json()["error"]["code"] == "unsupported-media-type"
    assert run_status(client, "w-3") == "suspended"


def test_a_bodiless_post_without_the_client_header_is_still_refused(serve: Serve) -> None:
    client = serve()
    suspended(client, "w-4")
    del client.headers["X-Tether-Request"]
    for extra in ({}, {"Origin": "http://127.0.0.1:9999"}):
        r = client.post("/api/runs/w-4/cancel", headers=extra)
        assert r.status_code == 403, (extra, r.text)
        assert r.json()["error"]["code"] in ("client-header-required", "cross-origin")
    assert run_status(client, "w-4") == "suspended"
