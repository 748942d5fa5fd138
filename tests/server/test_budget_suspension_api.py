"""A run parked on its `budget` suspension, seen and raised through the HTTP API, then resumed in another
process: the suspension names what the run needs, the raise resolves it, and the stopped agent continues from
its checkpoint with 0 re-paid calls (the fake provider's request log)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from starlette.testclient import TestClient

import tether
from crashkit import APP_DIR, cli
from tether.server import create_app

sys.path.insert(0, str(APP_DIR))
from raise_app import sent_turns  # the app lives beside the budget tests


def env_for(tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "RAISE_STORE": f"sqlite:///{tmp_path}/t.db", "RAISE_LOG": str(tmp_path / "requests.log"),
            "PYTHONPATH": os.pathsep.join([str(APP_DIR), os.environ.get("PYTHONPATH", "")])}


def test_a_parked_run_is_raised_through_the_api_and_resumed_in_another_process(tmp_path: Path) -> None:
    env = env_for(tmp_path)
    child = subprocess.run([sys.executable, str(APP_DIR / "raise_app.py"), "p", "suspend"], env=env,
                           capture_output=True, text=True, timeout=120)
    assert child.returncode == 0, child.stdout + child.stderr
    assert sent_turns(env["RAISE_LOG"]) == [0, 1]

    app = create_app(tether.Engine(store=env["RAISE_STORE"]), mode="store", owns_engine=True)
    with TestClient(app, base_url="http://localhost", headers={"X-Tether-Request": "1"}) as client:
        run = client.get("/api/runs/p").json()
        assert run["status"] == "suspended" and run["pending"] == 1
        [parked] = run["suspensions"]
        assert parked["key"] == "budget:1" and parked["kind"] == "budget"
        need = parked["budget"]
        assert need["ceiling_usd"] == 0.005 and need["spent_usd"] == pytest.approx(0.004)
        assert need["reason"] == "output-floor" and need["suggested_usd"] == pytest.approx(0.01)
        assert need["agent_id"] == 1 and "output floor" in need["message"]

        lower = client.post("/api/runs/p/raise-budget", json={"usd": 0.004})
        assert lower.status_code == 409 and "never lowered" in lower.json()["error"]["message"]
        no_program = TestClient(app, base_url="http://localhost").post("/api/runs/p/raise-budget", json={"usd": 1.0})
        assert no_program.status_code == 403  # a write needs what a program sends (no cross-site form posts)

        raised = client.post("/api/runs/p/raise-budget", json={"usd": 1.0, "reason": "approved by finance"})
        assert raised.status_code == 200, raised.text
        body = raised.json()
        assert body["resolved"] == ["budget:1"] and body["ceiling_usd"] == 1.0 and body["resumed"] is False
        assert body["status"] == "suspended"
        assert client.get("/api/runs/p").json()["suspensions"] == []
        again = client.post("/api/runs/p/raise-budget", json={"usd": 1.0})
        assert again.status_code == 409  # not above the ceiling it has now

    resumed = cli("resume", "p", "--app", "raise_app:engine", "--json", env=env)
    doc = json.loads(resumed.stdout)
    assert resumed.returncode == 0 and doc["status"] == "ok" and doc["value"] == "done", resumed.stdout + resumed.stderr
    assert sent_turns(env["RAISE_LOG"]) == [0, 1, 2, 3]  # 0 re-paid calls
    assert doc["cost"]["provider_calls"] == 4 and doc["cost"]["total_usd"] == pytest.approx(0.008)
