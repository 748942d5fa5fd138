"""A crashed run with two calls cut off, for the tests of what a crash costs (tests/budget, tests/server).

A local Chat Completions endpoint (`Provider`) holds every stream while told to, so a child process running
`tests/budget/orphan_app.py` can be SIGKILLed with both of its parallel calls in flight.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

from tether.testing import Reply
from tether.testing.wire import chat_sse

APP_DIR = Path(__file__).parent / "budget"
TETHER = Path(sys.executable).with_name("tether")
REPLY_TOKENS = 1_000  # 0.02 USD of output: after the orphans, the second agent no longer fits


class Provider(BaseHTTPRequestHandler):
    """A Chat Completions endpoint: holds every stream while `hold` is set, else answers at once, never with
    more output than the request's `max_tokens` (cut with `length`, as a real provider does)."""

    hold: ClassVar[threading.Event] = threading.Event()
    released: ClassVar[threading.Event] = threading.Event()
    held: ClassVar[list[str]] = []
    bodies: ClassVar[list[dict[str, Any]]] = []

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        self.bodies.append(body)
        prompt = body["messages"][-1]["content"]
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.end_headers()
        if self.hold.is_set():
            first = {"id": "c", "object": "chat.completion.chunk", "created": 0, "model": body["model"],
                     "choices": [{"index": 0, "delta": {"role": "assistant", "content": "St"}, "finish_reason": None}]}
            self.wfile.write(f"data: {json.dumps(first)}\n\n".encode())
            self.wfile.flush()
            self.held.append(prompt)
            self.released.wait(30)
            return
        cap = int(body.get("max_tokens") or body.get("max_completion_tokens") or REPLY_TOKENS)
        out = min(REPLY_TOKENS, cap)
        reply = Reply(text=f"{prompt} done", input_tokens=40, output_tokens=out,
                      finish_reason="max_tokens" if out < REPLY_TOKENS else "stop")
        self.wfile.write(chat_sse(reply, body["model"]).encode())

    def log_message(self, *args: Any) -> None:
        pass


@contextmanager
def provider() -> Iterator[str]:
    """A running `Provider`; yields its base URL."""
    Provider.hold.clear()
    Provider.released.clear()
    Provider.held.clear()
    Provider.bodies.clear()
    server = ThreadingHTTPServer(("127.0.0.1", 0), Provider)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}/v1"
    Provider.released.set()
    server.shutdown()


def env_for(store: str, base_url: str) -> dict[str, str]:
    return {**os.environ, "ORPHAN_STORE": store, "ORPHAN_BASE_URL": base_url,
            "PYTHONPATH": os.pathsep.join([str(APP_DIR), os.environ.get("PYTHONPATH", "")])}


def crash_with_two_calls_in_flight(run_id: str, env: dict[str, str]) -> None:
    """Run the app in a child process and SIGKILL it while both parallel calls stream."""
    Provider.hold.set()
    child = subprocess.Popen([sys.executable, str(APP_DIR / "orphan_app.py"), run_id], env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 60
    while len(Provider.held) < 2:
        assert child.poll() is None, child.stdout.read().decode() if child.stdout else ""
        assert time.monotonic() < deadline, "the two calls never reached the provider"
        time.sleep(0.02)
    child.send_signal(signal.SIGKILL)
    child.wait(10)
    Provider.hold.clear()
    Provider.released.set()


def cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(TETHER), *args], env=env, capture_output=True, text=True, timeout=120, cwd=APP_DIR)




def crashed_run(store: str, base_url: str, run_id: str = "r") -> dict[str, str]:
    """Crash `run_id` with two calls in flight, resume it once (it settles `exhausted`: the two cut calls at
    their worst case leave too little); returns the environment the app and the CLI use."""
    env = env_for(store, base_url)
    crash_with_two_calls_in_flight(run_id, env)
    resumed = cli("resume", run_id, "--app", "orphan_app:engine", "--json", env=env)
    assert resumed.returncode == 3, resumed.stdout + resumed.stderr
    return env
