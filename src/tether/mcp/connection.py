"""One live MCP server session for one run segment: started once, owned by one task, restarted once.

The SDK's client lives in task groups that must be entered and left by the same task, and a
transport failure cancels the task that entered them; so each session gets an owner task that
opens the client, lists the tools, and waits to be told to close. Callers in any agent's task send
requests through it and race them against the owner's end, so a server that dies mid-call gives a
typed error instead of a hang. The next call after a loss restarts the server, once: a restart
that fails leaves the connection broken for the rest of the segment.
"""

from __future__ import annotations

import asyncio
import contextlib
import tempfile
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TextIO, cast

from tether.contracts.errors import ConfigError
from tether.mcp.results import CallOutcome, outcome_of
from tether.mcp.transport import Transport, stderr_tail

if TYPE_CHECKING:
    from mcp import Client
    from mcp_types import RequestParamsMeta
    from mcp_types import Tool as McpTool

_PAGE_CAP = 100
_CLOSE_TIMEOUT_S = 15.0  # the SDK's own stdio shutdown escalates within ~6 s


@dataclass
class _Session:
    """One start of the server: its client, the owner task and why it ended, if it did."""

    errlog: TextIO
    """The server's stderr (a temporary file, read for error messages, closed with the session)."""
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    gone: asyncio.Event = field(default_factory=asyncio.Event)
    client: Client | None = None
    task: asyncio.Task[None] | None = None
    lost: str | None = None

    @property
    def alive(self) -> bool:
        return self.client is not None and self.lost is None and not self.gone.is_set()


class Connection:
    """A server for one segment; `start()` lists its tools, `call()` runs one, `close()` ends it."""

    def __init__(self, transport: Transport, *, start_timeout_s: float) -> None:
        self.transport = transport
        self.start_timeout_s = start_timeout_s
        self._session: _Session | None = None
        self._broken: str | None = None
        self._closed = False
        self._lock = asyncio.Lock()

    @property
    def name(self) -> str:
        return self.transport.describe()

    async def start(self) -> list[McpTool]:
        """Start the server and list its tools; a `ConfigError` naming it and its stderr if it cannot."""
        # Kept open past the session's start: its tail explains a failure; closed when the session ends.
        errlog = cast(TextIO, tempfile.TemporaryFile("w+", encoding="utf-8", prefix="tether-mcp-"))  # noqa: SIM115
        session = _Session(errlog)
        listed: asyncio.Future[list[McpTool]] = asyncio.get_running_loop().create_future()
        session.task = asyncio.create_task(self._own(session, listed), name=f"mcp: {self.name}")
        self._session = session
        try:
            async with asyncio.timeout(self.start_timeout_s):
                return await asyncio.shield(listed)
        except TimeoutError:
            problem = f"did not answer within {self.start_timeout_s:g}s"
        except ConfigError:
            await self._end(session)
            raise
        except Exception as exc:
            problem = f"failed to start: {_reason(exc)}"
        tail = stderr_tail(session.errlog)
        await self._end(session)
        raise ConfigError(
            f"MCP server `{self.name}` {problem}." + (f" Its stderr ends with:\n{tail}" if tail else "")
            + "\nCheck the command (run it by hand), its arguments and its environment.",
            server=self.name,
            stderr_tail=tail,
        )

    async def _own(self, session: _Session, listed: asyncio.Future[list[McpTool]]) -> None:
        """The owner task: open the client, list, wait for `stop`; record why it ended."""
        try:
            async with self.transport.open(session.errlog) as client:
                tools = await _list_all(client)
                session.client = client
                if not listed.done():
                    listed.set_result(tools)
                await session.stop.wait()
        except BaseException as exc:  # the owner reports every ending; it never raises
            session.lost = session.lost or _reason(exc)
            if not listed.done():
                listed.set_exception(exc if isinstance(exc, Exception) else ConnectionError(_reason(exc)))
        finally:
            session.gone.set()

    async def call(
        self, name: str, args: dict[str, Any], *, meta: dict[str, Any], timeout_s: float | None
    ) -> CallOutcome:
        """Call one tool; a lost server, a timeout and an `isError` result are outcomes, not raises."""
        live = await self._live()
        if isinstance(live, CallOutcome):
            return live
        assert live.client is not None
        wire_meta = cast("RequestParamsMeta", meta)
        request = asyncio.ensure_future(
            live.client.call_tool(name, args, read_timeout_seconds=timeout_s, meta=wire_meta)
        )
        ended = asyncio.ensure_future(live.gone.wait())
        try:
            backstop = timeout_s + 5.0 if timeout_s is not None else None  # the SDK's own timeout fires first
            done, _ = await asyncio.wait({request, ended}, timeout=backstop, return_when=asyncio.FIRST_COMPLETED)
        finally:
            ended.cancel()
            if not request.done():
                request.cancel()
                with contextlib.suppress(BaseException):
                    await request
        if request in done and request.cancelled():  # the transport tore the request down under us
            return await self._lost(live, name, live.lost or "the request was cancelled by the transport")
        if request in done:
            exc = request.exception()
            return outcome_of(request.result()) if exc is None else await self._failed(live, name, exc, timeout_s)
        if ended in done:
            return await self._lost(live, name, live.lost or "the connection ended")
        return _timeout(name, timeout_s)

    async def _failed(self, session: _Session, name: str, exc: BaseException, timeout_s: float | None) -> CallOutcome:
        from mcp import MCPError
        from mcp_types import CONNECTION_CLOSED, REQUEST_TIMEOUT
        from pydantic import ValidationError

        if isinstance(exc, MCPError) and exc.code == REQUEST_TIMEOUT:
            return _timeout(name, timeout_s)
        if isinstance(exc, MCPError) and exc.code != CONNECTION_CLOSED:
            return CallOutcome("error", error=f"MCP server `{self.name}` rejected the call to {name!r}: {exc}")
        if isinstance(exc, ValidationError):
            return CallOutcome("error", error=f"MCP server `{self.name}` answered {name!r} with an invalid result")
        return await self._lost(session, name, _reason(exc))

    async def _lost(self, session: _Session, name: str, reason: str) -> CallOutcome:
        session.lost = session.lost or reason
        tail = stderr_tail(session.errlog)
        await self._end(session)
        return CallOutcome(
            "error",
            error=(
                f"[mcp server lost] MCP server `{self.name}` exited or disconnected during {name!r} ({reason}); "
                "the call's effect is unknown. The next call restarts the server."
                + (f" Its stderr ends with:\n{tail}" if tail else "")
            ),
        )

    async def _live(self) -> _Session | CallOutcome:
        """The running session, restarting a lost server once; a failed restart breaks the connection."""
        async with self._lock:
            session = self._session
            if session is not None and session.alive:
                return session
            if self._closed:
                return CallOutcome("error", error=f"MCP server `{self.name}` is closed: its run segment ended")
            if self._broken is None:
                if session is not None:
                    await self._end(session)
                try:
                    await self.start()
                    assert self._session is not None
                    return self._session
                except ConfigError as exc:
                    self._broken = f"[mcp server lost] the restart failed, so it stays down for this run: {exc}"
            return CallOutcome("error", error=self._broken)

    async def close(self) -> None:
        """Stop the server (stdin closed, then the SDK escalates to a kill); idempotent."""
        self._closed = True
        if self._session is not None:
            await self._end(self._session)

    async def _end(self, session: _Session) -> None:
        session.stop.set()
        task = session.task
        try:
            if task is not None and not task.done():
                await asyncio.wait_for(asyncio.shield(task), _CLOSE_TIMEOUT_S)
        except TimeoutError:
            assert task is not None
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
        finally:
            if task is None or task.done():
                session.errlog.close()


async def _list_all(client: Client) -> list[McpTool]:
    tools: list[McpTool] = []
    cursor: str | None = None
    for _ in range(_PAGE_CAP):
        page = await client.list_tools(cursor=cursor)
        tools.extend(page.tools)
        cursor = page.next_cursor
        if cursor is None:
            break
    return tools


def _timeout(name: str, timeout_s: float | None) -> CallOutcome:
    return CallOutcome(
        "timeout", error=f"MCP tool {name!r} did not answer within {timeout_s}s; the server was asked to cancel it"
    )


def _reason(exc: BaseException) -> str:
    """The innermost causes of an exception (group) in one line, for messages."""
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(_reason(e) for e in exc.exceptions)
    if isinstance(exc, asyncio.CancelledError):
        return "the connection was cancelled"
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
