"""One live MCP server session for one run segment: started once, owned by one task, restarted once.

The SDK's client lives in task groups that must be entered and left by the same task, and a
transport failure cancels the task that entered them; so each session gets an owner task that
opens the client, lists the tools, and waits to be told to close. Callers in any agent's task send
requests through it and race them against the owner's end, so a server that dies mid-call gives a
typed error instead of a hang. The next call after a loss restarts the server, once: a restart
that fails leaves the connection broken for the rest of the segment.

One deadline covers a start (spawn, the `initialize` handshake, listing tools): when it passes, the
server is killed at once and the error names the step it was on. The caps (`max_tools`,
`max_result_bytes`) are checked here, where the listing and each result arrive.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from tether.contracts.errors import ConfigError
from tether.mcp.errors import McpStartError
from tether.mcp.results import CallOutcome, outcome_of, result_size
from tether.mcp.transport import ServerWatch, Step, Transport

if TYPE_CHECKING:
    from mcp import Client
    from mcp_types import CallToolResult, RequestParamsMeta
    from mcp_types import Tool as McpTool

_PAGE_CAP = 100
_CLOSE_TIMEOUT_S = 15.0  # the SDK's own stdio shutdown escalates within ~6 s


@dataclass
class _Session:
    """One start of the server: its client, the owner task and why it ended, if it did."""

    watch: ServerWatch
    """The start's step, the server's stderr and exit code (read for error messages, closed with the session)."""
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

    def __init__(
        self, transport: Transport, *, start_timeout_s: float, max_tools: int | None = None,
        max_result_bytes: int | None = None,
    ) -> None:
        self.transport = transport
        self.start_timeout_s = start_timeout_s
        self.max_tools = max_tools
        self.max_result_bytes = max_result_bytes
        self._session: _Session | None = None
        self._broken: str | None = None
        self._closed = False
        self._lock = asyncio.Lock()

    @property
    def name(self) -> str:
        return self.transport.describe()

    async def start(self) -> list[McpTool]:
        """Start the server and list its tools within `start_timeout_s`; an `McpStartError` naming why not."""
        session = _Session(ServerWatch())
        listed: asyncio.Future[list[McpTool]] = asyncio.get_running_loop().create_future()
        session.task = asyncio.create_task(self._own(session, listed), name=f"mcp: {self.name}")
        self._session = session
        try:
            async with asyncio.timeout(self.start_timeout_s):
                return await asyncio.shield(listed)
        except TimeoutError:
            error = self._missed_deadline(session.watch)
        except McpStartError as exc:
            error = exc
        except Exception as exc:
            error = self._failed_start(session.watch, exc)
        listed.cancel()  # the owner reports nothing more
        session.watch.kill()  # a server that failed its start gets no grace period
        await self._end(session, now=True)
        raise error

    def _missed_deadline(self, watch: ServerWatch) -> McpStartError:
        doing = {"spawn": "was not running", "handshake": "did not answer `initialize`",
                 "list": "did not finish listing its tools"}.get(watch.step, "did not start")
        return self._start_error(
            watch, f"{doing} within {self.start_timeout_s:g}s (start_timeout_s), so it was killed",
            "Raise start_timeout_s= if the server is slow to start, or run the command by hand to see where it waits.",
            cause="timeout", step=watch.step, start_timeout_s=self.start_timeout_s,
        )

    def _failed_start(self, watch: ServerWatch, exc: Exception) -> McpStartError:
        code = watch.exit_code()
        advice = "Check the command (run it by hand), its arguments and its environment."
        if code is None:
            return self._start_error(watch, f"failed to start: {_reason(exc)}", advice, cause="failed", step=watch.step)
        when = _WHEN[watch.step]
        ended = f"exited with code {code}" if code >= 0 else f"was killed by {_signal_name(-code)}"
        return self._start_error(watch, f"{ended} {when}", advice, cause="exited", step=watch.step, exit_code=code)

    def _start_error(self, watch: ServerWatch, problem: str, advice: str, **data: Any) -> McpStartError:
        tail = watch.stderr_tail()
        said = f" Its stderr ends with:\n{tail}" if tail else ""
        return McpStartError(
            f"MCP server `{self.name}` {problem}.{said}\n{advice}",
            server=self.name, stderr_tail=tail, **data,
        )

    async def _own(self, session: _Session, listed: asyncio.Future[list[McpTool]]) -> None:
        """The owner task: open the client, list, wait for `stop`; record why it ended."""
        try:
            async with self.transport.open(session.watch) as client:
                session.watch.step = "list"
                try:
                    tools = await self._list_all(client)
                except McpStartError as exc:  # reported as it is, not wrapped by the transport's task groups
                    if not listed.done():
                        listed.set_exception(exc)
                    return
                session.watch.step = "ready"
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

    async def _list_all(self, client: Client) -> list[McpTool]:
        """Every page of the listing; past `max_tools`, an `McpStartError` before the next page is read."""
        tools: list[McpTool] = []
        cursor: str | None = None
        for _ in range(_PAGE_CAP):
            page = await client.list_tools(cursor=cursor)
            tools.extend(page.tools)
            if self.max_tools is not None and len(tools) > self.max_tools:
                more = "at least " if page.next_cursor is not None else ""
                raise McpStartError(
                    f"MCP server `{self.name}` lists {more}{len(tools)} tools, more than max_tools={self.max_tools}; "
                    "the engine stopped reading its listing. Raise max_tools= on the MCP toolset if you trust "
                    "this server (the cap counts its whole listing, before allow=/deny=).",
                    server=self.name, cause="max-tools", max_tools=self.max_tools, tools=len(tools),
                )
            cursor = page.next_cursor
            if cursor is None:
                break
        return tools

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
            if exc is not None:
                return await self._failed(live, name, exc, timeout_s)
            return self._outcome(name, request.result())
        if ended in done:
            return await self._lost(live, name, live.lost or "the connection ended")
        return _timeout(name, timeout_s)

    def _outcome(self, name: str, result: CallToolResult) -> CallOutcome:
        """The result the model reads, or a typed error when it is larger than `max_result_bytes` (then dropped)."""
        cap = self.max_result_bytes
        size = result_size(result, cap)
        if cap is None or size <= cap:
            return outcome_of(result)
        return CallOutcome(
            "error",
            error=(
                f"[max_result_bytes] MCP tool {name!r} of server `{self.name}` answered more than "
                f"max_result_bytes={cap} bytes (at least {size}); the result was dropped. Ask the tool for less "
                "(a narrower query, a page), or raise max_result_bytes= on the MCP toolset."
            ),
            limit="max_result_bytes",
        )

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
        code = session.watch.exit_code()
        if code is not None and session.lost is None:
            reason = f"{reason}; the command exited with code {code}"
        session.lost = session.lost or reason
        tail = session.watch.stderr_tail()
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

    async def _end(self, session: _Session, *, now: bool = False) -> None:
        """Stop the session: gracefully (stdin closed, then the SDK escalates), or `now` by cancelling its owner."""
        session.stop.set()
        task = session.task
        try:
            if task is not None and not task.done():
                if now:
                    task.cancel()
                await asyncio.wait_for(asyncio.shield(task), _CLOSE_TIMEOUT_S)
        except TimeoutError:
            assert task is not None
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
        finally:
            if task is None or task.done():
                session.watch.close()


_WHEN: dict[Step, str] = {
    "spawn": "as it started", "handshake": "before answering `initialize`", "list": "while listing its tools",
    "ready": "after listing its tools",
}


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


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
