"""`/api/sessions`: create, send turns, branch, read the tree with per-turn cost; conflicts and 404s typed."""

from __future__ import annotations

from pathlib import Path

from session_app import build
from starlette.testclient import TestClient

from tether.server import create_app


def client(tmp_path: Path) -> TestClient:
    engine, _ = build(f"sqlite:///{tmp_path}/t.db", str(tmp_path / "log.jsonl"))
    c = TestClient(create_app(engine, owns_engine=True), base_url="http://localhost",
                   headers={"X-Tether-Request": "1"})
    c.__enter__()
    return c


def test_the_session_api_sends_turns_branches_and_shows_the_tree(tmp_path: Path) -> None:
    c = client(tmp_path)
    try:
        made = c.post("/api/sessions", json={"session_id": "desk", "workspace": "acme", "budget_usd": 1.0})
        assert made.status_code == 201 and made.json()["turns"] == []
        for prompt in ("hello", "where is order 3"):
            sent = c.post("/api/sessions/desk/turns", json={"workflow": "support", "prompt": prompt})
            assert sent.status_code == 201 and sent.json()["status"] == "ok", sent.json()
        assert sent.json()["answer"] == "re: where is order 3 (order 3 shipped)"
        branched = c.post("/api/sessions/desk/branch", json={"turn": 1})
        assert branched.status_code == 200 and branched.json()["head"] == "desk.1"
        third = c.post("/api/sessions/desk/turns", json={"workflow": "support", "prompt": "again"}).json()
        assert third["parent"] == "desk.1"
        shown = c.get("/api/sessions/desk").json()
        assert [(t["index"], t["parent"]) for t in shown["turns"]] == [(1, None), (2, "desk.1"), (3, "desk.1")]
        costs = {t["run_id"]: t["cost_usd"] for t in shown["turns"]}
        for run_id, cost in costs.items():  # the figure is the run's cost report
            assert c.get(f"/api/runs/{run_id}/cost").json()["total_usd"] == cost
        assert shown["spent_usd"] == sum(costs.values())
        assert [s["session_id"] for s in c.get("/api/sessions").json()["sessions"]] == ["desk"]

        missing = c.get("/api/sessions/nope")
        assert missing.status_code == 404 and missing.json()["error"]["code"] == "session-not-found"
        bad_turn = c.post("/api/sessions/desk/branch", json={"turn": 9})
        assert bad_turn.status_code == 404
        unknown = c.post("/api/sessions/desk/turns", json={"workflow": "nope", "prompt": "x"})
        assert unknown.status_code == 404 and unknown.json()["error"]["code"] == "workflow-not-found"
        clash = c.post("/api/sessions", json={"session_id": "desk", "workspace": "globex"})
        assert clash.status_code == 409 and "workspace" in clash.json()["error"]["message"]
    finally:
        c.__exit__(None, None, None)
