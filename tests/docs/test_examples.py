"""Every example under examples/ runs to completion (docs are part of the feature)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest

from tether.cli import demo
from tether.contracts.entries import JournalEntry
from tether.stores import open_store
from tether.testing.cassette import CassetteModel
from tether.testing.wire import anthropic_sse

ROOT = Path(__file__).parents[2]
EXAMPLES = sorted((ROOT / "examples").glob("*.py"))


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_example_runs(path: Path) -> None:
    done = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip()


def test_cli_demo_kills_and_resumes(tmp_path: Path) -> None:
    exe = Path(sys.executable).with_name("tether")
    done = subprocess.run([str(exe), "demo", "--store", f"sqlite:///{tmp_path}/demo.db"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "child exited with -9" in done.stdout
    assert "outcome: ok" in done.stdout


def test_cli_demo_live_without_a_key_says_so_and_exits_non_zero(tmp_path: Path) -> None:
    exe = Path(sys.executable).with_name("tether")
    env = {k: v for k, v in os.environ.items() if k not in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY")}
    done = subprocess.run([str(exe), "demo", "--live", "--store", f"sqlite:///{tmp_path}/demo.db"],
                          capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode != 0
    (line,) = done.stderr.splitlines()  # one clear line on stderr, no traceback
    assert "tether demo --live needs ANTHROPIC_API_KEY or OPENAI_API_KEY" in line
    assert "child exited" not in done.stdout  # it stops before running anything
    assert not (tmp_path / "demo.db").exists()


def test_the_demo_resume_makes_no_model_calls_for_agents_the_journal_replays(tmp_path: Path) -> None:
    url, run_id = f"sqlite:///{tmp_path}/demo.db", "demo-test"
    child = subprocess.run([sys.executable, "-m", "tether.cli.demo", url, run_id, "3"],
                           capture_output=True, text=True, timeout=120)
    assert child.returncode == -signal.SIGKILL, child.stderr

    async def resume() -> tuple[list[JournalEntry], demo.Resumed, list[JournalEntry]]:
        store = open_store(url)
        before = await store.load(run_id)
        await store.close()
        resumed = await demo.resume_demo(url, run_id)
        store = open_store(url)
        after = await store.load(run_id)
        await store.close()
        return before, resumed, after

    before, resumed, after = asyncio.run(resume())
    assert resumed.outcome.status == "ok", resumed.outcome.error
    player = resumed.model
    assert isinstance(player, CassetteModel)
    settled = [e for e in before if e.kind == "agent" and e.status not in (None, "running")]
    assert len(settled) >= 3
    ran_now = [e for e in after[len(before):] if e.kind == "agent" and e.status not in (None, "running")]
    assert len(settled) + len(ran_now) == 6
    assert resumed.outcome.replay.hits >= len(settled)
    # Every call the resume made belongs to an agent that settled in the resume, and each came
    # from the cassette: the journal-replayed agents made none, and nothing was recorded.
    assert resumed.calls == player.replayed == sum(e.provider_calls or 0 for e in ran_now)
    assert player.recorded == 0
    assert len(player.exchanges) - len(player.unused()) <= player.replayed < len(player.exchanges)


def test_the_bundled_cassette_is_what_the_recording_script_writes(tmp_path: Path) -> None:
    out = tmp_path / "demo_cassette.json"
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "record_demo_cassette.py"), str(out)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert out.read_bytes() == demo.CASSETTE.read_bytes()
    text = out.read_text().lower()
    assert "recording-offline" not in text and "x-api-key" not in text and "authorization" not in text


class _FakeAnthropic(BaseHTTPRequestHandler):
    """A local stand-in for the Messages API: streams what the demo's stand-in replies."""

    bodies: ClassVar[list[dict[str, Any]]] = []

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        key = self.headers.get("x-api-key") or self.headers.get("authorization", "").removeprefix("Bearer ")
        self.bodies.append({**body, "key": key})
        sse = anthropic_sse(demo.stand_in(body), body["model"]).encode()
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("content-length", str(len(sse)))
        self.end_headers()
        self.wfile.write(sse)

    def log_message(self, *args: Any) -> None:
        pass


def test_cli_demo_live_runs_the_same_workflow_against_the_provider_endpoint(tmp_path: Path) -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _FakeAnthropic)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    exe = Path(sys.executable).with_name("tether")
    env = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"}
    env |= {"ANTHROPIC_API_KEY": "sk-ant-local-test", "ANTHROPIC_BASE_URL": f"http://127.0.0.1:{server.server_port}"}
    try:
        done = subprocess.run([str(exe), "demo", "--live", "--store", f"sqlite:///{tmp_path}/demo.db"],
                              capture_output=True, text=True, timeout=120, env=env)
    finally:
        server.shutdown()
    assert done.returncode == 0, done.stdout + done.stderr
    out = " ".join(done.stdout.split())
    assert "live, ceiling 0.05 USD" in out and "child exited with -9" in out and "outcome: ok" in out
    bodies = _FakeAnthropic.bodies
    assert len(bodies) >= 9  # nine calls in a whole run, plus any the kill cut short
    assert {b["key"] for b in bodies} == {"sk-ant-local-test"}  # the SDK's own key handling, from the env
    assert {b["model"] for b in bodies} == {"claude-sonnet-4-6"}
    assert {b["max_tokens"] for b in bodies} == {demo.MAX_OUTPUT_TOKENS}  # the 0.05 USD ceiling never binds here
