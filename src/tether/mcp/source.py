"""Tool sources: objects that become tools when an agent using them is invoked (MCP servers).

`ctx.agent(tools=[...])` and agent profiles take `Tool`s and tool sources side by side; the engine
flattens them with `resolve_tools` before it computes the agent's identity, so the toolset hash
covers what the source listed. `resources` is the run segment's exit stack: a source opens
whatever it needs there (a server process, a connection) and it is closed when the segment ends.
`toolset_record`/`toolset_changes` let a resume name the tools whose change made an agent miss.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence
from contextlib import AsyncExitStack
from typing import Any, Protocol, runtime_checkable

from tether.contracts.entries import JournalEntry
from tether.contracts.errors import ConfigError
from tether.journal.canonical import content_key
from tether.tools.definition import Tool, toolset_hash


@runtime_checkable
class ToolSource(Protocol):
    """Lists its tools for one run segment, opening what they need on `resources`."""

    async def tools(self, resources: AsyncExitStack) -> Sequence[Tool]: ...


ToolLike = Tool | ToolSource
"""What `tools=` takes: a `Tool` or a tool source such as `tether.mcp.stdio(...)`."""


async def resolve_tools(items: Iterable[ToolLike], resources: AsyncExitStack) -> list[Tool]:
    """The tools of `items` in order, sources listed (concurrently); a name clash is a `ConfigError`."""
    items = list(items)
    if all(isinstance(item, Tool) for item in items):
        return [item for item in items if isinstance(item, Tool)]
    for item in items:
        if not isinstance(item, Tool | ToolSource):
            raise ConfigError(
                f"tools= takes tether.Tool objects and tool sources (tether.mcp.stdio/http), "
                f"not {type(item).__name__}: wrap a function with @tether.tool first",
                item=repr(item)[:200],
            )
    sources = [item for item in items if not isinstance(item, Tool)]
    listings = await asyncio.gather(*(source.tools(resources) for source in sources))
    by_source = {id(source): list(listing) for source, listing in zip(sources, listings, strict=True)}
    out: dict[str, tuple[Tool, str]] = {}
    for item in items:
        where = "your tools" if isinstance(item, Tool) else repr(item)
        for tool in [item] if isinstance(item, Tool) else by_source[id(item)]:
            seen = out.get(tool.name)
            if seen is not None and seen[0] is not tool:
                raise ConfigError(
                    f"two tools are named {tool.name!r} (from {seen[1]} and from {where}); a model cannot "
                    "tell them apart. Pass prefix= to the MCP toolset, or allow=/deny= to drop one.",
                    tool=tool.name,
                )
            out.setdefault(tool.name, (tool, where))
    return [tool for tool, _ in out.values()]


def toolset_record(tools: Sequence[Tool]) -> dict[str, Any]:
    """The toolset's hash and one digest per tool (kept on the agent's running entry)."""
    return {"hash": toolset_hash(tools), "tools": {t.name: toolset_hash([t]) for t in tools}}


def toolset_changes(
    entries: Iterable[JournalEntry], scope: str, ident: dict[str, Any], tools: Sequence[Tool]
) -> tuple[int, list[str]] | None:
    """An earlier agent entry that differs from `ident` only by its toolset: its seq and the changed tools."""
    for e in entries:
        if not (e.kind == "agent" and e.ref is None and e.scope == scope and isinstance(e.value, dict)):
            continue
        record = e.value.get("toolset")
        if not isinstance(record, dict) or record.get("hash") == ident["toolset_hash"]:
            continue
        if content_key({**ident, "toolset_hash": record.get("hash")}) != e.key:
            continue
        before, now = dict(record.get("tools") or {}), toolset_record(tools)["tools"]
        return e.seq or 0, sorted(n for n in before.keys() | now.keys() if before.get(n) != now.get(n))
    return None
