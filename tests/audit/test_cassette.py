"""A recorded run exported as a cassette replays green with its adapters offline, and red when a call is removed;
a replay changes nothing process-wide (the rest of the process keeps its network)."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import socketserver
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from audit_kit import RUN, Backend

import tether
from tether.audit.cassette import (
    CASSETTE_FILE,
    NetworkBlockedError,
    OfflineModel,
    build_cassette,
    write_cassette,
)
from tether.contracts.messages import ChatRequest, Message, TextPart
from tether.testing import Reply, replay_cassette

HERE = Path(__file__).parent


def _pytest(test: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": f"{HERE}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(test)],
                          capture_output=True, text=True, timeout=120, env=env, cwd=test.parent)


@pytest.fixture
def exported(backend: Backend, tmp_path: Path) -> Path:
    out = tmp_path / "incident"
    made = subprocess.run(
        [sys.executable, "-m", "tether.cli.main", "export-cassette", RUN, "-o", str(out), "--store", backend.url,
         "--workflow", "audited_flow:weather"],
        capture_output=True, text=True, timeout=60,
        env={**os.environ, "PYTHONPATH": f"{HERE}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"},
    )
    assert made.returncode == 0, made.stderr
    return out


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_an_exported_run_with_tools_and_two_agents_replays_green(exported: Path) -> None:
    doc = json.loads((exported / CASSETTE_FILE).read_text())
    assert [c["label"] for c in doc["calls"]] == ["ask", "sum"] and doc["effects"]  # the tool's ledger rows
    result = _pytest(exported / "test_audit_1.py")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 passed" in result.stdout


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_removing_one_recorded_call_turns_it_red(exported: Path) -> None:
    path = exported / CASSETTE_FILE
    doc = json.loads(path.read_text())
    gone = next(c["seq"] for c in doc["calls"] if c["label"] == "sum")
    doc["entries"] = [t for t in doc["entries"] if json.loads(t)["seq"] != gone]  # its terminal goes with it
    path.write_text(json.dumps(doc))
    result = _pytest(exported / "test_audit_1.py")
    assert result.returncode == 1, result.stdout
    assert "CassetteReplayError" in result.stdout and "recorded ok" in result.stdout


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_a_workflow_that_no_longer_makes_a_recorded_call_is_red(exported: Path) -> None:
    test = exported / "test_audit_1.py"
    (exported / "shorter_flow.py").write_text(
        "import tether\nfrom audited_flow import engine, lookup\n\n"
        "@tether.workflow(name='weather')\n"
        "async def weather(ctx, city):\n"
        "    answer = await ctx.agent(f'Weather in {city}?', tools=[lookup], label='ask', agent_type='asker')\n"
        "    return {'answer': answer, 'summary': 'Summary: sunny.'}\n"
    )
    test.write_text(test.read_text().replace("'audited_flow:weather'", "'shorter_flow:weather'")
                    .replace("APP = None", "APP = 'audited_flow:engine'"))
    result = _pytest(test)
    assert result.returncode == 1 and "unplayed" in result.stdout, result.stdout


async def test_an_offline_adapter_keeps_its_id_and_prices_and_refuses_to_stream() -> None:
    fake = tether.models.fake("fake", [Reply(text="never")], prices={"m": tether.Price(input=1.0, output=2.0)})
    offline = OfflineModel(fake)
    assert (offline.id, offline.family, offline.caps("m").price) == ("fake", fake.family, fake.caps("m").price)
    request = ChatRequest(model="m", messages=[Message(role="user", parts=[TextPart(text="hi")])])
    with pytest.raises(NetworkBlockedError, match="fake:m"):
        async for _ in offline.stream(request):
            pass
    assert fake.requests == []  # the adapter itself was never reached


PROBE = """
import asyncio
import socket

import tether
from tether.testing import Reply

PORT = 0
\"\"\"Set by the test before the replay: then the body opens loopback connections while it replays.\"\"\"
seen = []


def connect():
    with socket.create_connection(("127.0.0.1", PORT), timeout=5) as conn:
        seen.append((conn.recv(2), dict(vars(socket)), dict(vars(socket.socket))))


@tether.workflow(name="probe")
async def probe(ctx):
    answer = await ctx.agent("hi", label="hi")
    if PORT:
        connect()  # the replaying coroutine itself
        await asyncio.to_thread(connect)  # and another thread of the process
    return answer


def model():
    return tether.models.fake("fake", lambda request: Reply(text="hello"))


engine = tether.Engine(models=[model()], routing={"loop": "fake:m"}, store="memory://")
"""


class Hello(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        self.request.sendall(b"ok")


@pytest.fixture
def loopback() -> Iterator[int]:
    """A TCP server on 127.0.0.1 in a thread of this process; yields its port."""
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Hello)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def test_a_replay_patches_nothing_process_wide_and_the_process_keeps_its_network(
        tmp_path: Path, loopback: int, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "probe_flow.py").write_text(PROBE)
    monkeypatch.syspath_prepend(str(tmp_path))
    import probe_flow

    async def record() -> dict[str, Any]:
        engine = tether.Engine(models=[probe_flow.model()], routing={"loop": "fake:m"},
                               store=f"sqlite:///{tmp_path}/rec.db")
        try:
            assert (await engine.run(probe_flow.probe, run_id="probe-1")).value == "hello"
            return await build_cassette(await engine.store(), "probe-1", workflow="probe_flow:probe")
        finally:
            await engine.close()

    cassette, _ = write_cassette(asyncio.run(record()), tmp_path / "out")
    before = (dict(vars(socket)), dict(vars(socket.socket)))
    adapter = probe_flow.engine.adapters["fake"]
    probe_flow.PORT = loopback
    outcome = replay_cassette(cassette, workflow="probe_flow:probe", workdir=tmp_path)
    assert outcome.status == "ok" and outcome.replay.hits == 1
    assert [got for got, *_ in probe_flow.seen] == [b"ok", b"ok"]  # the replay's coroutine and a thread connected
    for _, module_attrs, class_attrs in probe_flow.seen:
        assert (module_attrs, class_attrs) == before  # socket was the same during the replay
    assert (dict(vars(socket)), dict(vars(socket.socket))) == before
    assert probe_flow.engine.adapters["fake"] is adapter  # the engine's own adapter is back
