"""An MCP server the tests start themselves (official SDK), over stdio or streamable HTTP.

`python server_app.py stdio` or `python server_app.py http PORT`. Every tool call appends one JSON
line to $TETHER_TEST_CALLS (tool, idempotency key, pid), so tests count real server calls; the
server appends its pid to $TETHER_TEST_PIDS when it starts. With $TETHER_TEST_START_ONCE (a path), a
second start fails, saying so on stderr. With $TETHER_TEST_STUBBORN, the stdio server keeps running after
its stdin closes (only a signal stops it).
"""

from __future__ import annotations

import base64
import json
import os
import sys
import time
from typing import Any

import anyio
from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import (
    BlobResourceContents,
    CallToolResult,
    EmbeddedResource,
    ImageContent,
    ResourceLink,
    TextContent,
    TextResourceContents,
    ToolAnnotations,
)

IDEMPOTENCY_META = "tether/idempotency-key"
PIXEL = base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"\x00" * 24).decode()

server = MCPServer("tether-test", version="1.0")


def _record(tool: str, ctx: Context, **extra: Any) -> dict[str, Any]:
    meta = dict(ctx.request_context.meta or {})
    row = {"tool": tool, "key": meta.get(IDEMPOTENCY_META), "pid": os.getpid(), **extra}
    path = os.environ.get("TETHER_TEST_CALLS")
    if path:
        with open(path, "a") as f:
            f.write(json.dumps(row) + "\n")
    return row


def _rows() -> list[dict[str, Any]]:
    path = os.environ.get("TETHER_TEST_CALLS")
    if not path or not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f.read().splitlines()]


@server.tool(description=os.environ.get("TETHER_TEST_ECHO_DOC", "Echo the text back, with the server's pid and key."),
             annotations=ToolAnnotations(read_only_hint=True))
def echo(text: str, ctx: Context) -> str:
    row = _record("echo", ctx)
    return json.dumps({"text": text, "pid": row["pid"], "key": row["key"]})


@server.tool(description="Always fails with the given reason.")
def fail(reason: str, ctx: Context) -> str:
    _record("fail", ctx)
    raise ToolError(f"refused: {reason}")


@server.tool(description="Sleep for some seconds, then answer.")
async def slow(seconds: float, ctx: Context) -> str:
    _record("slow", ctx)
    await anyio.sleep(seconds)
    return f"slept {seconds}s"


@server.tool(description="Wait, then answer; a repeated idempotency key answers at once (it dedupes).",
             annotations=ToolAnnotations(read_only_hint=True))
async def wait_read(seconds: float, ctx: Context) -> str:
    key = dict(ctx.request_context.meta or {}).get(IDEMPOTENCY_META)
    seen = any(row["key"] == key for row in _rows())
    _record("wait_read", ctx)
    if not seen:
        await anyio.sleep(seconds)
    return f"read after {0 if seen else seconds}s"


@server.tool(description="Kill this server process in the middle of the call.")
def die(ctx: Context) -> str:
    _record("die", ctx)
    os._exit(3)


@server.tool(description="Delete an item for good.", annotations=ToolAnnotations(destructive_hint=True))
def delete_item(name: str, ctx: Context) -> str:
    _record("delete_item", ctx)
    return f"deleted {name}"


@server.tool(description="A picture and its caption.", annotations=ToolAnnotations(read_only_hint=True))
def picture(ctx: Context) -> list[TextContent | ImageContent]:
    _record("picture", ctx)
    return [TextContent(type="text", text="a tiny png"), ImageContent(type="image", data=PIXEL, mimeType="image/png")]


@server.tool(description="Structured content only: the weather as JSON, no text block.",
             annotations=ToolAnnotations(read_only_hint=True))
def weather(city: str, ctx: Context) -> CallToolResult:
    _record("weather", ctx)
    return CallToolResult(content=[], structured_content={"city": city, "celsius": 21.5, "sky": "clear"})


@server.tool(description="A report as resources: an embedded text file, an embedded binary file and a link.",
             annotations=ToolAnnotations(read_only_hint=True))
def report(ctx: Context) -> list[TextContent | EmbeddedResource | ResourceLink]:
    _record("report", ctx)
    notes = TextResourceContents(uri="file:///reports/notes.txt", mime_type="text/plain", text="disk at 91%")
    blob = BlobResourceContents(uri="file:///reports/chart.png", mime_type="image/png", blob=PIXEL)
    return [
        TextContent(type="text", text="the nightly report"),
        EmbeddedResource(type="resource", resource=notes),
        EmbeddedResource(type="resource", resource=blob),
        ResourceLink(type="resource_link", uri="file:///reports/full.pdf", name="full report", mime_type="application/pdf"),
    ]


@server.tool(description="Read-only: wait some seconds; the call row records when it started and ended.",
             annotations=ToolAnnotations(read_only_hint=True))
async def timed_read(label: str, seconds: float, ctx: Context) -> str:
    started = time.time()
    await anyio.sleep(seconds)
    _record("timed_read", ctx, label=label, started=started, ended=time.time())
    return f"{label} done"


@server.tool(description="Not read-only: wait some seconds; the call row records when it started and ended.")
async def timed_write(label: str, seconds: float, ctx: Context) -> str:
    started = time.time()
    await anyio.sleep(seconds)
    _record("timed_write", ctx, label=label, started=started, ended=time.time())
    return f"{label} written"


def main() -> None:
    path = os.environ.get("TETHER_TEST_PIDS")
    if path:
        with open(path, "a") as f:
            f.write(f"{os.getpid()}\n")
    once = os.environ.get("TETHER_TEST_START_ONCE")
    if once and os.path.exists(once):
        sys.exit("tether-test: this server may start only once")
    if once:
        open(once, "w").close()
    if sys.argv[1] == "stdio":
        server.run()
        if os.environ.get("TETHER_TEST_STUBBORN"):  # a server that outlives its stdin unless killed
            time.sleep(3600)
    else:
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))


if __name__ == "__main__":
    main()
