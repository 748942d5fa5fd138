"""SIGKILL of a real engine process around an MCP call: no call repeats, no server outlives the engine."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import mcp_crash_child
import pytest
from mcpkit import Calls, alive, wait_dead

import tether
from tether.contracts.messages import ChatRequest
from tether.testing import Reply

CHILD = Path(__file__).with_name("mcp_crash_child.py")


def crash(tmp_path: Path, calls: Calls, mode: str, ready: Callable[[], bool], stubborn: bool = False) -> int:
    """Run the child until `ready()`, SIGKILL it; returns the pid of the MCP server it had started."""
    env = {**os.environ, "TETHER_TEST_STUBBORN": "1"} if stubborn else None
    child = subprocess.Popen(
        [sys.executable, str(CHILD), f"sqlite:///{tmp_path}/t.db", "crash", mode, str(tmp_path / "marker"),
         str(calls.calls_path), str(calls.pids_path)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )
    try:
        deadline = time.monotonic() + 60
        while not ready() and child.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert child.poll() is None, child.communicate()[1]
        (server_pid,) = calls.pids()
        assert alive(server_pid)
        child.send_signal(signal.SIGKILL)
        assert child.wait(30) == -signal.SIGKILL
    finally:
        if child.poll() is None:
            child.kill()
        child.communicate()
    return server_pid


async def resume(tmp_path: Path, calls: Calls) -> tuple[tether.RunOutcome, list[tether.ToolEffectRecord]]:
    def answer(request: ChatRequest) -> Reply:
        return Reply(text="resumed: " + request.messages[-1].parts[0].content)  # type: ignore[union-attr]

    engine = tether.Engine(models=[tether.models.fake("fake", script=answer)], routing={"loop": "fake:m"},
                           store=f"sqlite:///{tmp_path}/t.db")
    server = mcp_crash_child.server(str(calls.calls_path), str(calls.pids_path))
    out = await engine.resume("crash", mcp_crash_child.workflow(server))
    ledger = await engine.effect_ledger("crash")
    await engine.close()
    return out, ledger


@pytest.mark.parametrize("server", ["stdio", "stubborn"])
async def test_a_journaled_mcp_call_is_not_repeated_after_sigkill_and_the_server_dies_with_the_engine(
    tmp_path: Path, calls: Calls, server: str
) -> None:
    # A stubborn server keeps running when its stdin closes: only the parent-death signal stops it.
    server_pid = crash(tmp_path, calls, "after", (tmp_path / "marker").exists, stubborn=server == "stubborn")
    assert wait_dead(server_pid), f"MCP server {server_pid} outlived the SIGKILLed engine"
    assert len(calls.rows("echo")) == 1

    out, ledger = await resume(tmp_path, calls)
    assert out.status == "ok", out.error
    assert out.value.startswith('resumed: {"text": "once"')  # the journaled result, served again
    assert len(calls.rows("echo")) == 1  # the resume made no MCP call for it
    assert [(r.tool, r.outcome) for r in ledger] == [("echo", "ok")]
    _, resumed_pid = calls.pids()  # the resume started the server (to list its tools) ...
    assert wait_dead(resumed_pid)  # ... and closed it at settle


@pytest.mark.parametrize("kind", ["plain", "idempotent"])
async def test_a_call_cut_by_sigkill_follows_the_orphan_rules(tmp_path: Path, calls: Calls, kind: str) -> None:
    tool = "slow" if kind == "plain" else "wait_read"
    server_pid = crash(tmp_path, calls, f"during-{kind}", lambda: bool(calls.rows(tool)))
    assert wait_dead(server_pid)
    out, ledger = await resume(tmp_path, calls)
    assert out.status == "ok", out.error
    first = calls.rows(tool)[0]
    assert ledger[0].outcome is None and ledger[0].idempotency_key == first["key"]  # the orphan stays visible
    if kind == "plain":  # not idempotent: not run again, and the model is told
        assert len(calls.rows(tool)) == 1 and len(ledger) == 1
        assert out.value.startswith("resumed: [effect unknown]")
        assert out.replay.orphaned == [first["key"]]
    else:  # readOnlyHint: dispatched again with the same key, which the server dedupes
        again = calls.rows(tool)[1]
        assert again["key"] == first["key"] and out.value == "resumed: read after 0s"
        assert ledger[-1].outcome == "ok" and ledger[-1].idempotency_key == first["key"]
