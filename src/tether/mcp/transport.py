"""How tether reaches an MCP server: a stdio child process or a streamable-HTTP endpoint.

Each transport opens an SDK `Client` (the `mcp` package is imported here, lazily) and describes
itself for error messages. The stdio child runs under a tiny shim that asks Linux to SIGKILL it
when the engine dies (`PR_SET_PDEATHSIG`), so a crashed engine leaves no server behind; the shim
then `exec`s the real command, so the server keeps the pid the engine spawned.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import TYPE_CHECKING, Protocol, TextIO

from tether.contracts.errors import ConfigError

if TYPE_CHECKING:
    from mcp import Client

_STDERR_TAIL = 2_000

# Runs before the server: die with the parent (Linux), refuse to start if the parent is gone already.
_SHIM = (
    "import ctypes, os, signal, sys\n"
    "ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG\n"
    "if os.getppid() != int(sys.argv[1]):\n"
    "    sys.exit('tether: the engine exited before the MCP server started')\n"
    "os.execv(sys.argv[2], sys.argv[2:])\n"
)


class Transport(Protocol):
    """Opens SDK client sessions (configuration only, so runs can share it); `describe()` never shows secrets."""

    def describe(self) -> str: ...
    def open(self, errlog: TextIO) -> AbstractAsyncContextManager[Client]:
        """One session; a child process writes its stderr to `errlog`."""
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
            raise ConfigError(
                f"MCP server command {self.command!r} was not found on PATH; install it or pass its full path "
                f"to tether.mcp.stdio(...)",
                command=self.command,
            )
        return os.path.abspath(found)

    @asynccontextmanager
    async def open(self, errlog: TextIO) -> AsyncIterator[Client]:
        from mcp import Client, StdioServerParameters
        from mcp.client.stdio import stdio_client

        exe = self.executable()
        command, args = exe, self.args
        if sys.platform.startswith("linux"):
            command, args = sys.executable, ["-S", "-c", _SHIM, str(os.getpid()), exe, *self.args]
        params = StdioServerParameters(command=command, args=args, env=self.env, cwd=self.cwd)
        async with Client(stdio_client(params, errlog=errlog), cache=None) as client:
            yield client


class HttpTransport:
    """A server reached over streamable HTTP; `headers` (auth) go on every request and nowhere else."""

    def __init__(self, url: str, headers: Mapping[str, str] | None) -> None:
        self.url = url
        self.headers = dict(headers or {})

    def describe(self) -> str:
        return self.url

    @asynccontextmanager
    async def open(self, errlog: TextIO) -> AsyncIterator[Client]:
        import httpx2
        from mcp import Client
        from mcp.client.streamable_http import streamable_http_client

        # The SDK's defaults: a long read timeout, because a server may hold a response stream open.
        timeout = httpx2.Timeout(30.0, read=300.0)
        async with (
            httpx2.AsyncClient(headers=self.headers, timeout=timeout) as http,
            Client(streamable_http_client(self.url, http_client=http), cache=None) as client,
        ):
            yield client
