"""`McpToolset`: an MCP server as a tool source, and its tools as ordinary `tether.Tool`s.

The toolset is configuration; the live server belongs to a run segment. The first agent of a
segment that uses the toolset starts the server and lists its tools; every later agent of that
segment reuses the listing, and the segment's end closes the server. Each listed tool keeps the
server's name (optionally prefixed), description and input schema, and runs through the `mcp`
executor, so the permission chain, approvals, tool budgets and the effect ledger apply as to any
tool.
"""

from __future__ import annotations

import asyncio
from collections.abc import Collection, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from fnmatch import fnmatchcase
from typing import TYPE_CHECKING, Any

from tether.contracts.errors import ConfigError, TetherError
from tether.contracts.protocols import ExecRequest, ExecResult
from tether.mcp.connection import Connection
from tether.mcp.transport import Transport
from tether.tools.definition import Tool

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable

    from mcp_types import Tool as McpTool

IDEMPOTENCY_META = "tether/idempotency-key"
"""The `_meta` key that carries the call's idempotency key (the same on every redispatch)."""
ATTEMPT_META = "tether/attempt-id"
"""The `_meta` key that carries the ledger's attempt id of this dispatch."""

Approval = bool | Collection[str] | None
"""`needs_approval=`: None follows `destructiveHint`; True/False for every tool; or names/globs."""

MAX_TOOLS = 256
"""`max_tools=`'s default: the most tools a server may list (its whole listing, before `allow`/`deny`)."""
MAX_RESULT_BYTES = 16 * 1024**2
"""`max_result_bytes=`'s default (16 MiB): the largest tool result kept; a larger one becomes a tool error."""


class McpToolset:
    """An MCP server whose tools an agent may use; pass it in `tools=` like a `tether.Tool`."""

    def __init__(
        self,
        transport: Transport,
        *,
        prefix: str | None = None,
        allow: Collection[str] | None = None,
        deny: Collection[str] | None = None,
        timeout_s: float | None = 30.0,
        start_timeout_s: float = 60.0,
        needs_approval: Approval = None,
        units: float | None = None,
        max_tools: int | None = MAX_TOOLS,
        max_result_bytes: int | None = MAX_RESULT_BYTES,
    ) -> None:
        for option, value in (("allow", allow), ("deny", deny), ("needs_approval", needs_approval)):
            if isinstance(value, str):
                raise ConfigError(f"{option}= takes a list of tool names or globs, not the string {value!r}")
        for option, cap in (("max_tools", max_tools), ("max_result_bytes", max_result_bytes)):
            if cap is not None and (isinstance(cap, bool) or not isinstance(cap, int) or cap < 1):
                raise ConfigError(f"{option}= takes a whole number of at least 1 (or None for no cap), not {cap!r}",
                                  option=option)
        _check_seconds("start_timeout_s", start_timeout_s, optional=False)
        _check_seconds("timeout_s", timeout_s, optional=True)
        self.transport = transport
        self.prefix = prefix
        self.allow = tuple(allow) if allow is not None else None
        self.deny = tuple(deny or ())
        self.timeout_s = timeout_s
        self.start_timeout_s = start_timeout_s
        self.needs_approval = needs_approval
        self.units = units
        self.max_tools = max_tools
        self.max_result_bytes = max_result_bytes
        self._live: dict[AsyncExitStack, asyncio.Future[list[Tool]]] = {}

    def __repr__(self) -> str:
        return f"MCP server `{self.transport.describe()}`"

    async def tools(self, resources: AsyncExitStack) -> Sequence[Tool]:
        """This segment's tools: the server is started (once per segment) on first use."""
        listing = self._live.get(resources)
        if listing is None or (listing.done() and (listing.cancelled() or listing.exception() is not None)):
            connection = Connection(self.transport, start_timeout_s=self.start_timeout_s, max_tools=self.max_tools,
                                    max_result_bytes=self.max_result_bytes)
            resources.push_async_callback(self._close, resources, connection)
            listing = asyncio.ensure_future(self._list(connection))
            self._live[resources] = listing
        return await asyncio.shield(listing)

    async def _list(self, connection: Connection) -> list[Tool]:
        listed = await connection.start()
        return [self._tool(connection, t) for t in listed if self._selected(t.name)]

    async def _close(self, resources: AsyncExitStack, connection: Connection) -> None:
        listing = self._live.pop(resources, None)
        if listing is not None and not listing.done():
            listing.cancel()
        await connection.close()

    @asynccontextmanager
    async def open(self) -> AsyncIterator[Sequence[Tool]]:
        """Outside a run: start the server, yield its tools, close it (for inspection and tests)."""
        async with AsyncExitStack() as resources:
            yield await self.tools(resources)

    def _selected(self, name: str) -> bool:
        if self.allow is not None and not any(fnmatchcase(name, p) for p in self.allow):
            return False
        return not any(fnmatchcase(name, p) for p in self.deny)

    def _approval(self, name: str, destructive: bool) -> bool:
        if self.needs_approval is None:
            return destructive
        if isinstance(self.needs_approval, bool):
            return self.needs_approval
        return any(fnmatchcase(name, p) for p in self.needs_approval)

    def _tool(self, connection: Connection, listed: McpTool) -> Tool:
        hints = listed.annotations
        read_only = bool(hints and hints.read_only_hint)
        executor = McpExecutor(connection, listed.name)
        name = f"{self.prefix}_{listed.name}" if self.prefix else listed.name
        return Tool(
            name,
            listed.description or "",
            listed.input_schema,
            _direct_call(executor, name, self.timeout_s),
            needs_approval=self._approval(listed.name, bool(hints and hints.destructive_hint)),
            idempotent=read_only or bool(hints and hints.idempotent_hint),
            parallel_safe=read_only,
            executor=executor,
            timeout_s=self.timeout_s,
            units=self.units,
        )


class McpExecutor:
    """The `mcp` executor: one MCP tool of one live server, called with the idempotency key in `_meta`."""

    name = "mcp"

    def __init__(self, connection: Connection, remote_name: str) -> None:
        self.connection = connection
        self.remote_name = remote_name

    async def run(self, request: ExecRequest, fn: Callable[..., Any] | None = None) -> ExecResult:
        loop = asyncio.get_running_loop()
        started = loop.time()
        meta = {IDEMPOTENCY_META: request.idempotency_key, ATTEMPT_META: request.attempt_id}
        done = await self.connection.call(self.remote_name, dict(request.args), meta=meta, timeout_s=request.timeout_s)
        return ExecResult(
            outcome=done.outcome,
            value=done.value,
            error=done.error,
            limit=done.limit,
            duration_ms=(loop.time() - started) * 1000.0,
        )


def _direct_call(executor: McpExecutor, name: str, timeout_s: float | None) -> Callable[..., Any]:
    """The tool's function, for a direct call outside the engine (no ledger); a failure raises."""

    async def call_mcp_tool(**args: Any) -> Any:
        result = await executor.run(ExecRequest(tool=name, target="", args=args, timeout_s=timeout_s))
        if result.outcome != "ok":
            raise McpToolError(result.error or f"MCP tool {name!r} ended {result.outcome}", outcome=result.outcome,
                               limit=result.limit)
        return result.value

    return call_mcp_tool


def _check_seconds(option: str, value: object, *, optional: bool) -> None:
    if value is None and optional:
        return
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < float("inf"):
        none = " (or None to wait as long as the server takes)" if optional else ""
        raise ConfigError(f"{option}= takes a number of seconds above 0{none}, not {value!r}", option=option)


class McpToolError(TetherError):
    """A direct (unledgered) call of an MCP tool failed: an `isError` result, a timeout, a lost server."""

    code = "mcp-tool"
