"""MCP tool sources: an MCP server's tools as ordinary tether tools (`pip install tether[mcp]`).

`tether.mcp.stdio(...)` and `tether.mcp.http(...)` return an `McpToolset` that goes into `tools=`
next to your own tools. The official `mcp` SDK is imported only when a server is started, so
`import tether` never needs it. See docs/mcp.md.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Mapping

from tether.mcp.errors import McpStartError, StartCause
from tether.mcp.source import ToolLike, ToolSource, resolve_tools
from tether.mcp.toolset import (
    ATTEMPT_META,
    IDEMPOTENCY_META,
    MAX_RESULT_BYTES,
    MAX_TOOLS,
    Approval,
    McpExecutor,
    McpToolError,
    McpToolset,
)
from tether.mcp.transport import HttpTransport, StdioTransport


def stdio(
    command: str,
    *args: str | os.PathLike[str],
    env: Mapping[str, str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
    prefix: str | None = None,
    allow: Collection[str] | None = None,
    deny: Collection[str] | None = None,
    timeout_s: float | None = 30.0,
    start_timeout_s: float = 60.0,
    needs_approval: Approval = None,
    units: float | None = None,
    max_tools: int | None = MAX_TOOLS,
    max_result_bytes: int | None = MAX_RESULT_BYTES,
) -> McpToolset:
    """An MCP server run as a child process (`command args...`) and spoken to over stdio.

    `env` is added to the SDK's minimal inherited environment (PATH, HOME, ...); `allow`/`deny`
    are name globs over the server's tool names; `prefix` renames each tool to `prefix_name`;
    `timeout_s` bounds each call and `start_timeout_s` the whole start (spawn, `initialize`, listing);
    `needs_approval` overrides the `destructiveHint` annotation; `max_tools` and `max_result_bytes`
    cap the listing and each result (docs/mcp.md, *Caps*).
    """
    transport = StdioTransport(command, [os.fspath(a) for a in args], env, cwd)
    return McpToolset(
        transport, prefix=prefix, allow=allow, deny=deny, timeout_s=timeout_s, start_timeout_s=start_timeout_s,
        needs_approval=needs_approval, units=units, max_tools=max_tools, max_result_bytes=max_result_bytes,
    )


def http(
    url: str,
    *,
    headers: Mapping[str, str] | None = None,
    prefix: str | None = None,
    allow: Collection[str] | None = None,
    deny: Collection[str] | None = None,
    timeout_s: float | None = 30.0,
    start_timeout_s: float = 60.0,
    needs_approval: Approval = None,
    units: float | None = None,
    max_tools: int | None = MAX_TOOLS,
    max_result_bytes: int | None = MAX_RESULT_BYTES,
) -> McpToolset:
    """An MCP server reached over streamable HTTP at `url`; `headers` (e.g. auth) are never stored."""
    return McpToolset(
        HttpTransport(url, headers), prefix=prefix, allow=allow, deny=deny, timeout_s=timeout_s,
        start_timeout_s=start_timeout_s, needs_approval=needs_approval, units=units, max_tools=max_tools,
        max_result_bytes=max_result_bytes,
    )


__all__ = [
    "ATTEMPT_META",
    "IDEMPOTENCY_META",
    "MAX_RESULT_BYTES",
    "MAX_TOOLS",
    "Approval",
    "McpExecutor",
    "McpStartError",
    "McpToolError",
    "McpToolset",
    "StartCause",
    "ToolLike",
    "ToolSource",
    "http",
    "resolve_tools",
    "stdio",
]
