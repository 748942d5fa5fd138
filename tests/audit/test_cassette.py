"""A recorded run exported as a cassette replays green with sockets blocked, and red when a call is removed."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from audit_kit import RUN, Backend

from tether.audit.cassette import CASSETTE_FILE, NetworkBlockedError, network_blocked

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
        capture_output=True, text=True, timeout=60, env={**os.environ, "PYTHONPATH": str(HERE)},
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


def test_the_network_is_blocked_inside_and_restored_after() -> None:
    with network_blocked(), pytest.raises(NetworkBlockedError):
        socket.create_connection(("127.0.0.1", 9))
    with pytest.raises(OSError):  # restored: a real (refused) connection attempt
        socket.create_connection(("127.0.0.1", 9), timeout=1)
