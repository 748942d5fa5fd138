"""The retention routes: DELETE /api/runs/{id}, POST /api/sweep, GET /api/store/stats, POST /api/store/compact."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from retentionkit import gated, make_engine, tree
from starlette.testclient import TestClient

from tether.server import create_app

PROGRAM = {"X-Tether-Request": "1"}


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    url = f"sqlite:///{tmp_path}/t.db"

    async def setup() -> None:
        engine, _ = make_engine(url)
        try:
            await engine.run(tree, {"topic": "tides"}, run_id="tree")
            await engine.fork("tree", "tree-fork", tree)
            await engine.run(gated, {}, run_id="parked")
        finally:
            await engine.close()

    asyncio.run(setup())
    engine, _ = make_engine(url)
    with TestClient(create_app(engine, mode="store", owns_engine=True), base_url="http://localhost",
                    headers=PROGRAM) as c:
        yield c


def test_delete_answers_409_for_a_suspended_run_and_deletes_with_force(client: TestClient) -> None:
    refused = client.delete("/api/runs/parked")
    assert refused.status_code == 409 and refused.json()["error"]["code"] == "run-active"
    assert refused.json()["error"]["data"]["status"] == "suspended"
    assert client.get("/api/runs/parked").status_code == 200
    forced = client.delete("/api/runs/parked", params={"force": "true"})
    assert forced.status_code == 200 and forced.json()["deleted"] == ["parked"]
    assert client.get("/api/runs/parked").status_code == 404
    assert client.delete("/api/runs/parked").status_code == 404


def test_delete_leaves_the_fork_whole_and_with_forks_takes_it(client: TestClient) -> None:
    cost = client.get("/api/runs/tree-fork/cost").json()
    kept = client.delete("/api/runs/tree").json()
    assert kept["forks_kept"] == ["tree-fork"] and client.get("/api/runs/tree-fork/cost").json() == cost
    assert client.delete("/api/runs/tree-fork", params={"with_forks": "true"}).json()["deleted"] == ["tree-fork"]


def test_a_delete_without_the_client_header_is_refused_as_a_possible_forgery(client: TestClient) -> None:
    bare = TestClient(client.app, base_url="http://localhost")
    refused = bare.delete("/api/runs/tree")
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "client-header-required"
    assert client.get("/api/runs/tree").status_code == 200


def test_sweep_stats_and_compact(client: TestClient) -> None:
    dry = client.post("/api/sweep", json={"before": "2100-01-01T00:00:00Z", "dry_run": True}).json()
    assert sorted(dry["deleted"]) == ["tree", "tree-fork"] and dry["skipped"][0]["run_id"] == "parked"
    assert "suspended" in dry["skipped"][0]["reason"]
    assert client.get("/api/store/stats").json()["runs"] == 3
    swept = client.post("/api/sweep", json={"before": "2100-01-01T00:00:00", "statuses": ["ok"]}).json()
    assert sorted(swept["deleted"]) == ["tree", "tree-fork"]
    stats = client.get("/api/store/stats", params={"largest": 1}).json()
    assert stats["runs"] == 1 and [r["run_id"] for r in stats["largest"]] == ["parked"]
    compacted = client.post("/api/store/compact")
    assert compacted.status_code == 200 and compacted.json()["action"] == "VACUUM"
    bad = client.post("/api/sweep", json={"before": "last tuesday"})
    assert bad.status_code == 422


def test_archive_and_redact_over_the_api_keep_the_cost_and_mark_the_journal(client: TestClient) -> None:
    cost = client.get("/api/runs/tree/cost").json()
    bad = client.post("/api/runs/tree/redact", json={"why": "neither"})
    assert bad.status_code == 400
    chained = client.post("/api/runs/tree/redact", json={"match": "root"})  # a label the chain vouches for
    assert chained.status_code == 409 and chained.json()["error"]["code"] == "run-retained"
    done = client.post("/api/runs/tree/redact", json={"match": "tides", "why": "request 9"})
    assert done.status_code == 200, done.text
    gone = done.json()["entries"]["tree"]
    journal = client.get("/api/runs/tree/journal").json()["entries"]
    marked = {e["seq"]: e for e in journal if e.get("redacted") is not None}
    assert sorted(marked) == gone and all(e["value"] is None and e["payload_sha256"] for e in marked.values())
    assert "tides" not in json.dumps(journal)
    assert client.get("/api/runs/tree/cost").json() == cost
    transcript = client.get("/api/runs/tree/agents/1/transcript").json()
    assert transcript["redacted"] and transcript["messages"] == [] and transcript["output"] is None
    archived = client.post("/api/runs/tree-fork/archive", json={"why": "done"})
    assert archived.status_code == 200 and archived.json()["decision"] == "archive"
    assert client.post("/api/runs/parked/archive", json={}).status_code == 200  # suspended: archived, never resumed
