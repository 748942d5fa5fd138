"""A five-turn session with turn 3 SIGKILLed mid-tool: resumed, no completed call re-sent, history whole."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from session_app import requests

APP = Path(__file__).with_name("session_app.py")


def child(url: str, log: Path, *args: str, crash: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, **({"SESSION_CRASH_ORDER": crash} if crash else {})}
    return subprocess.run([sys.executable, str(APP), url, str(log), "chat", *args], capture_output=True, text=True,
                          timeout=120, env=env)


def turn(done: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    assert done.returncode == 0, done.stderr
    return dict(json.loads(done.stdout.splitlines()[-1]))


def test_a_turn_killed_mid_tool_resumes_without_resending_a_completed_call(store_url: str, tmp_path: Path) -> None:
    log = tmp_path / "requests.jsonl"
    assert turn(child(store_url, log, "send", "hello"))["status"] == "ok"
    assert turn(child(store_url, log, "send", "where is order 7"))["answer"] == "re: where is order 7 (order 7 shipped)"
    before = len(requests(str(log)))
    killed = child(store_url, log, "send", "and order 9", crash="9")
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert len(requests(str(log))) == before + 1  # the call that asked for the tool completed, then the tool died
    resumed = turn(child(store_url, log, "resume"))
    assert resumed["index"] == 3 and resumed["status"] == "ok"
    assert resumed["answer"] == "re: and order 9 (order 9 shipped)"
    assert turn(child(store_url, log, "send", "thanks"))["index"] == 4
    assert turn(child(store_url, log, "send", "bye"))["index"] == 5

    sent = [json.dumps(r["messages"]) for r in requests(str(log))]
    assert len(sent) == len(set(sent)), "a completed call was sent twice"
    fourth = next(r["messages"] for r in requests(str(log)) if r["messages"][-1] == ["user", "thanks"])
    assert fourth == [
        ["user", "hello"], ["assistant", "re: hello"],
        ["user", "where is order 7"], ["assistant", "re: where is order 7 (order 7 shipped)"],
        ["user", "and order 9"], ["assistant", "re: and order 9 (order 9 shipped)"],
        ["user", "thanks"],
    ]

    branched = turn(child(store_url, log, "branch", "2"))
    assert branched["index"] == 2
    sixth = turn(child(store_url, log, "send", "one more thing"))
    assert (sixth["index"], sixth["parent"]) == (6, "chat.2")
    seen = next(r["messages"] for r in requests(str(log)) if r["messages"][-1] == ["user", "one more thing"])
    assert seen == [
        ["user", "hello"], ["assistant", "re: hello"],
        ["user", "where is order 7"], ["assistant", "re: where is order 7 (order 7 shipped)"],
        ["user", "one more thing"],
    ]
