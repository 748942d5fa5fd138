"""How tether reaches an MCP server: a stdio child process or a streamable-HTTP endpoint.

Each transport opens an SDK `Client` (the `mcp` package is imported here, lazily) and describes
itself for error messages; a `ServerWatch` is what the engine sees of one start (the step it is on,
the server's stderr and, for stdio, its pid and exit code). On Linux the stdio child runs under a
tiny relay that asks the kernel to SIGKILL it when the engine dies (`PR_SET_PDEATHSIG`), forks the
real command with the same request towards itself, and records the command's exit code before it
exits too, so a crashed engine leaves no server behind and a server that quits is named with its code.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import sys
import tempfile
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Literal, Protocol, TextIO, cast

from tether.mcp.errors import McpStartError

if TYPE_CHECKING:
    from mcp import Client, StdioServerParameters
    from mcp.client._transport import TransportStreams

_STDERR_TAIL = 2_000

# Runs before the server (argv: engine pid, status file, command...). The relay dies with the engine,
# refuses to start if the engine is gone already, runs the command as its child (which dies with the
# relay), and writes "pid P" then "exit N" to the status file. It keeps stdout open until it has
# written the exit code, so the engine reads the code once it sees the server's stdout close.
_SHIM = (
    "import ctypes, os, signal, sys\n"
    "prctl = ctypes.CDLL(None, use_errno=True).prctl\n"
    "prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG\n"
    "relay = os.getpid()\n"
    "if os.getppid() != int(sys.argv[1]):\n"
    "    sys.exit('tether: the engine exited before the MCP server started')\n"
    "status = open(sys.argv[2], 'w')\n"
    "status.write(f'pid {relay}\\n'); status.flush()\n"
    "child = os.fork()\n"
    "if child == 0:\n"
    "    prctl(1, signal.SIGKILL)\n"
    "    if os.getppid() != relay:\n"
    "        os._exit(1)\n"
    "    try:\n"
    "        os.execv(sys.argv[3], sys.argv[3:])\n"
    "    except OSError as exc:\n"
    "        sys.stderr.write(f'tether: cannot run {sys.argv[3]}: {exc}\\n'); sys.stderr.flush()\n"
    "        os._exit(127)\n"
    "code = os.waitstatus_to_exitcode(os.waitpid(child, 0)[1])\n"
    "status.write(f'exit {code}\\n'); status.close()\n"
    "os._exit(code if code >= 0 else 128 - code)\n"
)

Step = Literal["spawn", "handshake", "list", "ready"]
"""Where a start is: spawning the command, the `initialize` handshake, listing tools, serving."""


class ServerWatch:
    """What the engine sees of one server start: the step it is on, its stderr and its exit status."""

    def __init__(self) -> None:
        self.step: Step = "spawn"
        # Kept open past the start: their contents explain a failure; closed when the session ends.
        self.errlog = cast(TextIO, tempfile.TemporaryFile("w+", encoding="utf-8", prefix="tether-mcp-"))  # noqa: SIM115
        fd, path = tempfile.mkstemp(prefix="tether-mcp-status-")
        os.close(fd)
        self.status_path = Path(path)

    def stderr_tail(self) -> str:
        """The last lines the server wrote to its stderr (what it said before failing)."""
        return stderr_tail(self.errlog)

    def _status(self, key: str) -> int | None:
        try:
            lines = self.status_path.read_text().splitlines()
        except OSError:
            return None
        values = [line.split()[1] for line in lines if line.startswith(key + " ") and len(line.split()) == 2]
        return int(values[-1]) if values and values[-1].lstrip("-").isdigit() else None

    def exit_code(self) -> int | None:
        """The command's exit code (negative: the signal that killed it), once the relay recorded it."""
        return self._status("exit")

    def kill(self) -> None:
        """SIGKILL the relay's process group now (a server that missed its start gets no grace period)."""
        pid = self._status("pid")
        if pid is None or self.exit_code() is not None or not _is_our_child(pid):
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)

    def close(self) -> None:
        self.errlog.close()
        self.status_path.unlink(missing_ok=True)


def _is_our_child(pid: int) -> bool:
    """True while `pid` is this process's unreaped child (never signal a reused pid)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return int(stat.rsplit(")", 1)[1].split()[1]) == os.getpid()


class Transport(Protocol):
    """Opens SDK client sessions (configuration only, so runs can share it); `describe()` never shows secrets."""

    def describe(self) -> str: ...
    def open(self, watch: ServerWatch) -> AbstractAsyncContextManager[Client]:
        """One session; it moves `watch.step` past `spawn`, and a child process writes its stderr to `watch.errlog`."""
        ...


def stderr_tail(errlog: TextIO | None) -> str:
    """The last lines a server wrote to its stderr file (what it said before failing)."""
    if errlog is None or errlog.closed:
        return ""
    fd = errlog.fileno()
    size = os.fstat(fd).st_size
    data = os.pread(fd, _STDERR_TAIL, max(0, size - _STDERR_TAIL))
    return data.decode("utf-8", errors="replace").strip()


class StdioTransport:
    """A server started as a child process, spoken to over its stdin and stdout."""

    def __init__(
        self, command: str, args: Sequence[str], env: Mapping[str, str] | None, cwd: str | os.PathLike[str] | None
    ) -> None:
        self.command = command
        self.args = [str(a) for a in args]
        self.env = dict(env) if env is not None else None
        self.cwd = os.fspath(cwd) if cwd is not None else None

    def describe(self) -> str:
        return " ".join([self.command, *self.args])

    def executable(self) -> str:
        """The command resolved on PATH (the server's PATH when `env` sets one)."""
        path = (self.env or {}).get("PATH", os.environ.get("PATH"))
        found = shutil.which(self.command, path=path)
        if found is None:
            raise McpStartError(
                f"MCP server command {self.command!r} was not found on PATH; install it or pass its full path "
                f"to tether.mcp.stdio(...)",
                command=self.command, server=self.describe(), cause="not-found",
            )
        return os.path.abspath(found)

    @asynccontextmanager
    async def open(self, watch: ServerWatch) -> AsyncIterator[Client]:
        from mcp import Client, StdioServerParameters

        exe = self.executable()
        command, args = exe, self.args
        if sys.platform.startswith("linux"):
            command, args = sys.executable, ["-S", "-c", _SHIM, str(os.getpid()), str(watch.status_path), exe, *args]
        params = StdioServerParameters(command=command, args=args, env=self.env, cwd=self.cwd)
        async with Client(_spawned(params, watch), cache=None) as client:
            yield client


@asynccontextmanager
async def _spawned(params: StdioServerParameters, watch: ServerWatch) -> AsyncIterator[TransportStreams]:
    """The SDK's stdio transport, marking the start's step once the command runs."""
    from mcp.client.stdio import stdio_client

    async with stdio_client(params, errlog=watch.errlog) as streams:
        watch.step = "handshake"
        yield streams


class HttpTransport:
    """A server reached over streamable HTTP; `headers` (auth) go on every request and nowhere else."""

    def __init__(self, url: str, headers: Mapping[str, str] | None) -> None:
        self.url = url
        self.headers = dict(headers or {})

    def describe(self) -> str:
        return self.url

    @asynccontextmanager
    async def open(self, watch: ServerWatch) -> AsyncIterator[Client]:
        import httpx2
        from mcp import Client
        from mcp.client.streamable_http import streamable_http_client

        watch.step = "handshake"  # nothing to spawn: the first request is the handshake
        # The SDK's defaults: a long read timeout, because a server may hold a response stream open.
        timeout = httpx2.Timeout(30.0, read=300.0)
        async with (
            httpx2.AsyncClient(headers=self.headers, timeout=timeout) as http,
            Client(streamable_http_client(self.url, http_client=http), cache=None) as client,
        ):
            yield client
