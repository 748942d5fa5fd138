"""Bad input is a typed 4xx, never a 500 `internal` (issue 43): a resolve body nested 990+ levels deep."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from server_kit import run_status, wait_for
from starlette.testclient import TestClient


@pytest.mark.parametrize("depth", [990, 5000, 100_000])
def test_a_resolve_body_nested_deep_is_a_422_and_writes_nothing(serve: Callable[..., TestClient], depth: int) -> None:
    client = serve()
    client.post("/api/runs", json={"workflow": "wait", "run_id": "deep-1"})
    wait_for(lambda: run_status(client, "deep-1") == "suspended", what="the run to settle suspended")
    body = b'{"key": "approve", "value": ' + b"[" * depth + b"]" * depth + b"}"
    r = client.post("/api/runs/deep-1/resolve", content=body, headers={"Content-Type": "application/json"})
    assert r.status_code == 422 and r.json()["error"]["code"] == "invalid-request", r.text
    assert run_status(client, "deep-1") == "suspended"
