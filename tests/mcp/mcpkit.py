"""Helpers for the MCP tests: our SDK server over stdio/HTTP, process checks, fake-model scripts."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import tether
from tether.contracts.messages import ChatRequest, ToolResultPart
from tether.testing import Reply

APP = Path(__file__).with_name("server_app.py")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_port(port: int, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise AssertionError(f"nothing listens on 127.0.0.1:{port} after {timeout_s}s")


def alive(pid: int) -> bool:
    """True while the process exists and is not a zombie waiting to be reaped."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def wait_dead(pid: int, timeout_s: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not alive(pid):
            return True
        time.sleep(0.05)
    return False


class Calls:
    """What our test server saw: one row per tool call, one pid per server start."""

    def __init__(self, root: Path) -> None:
        self.calls_path = root / "calls.jsonl"
        self.pids_path = root / "pids.txt"

    @property
    def env(self) -> dict[str, str]:
        return {"TETHER_TEST_CALLS": str(self.calls_path), "TETHER_TEST_PIDS": str(self.pids_path)}

    def rows(self, tool: str | None = None) -> list[dict[str, Any]]:
        if not self.calls_path.exists():
            return []
        rows = [json.loads(line) for line in self.calls_path.read_text().splitlines()]
        return [r for r in rows if tool is None or r["tool"] == tool]

    def pids(self) -> list[int]:
        return [int(p) for p in self.pids_path.read_text().split()] if self.pids_path.exists() else []


class HttpServer:
    """Our SDK server over streamable HTTP on 127.0.0.1, restarted by a supervisor when it dies."""

    def __init__(self, calls: Calls) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        self.env = {**os.environ, **calls.env}
        self.procs: list[subprocess.Popen[bytes]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._supervise, daemon=True)
        self._thread.start()
        wait_port(self.port)

    def _supervise(self) -> None:
        while not self._stop.is_set():
            proc = subprocess.Popen([sys.executable, str(APP), "http", str(self.port)], env=self.env,
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            self.procs.append(proc)
            proc.wait()

    def wait_restarted(self, timeout_s: float = 30.0) -> None:
        """Block until the first server process is gone and its replacement listens."""
        deadline = time.monotonic() + timeout_s
        while (len(self.procs) < 2 or self.procs[0].poll() is None) and time.monotonic() < deadline:
            time.sleep(0.02)
        wait_port(self.port, max(0.0, deadline - time.monotonic()))

    def stop(self) -> None:
        self._stop.set()
        for proc in self.procs:
            proc.kill()
            proc.wait()
        self._thread.join(10)


def tool_results(request: ChatRequest) -> list[ToolResultPart]:
    return [p for m in request.messages if m.role == "tool" for p in m.parts if isinstance(p, ToolResultPart)]


def scripted(*turns: Reply | Callable[[ChatRequest], Reply]) -> Callable[[ChatRequest], Reply]:
    """A fake-model script by turn: the n-th request (counted by tool messages so far) gets turns[n]."""

    def script(request: ChatRequest) -> Reply:
        n = sum(1 for m in request.messages if m.role == "tool")
        turn = turns[min(n, len(turns) - 1)]
        return turn(request) if callable(turn) else turn

    return script


def last_result(request: ChatRequest) -> Reply:
    """The final turn: answer with the last tool result, marked when it was an error."""
    part = tool_results(request)[-1]
    return Reply(text=("ERROR " if part.is_error else "") + part.content)


def make_engine(model: tether.models.FakeModel, url: str) -> tether.Engine:
    return tether.Engine(models=[model], routing={"loop": "fake:m"}, store=url)
