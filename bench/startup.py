"""Start-up: what `import tether`, `tether --version` and `tether run` cost a fresh process.

Each figure starts real processes one after another and keeps the best of N wall times (start-up is
noise-prone on a shared machine; the best run is the one least disturbed). The reference is a bare
`python -c pass` on the same interpreter. `tether run` is measured to its first model request: a
loopback HTTP server in this process answers Chat Completions (an `openai_compatible` adapter, so the
run imports and builds a real SDK client) and notes when the request arrives.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

ROUNDS = 9

FLOW = textwrap.dedent('''
    import os

    import tether

    engine = tether.Engine(
        models=[tether.models.openai_compatible("local", base_url=os.environ["BENCH_URL"], local=True)],
        routing={"loop": "local:m"},
        store=os.environ["BENCH_STORE"],
    )


    @tether.workflow(name="hello")
    async def hello(ctx: tether.Ctx) -> str:
        return await ctx.agent("Say hello")
''')


def _wall(argv: list[str], rounds: int, cwd: str | None = None) -> float:
    """The best wall time of `rounds` runs of `argv`."""
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        subprocess.run(argv, cwd=cwd, capture_output=True, check=True)
        best = min(best, time.perf_counter() - start)
    return best


def import_tether(rounds: int = ROUNDS) -> dict[str, Any]:
    """`python -c "import tether"`, and importing the whole public API (every name of `tether.__all__`)."""
    every = "import tether; [getattr(tether, n) for n in tether.__all__]"
    return {"import_s": _wall([sys.executable, "-c", "import tether"], rounds),
            "all_names_s": _wall([sys.executable, "-c", every], rounds),
            "python_s": _wall([sys.executable, "-c", "pass"], rounds)}


def cli_version(rounds: int = ROUNDS) -> dict[str, Any]:
    """`tether --version` and `tether --help` (run as `python -m tether.cli.main`, what the script runs)."""
    cli = [sys.executable, "-m", "tether.cli.main"]
    return {"version_s": _wall([*cli, "--version"], rounds), "help_s": _wall([*cli, "--help"], rounds),
            "python_s": _wall([sys.executable, "-c", "pass"], rounds)}


class _Chat(BaseHTTPRequestHandler):
    """Answers every POST with one streamed Chat Completions reply; notes when each request arrived."""

    arrivals: list[float]
    body: bytes

    def do_POST(self) -> None:
        type(self).arrivals.append(time.time())
        self.rfile.read(int(self.headers.get("content-length") or 0))
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("content-length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, *args: Any) -> None:
        pass


def run_first_request(rounds: int = 5) -> dict[str, Any]:
    """`tether run flows:hello` from process start to its first model request (and to its exit)."""
    try:
        import openai  # noqa: F401  (the adapter's SDK: without it there is no request to time)
    except ImportError as exc:
        return {"error": f"not installed: {exc}"}
    from tether.testing import Reply
    from tether.testing.wire import chat_sse

    handler = type("Chat", (_Chat,), {"arrivals": [], "body": chat_sse(Reply(text="hello"), "m").encode()})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    first, whole = float("inf"), float("inf")
    try:
        with tempfile.TemporaryDirectory() as tmp:
            Path(tmp, "flows.py").write_text(FLOW)
            env = {**os.environ, "BENCH_URL": f"http://127.0.0.1:{server.server_address[1]}/v1",
                   "BENCH_STORE": f"sqlite:///{tmp}/t.db", "OPENAI_API_KEY": "unused"}
            argv = [sys.executable, "-m", "tether.cli.main", "run", "flows:hello", "--json", "--no-progress"]
            for _ in range(rounds):
                handler.arrivals.clear()
                start, wall = time.time(), time.perf_counter()
                done = subprocess.run(argv, cwd=tmp, env=env, capture_output=True, text=True)
                took = time.perf_counter() - wall
                if done.returncode != 0 or not handler.arrivals:
                    return {"error": f"tether run failed (exit {done.returncode}): {done.stderr.strip()[-160:]}"}
                first, whole = min(first, handler.arrivals[0] - start), min(whole, took)
    finally:
        server.shutdown()
        server.server_close()
    return {"first_request_s": first, "exit_s": whole}
