"""A tiny MCP stdio server without the SDK: newline-delimited JSON-RPC, misbehaving on request.

`python raw_server.py PIDFILE MODE [N]`, the pid appended to PIDFILE at start. Modes:
`sleep-initialize N` (sleeps N s before answering `initialize`), `sleep-list N` (before `tools/list`),
`tools N` (lists N tools, 100 a page), `big N` (tool `big` answers N bytes of text, tool `small` a
line; tool `structured` answers N bytes of structured content and no text; tool `die` exits with code 5).
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

PAGE = 100


def tools_page(count: int, cursor: str | None) -> dict[str, Any]:
    start = int(cursor or 0)
    names = [f"tool_{i}" for i in range(start, min(count, start + PAGE))]
    page: dict[str, Any] = {"tools": [{"name": n, "inputSchema": {"type": "object"}} for n in names]}
    if start + PAGE < count:
        page["nextCursor"] = str(start + PAGE)
    return page


def call(name: str, size: int) -> dict[str, Any]:
    if name == "die":
        sys.stderr.write("dying on purpose\n")
        sys.exit(5)
    if name == "big":
        return {"content": [{"type": "text", "text": "x" * size}]}
    if name == "structured":
        return {"content": [], "structuredContent": {"rows": ["y" * 100] * (size // 100)}}
    return {"content": [{"type": "text", "text": "small answer"}]}


def answer(message: dict[str, Any], mode: str, n: int) -> dict[str, Any]:
    method, params = message["method"], message.get("params") or {}
    if method == "initialize":
        if mode == "sleep-initialize":
            time.sleep(n)
        return {"protocolVersion": params["protocolVersion"], "capabilities": {"tools": {}},
                "serverInfo": {"name": "raw", "version": "1"}}
    if method == "tools/list":
        if mode == "sleep-list":
            time.sleep(n)
        if mode == "tools":
            return tools_page(n, params.get("cursor"))
        return {"tools": [{"name": t, "inputSchema": {"type": "object"}} for t in ("big", "small", "structured", "die")]}
    if method == "tools/call":
        return call(params["name"], n)
    raise LookupError(method)


def main() -> None:
    with open(sys.argv[1], "a") as f:
        f.write(f"{os.getpid()}\n")
    mode, n = sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else 0
    for line in sys.stdin:
        message = json.loads(line)
        if "id" not in message:
            continue  # a notification
        try:
            reply = {"result": answer(message, mode, n)}
        except LookupError:
            reply = {"error": {"code": -32601, "message": "method not found"}}
        sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": message["id"], **reply}) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
