"""A resolve through the API is refused when the suspension does not accept the value, and says what it does."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from server_kit import run_status, wait_for
from starlette.testclient import TestClient

Serve = Callable[..., TestClient]


def _suspended(client: TestClient, workflow: str, run_id: str) -> Any:
    assert client.post("/api/runs", json={"workflow": workflow, "run_id": run_id}).status_code == 201
    wait_for(lambda: run_status(client, run_id) == "suspended", what=f"{run_id} to settle suspended")
    (suspension,) = client.get(f"/api/runs/{run_id}").json()["suspensions"]
    return suspension


@pytest.mark.parametrize("value", ["alow", "Allow", "yes", True, 1, {"decision": "allow"}, None])
def test_an_approval_takes_exactly_allow_or_deny_and_anything_else_is_a_422_that_writes_nothing(
    serve: Serve, value: Any
) -> None:
    client = serve()
    approval = _suspended(client, "ship", "ship-1")
    assert approval["kind"] == "approval" and approval["accepts"] == ["allow", "deny"]
    before = client.get("/api/runs/ship-1/journal").json()
    r = client.post("/api/runs/ship-1/resolve", json={"key": approval["key"], "value": value})
    assert r.status_code == 422, r.json()
    error = r.json()["error"]
    assert error["code"] == "invalid-resolution" and "neither 'allow' nor 'deny'" in error["message"]
    assert error["data"]["accepted"] == ["allow", "deny"] and error["data"]["key"] == approval["key"]
    assert client.get("/api/runs/ship-1/journal").json() == before
    assert run_status(client, "ship-1") == "suspended"


def test_a_denied_approval_finishes_the_run_without_running_the_tool(serve: Serve) -> None:
    client = serve()
    approval = _suspended(client, "ship", "ship-2")
    r = client.post("/api/runs/ship-2/resolve", json={"key": approval["key"], "value": "deny"})
    assert r.status_code == 200 and r.json()["resumed"] is True
    wait_for(lambda: run_status(client, "ship-2") == "ok", what="the denied run to finish")
    assert client.get("/api/runs/ship-2/ledger").json()["records"] == []


def test_an_enum_suspension_lists_its_values_and_its_schema(serve: Serve) -> None:
    client = serve()
    severity = _suspended(client, "triage", "t-1")
    assert severity["kind"] == "external" and severity["accepts"] == ["low", "high"]
    assert severity["value_schema"]["enum"] == ["low", "high"]
    bad = client.post("/api/runs/t-1/resolve", json={"key": "severity", "value": "medium"})
    assert bad.status_code == 422 and bad.json()["error"]["code"] == "invalid-resolution"
    assert client.post("/api/runs/t-1/resolve", json={"key": "severity", "value": "high"}).status_code == 200
    wait_for(lambda: run_status(client, "t-1") == "ok", what="the triaged run to finish")
    assert client.get("/api/runs/t-1").json()["outcome"]["value"] == "high"


def test_a_schema_without_an_enum_is_shown_and_a_free_suspension_accepts_anything(serve: Serve) -> None:
    client = serve()
    score = _suspended(client, "score", "s-1")
    assert score["accepts"] is None and score["value_schema"] == {"type": "integer"}
    free = _suspended(client, "wait", "w-1")
    assert free["accepts"] is None and free["value_schema"] is None
