"""Helpers for the worker tests: `tether worker` processes, the shared request log, and a TCP proxy."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
SRC = HERE.parents[1] / "src"


@dataclass
class WorkerProcess:
    """A `tether worker` child process; its output is collected line by line as it comes."""

    proc: subprocess.Popen[str]
    lines: list[str] = field(default_factory=list)

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    @property
    def output(self) -> str:
        return "\n".join(self.lines)

    def wait_for(self, needle: str, timeout: float = 30.0) -> str:
        """The first output line containing `needle`, waiting up to `timeout` seconds."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for line in list(self.lines):
                if needle in line:
                    return line
            if self.proc.poll() is not None and not any(needle in line for line in self.lines):
                time.sleep(0.2)  # let the pump drain what the process printed last
                if any(needle in line for line in self.lines):
                    continue
                raise AssertionError(f"worker exited {self.proc.returncode} before {needle!r}:\n{self.output}")
            time.sleep(0.02)
        raise AssertionError(f"no {needle!r} from the worker within {timeout} s:\n{self.output}")

    def signal(self, sig: int) -> None:
        self.proc.send_signal(sig)

    def stop(self, timeout: float = 30.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()


def spawn_worker(
    store_url: str,
    log: Path,
    *,
    ttl: float = 60.0,
    latency: float = 0.02,
    concurrency: int = 4,
    queues: tuple[str, ...] = (),
    clock_offset: float = 0.0,
    caps: str = "",
    poll: float = 0.2,
    extra: tuple[str, ...] = (),
    faketime: str | None = None,
    tether_store: str | None = None,
    env_extra: dict[str, str] | None = None,
) -> WorkerProcess:
    """Start `tether worker --app worker_app:engine` and return once it printed its health line.

    `store_url` is the store the app's engine names ("" for none); `tether_store` sets `TETHER_STORE`.
    `faketime` (e.g. "+1h") runs the process under libfaketime, so every clock it reads is shifted."""
    env = {
        **os.environ,
        "PYTHONPATH": f"{SRC}{os.pathsep}{HERE}",
        "WORKER_STORE": store_url,
        "WORKER_LOG": str(log),
        "WORKER_TTL": str(ttl),
        "WORKER_LATENCY": str(latency),
        "WORKER_CLOCK_OFFSET": str(clock_offset),
        "WORKER_CAPS": caps,
        **(env_extra or {}),
    }
    env.pop("TETHER_STORE", None)
    if tether_store is not None:
        env["TETHER_STORE"] = tether_store
    if faketime is not None:
        env |= {"LD_PRELOAD": libfaketime(), "FAKETIME": faketime, "FAKETIME_DONT_RESET": "1"}
    argv = [
        sys.executable, "-c", "from tether.cli.main import main; main()", "worker", "--app", "worker_app:engine",
        "--concurrency", str(concurrency), "--poll", str(poll), *extra,
    ]
    for q in queues:
        argv += ["--queue", q]
    proc = subprocess.Popen(
        argv, cwd=HERE, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1
    )
    worker = WorkerProcess(proc)
    threading.Thread(target=worker._pump, daemon=True).start()
    worker.wait_for(" ready: ")
    return worker


def run_cli(*args: str, env_extra: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`tether ARGS...` in a child process that can import `worker_app` (no `TETHER_STORE`)."""
    env = {**os.environ, "PYTHONPATH": f"{SRC}{os.pathsep}{HERE}", **(env_extra or {})}
    env.pop("TETHER_STORE", None)
    return subprocess.run(
        [sys.executable, "-c", "from tether.cli.main import main; main()", *args],
        cwd=HERE, env=env, capture_output=True, text=True, timeout=60,
    )


LIBFAKETIME = Path("/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1")


def libfaketime() -> str:
    """The libfaketime shim (Debian `libfaketime`, installed by .ci/run); its absence fails the test."""
    if not LIBFAKETIME.exists():
        raise AssertionError(f"{LIBFAKETIME} is missing: apt-get install libfaketime (.ci/run installs it)")
    return str(LIBFAKETIME)


@contextlib.contextmanager
def workers(*procs: WorkerProcess) -> Iterator[None]:
    """Stop (then kill) the given workers however the test ends."""
    try:
        yield
    finally:
        for w in procs:
            w.stop(timeout=15)


@dataclass(frozen=True)
class Request:
    """One line of the shared request log: a call sent (`start`) or answered in full (`done`)."""

    event: str
    prompt: str
    pid: int
    at: float


def request_lines(log: Path) -> list[Request]:
    out = []
    if log.exists():
        for line in log.read_text().splitlines():
            head, pid, at = line.rsplit("\t", 2)
            event, _, prompt = head.partition(" ")
            out.append(Request(event, prompt, int(pid), float(at)))
    return out


def requests(log: Path) -> collections.Counter[tuple[str, str]]:
    """(event, prompt) -> how many times the shared request log holds it."""
    return collections.Counter((r.event, r.prompt) for r in request_lines(log))


async def wait_until(predicate: Callable[[], bool], within_s: float = 30.0, what: str = "condition") -> None:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if predicate():
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"timed out after {within_s} s waiting for {what}")


class PausableProxy:
    """A loopback TCP proxy in front of PostgreSQL that the test can cut (bytes stop flowing) and restore.

    While paused it still accepts connections but forwards nothing either way, like a network
    partition: the kernel buffers what each side sends, and it all arrives when the link returns.
    `round_trips` counts requests: each time a client sends after the server last answered it.
    """

    def __init__(self, target_host: str, target_port: int, delay_s: float = 0.0) -> None:
        self.target = (target_host, target_port)
        self.delay_s = delay_s
        self.port = 0
        self.round_trips = 0
        self._open: asyncio.Event | None = None  # lives on the proxy's own loop
        self._loop: asyncio.AbstractEventLoop | None = None
        self._ready = threading.Event()
        self._server: asyncio.Server | None = None
        self._thread = threading.Thread(target=self._serve, daemon=True)

    def __enter__(self) -> PausableProxy:
        self._thread.start()
        self._ready.wait(10)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._loop is not None:
            asyncio.run_coroutine_threadsafe(self._close(), self._loop).result(10)
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)

    async def _close(self) -> None:
        if self._server is not None:
            self._server.close()
        tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def url(self, store_url: str) -> str:
        """`store_url` with its host and port pointed at this proxy."""
        from urllib.parse import urlsplit, urlunsplit

        parts = urlsplit(store_url)
        user = f"{parts.username}@" if parts.username else ""
        return urlunsplit(parts._replace(netloc=f"{user}127.0.0.1:{self.port}"))

    def _switch(self, open_: bool) -> None:
        async def flip() -> None:
            assert self._open is not None
            self._open.set() if open_ else self._open.clear()

        assert self._loop is not None
        asyncio.run_coroutine_threadsafe(flip(), self._loop).result(10)

    def pause(self) -> None:
        self._switch(False)

    def resume(self) -> None:
        self._switch(True)

    async def _gate(self) -> None:
        assert self._open is not None
        await self._open.wait()

    async def _pipe(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, turn: list[bool], asking: bool
    ) -> None:
        try:
            while True:
                await self._gate()
                data = await reader.read(65536)
                if not data:
                    break
                if asking and not turn[0]:
                    self.round_trips += 1  # the client speaks again after an answer: a new request
                turn[0] = asking
                await self._gate()  # read just before a cut: held until the link returns
                if self.delay_s:
                    await asyncio.sleep(self.delay_s)  # a slow link: every message waits this long each way
                writer.write(data)
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            with contextlib.suppress(Exception):
                writer.close()

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            writer.close()
            return
        turn = [False]  # whether the client spoke last on this connection
        await asyncio.gather(self._pipe(reader, up_writer, turn, True), self._pipe(up_reader, writer, turn, False))

    def _serve(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop

        async def start() -> None:
            self._open = asyncio.Event()
            self._open.set()
            self._server = server = await asyncio.start_server(self._client, "127.0.0.1", 0)
            self.port = server.sockets[0].getsockname()[1]
            self._ready.set()

        loop.run_until_complete(start())
        loop.run_forever()
        loop.close()
