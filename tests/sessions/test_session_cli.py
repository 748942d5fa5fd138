"""`tether session new/send/show/branch/list --json` over a real store, as a user runs them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

TETHER = Path(sys.executable).with_name("tether")
HERE = Path(__file__).parent


def tether_json(tmp_path: Path, *args: str) -> Any:
    (tmp_path / "cliapp.py").write_text(
        f"from session_app import build\nengine, support = build('sqlite:///{tmp_path}/t.db', '{tmp_path}/log.jsonl')\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(HERE), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([str(TETHER), "session", *args, "--app", "cliapp:engine", "--json"], capture_output=True,
                          text=True, env=env, cwd=tmp_path, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_the_session_commands_build_and_show_a_tree_with_a_branch(tmp_path: Path) -> None:
    made = tether_json(tmp_path, "new", "desk", "--workspace", "acme", "--budget", "1")
    assert (made["session_id"], made["workspace"], made["budget_usd"], made["head"]) == ("desk", "acme", 1.0, None)
    one = tether_json(tmp_path, "send", "desk", "hello", "--workflow", "support")
    assert (one["index"], one["status"], one["answer"]) == (1, "ok", "re: hello")
    two = tether_json(tmp_path, "send", "desk", "where is order 4", "--workflow", "support")
    assert two["answer"] == "re: where is order 4 (order 4 shipped)" and two["cost_usd"] > one["cost_usd"]
    assert tether_json(tmp_path, "branch", "desk", "1")["head"] == "desk.1"
    three = tether_json(tmp_path, "send", "desk", "again", "--workflow", "support")
    assert three["parent"] == "desk.1"
    shown = tether_json(tmp_path, "show", "desk")
    assert shown["head"] == "desk.3"
    assert [(t["index"], t["parent"], t["status"]) for t in shown["turns"]] == [
        (1, None, "ok"), (2, "desk.1", "ok"), (3, "desk.1", "ok")]
    assert shown["spent_usd"] == sum(t["cost_usd"] for t in shown["turns"])
    assert [s["session_id"] for s in tether_json(tmp_path, "list")] == ["desk"]
    assert tether_json(tmp_path, "raise", "desk", "2.5")["budget_usd"] == 2.5
