"""The child side of an out-of-process dispatch: import `module:qualname`, call it, print JSON.

Reads `{"target", "args", "idempotency_key", "workdir"}` from stdin and writes exactly one
`{"ok": value}` or `{"error": "Type: message", "type": "Type"}` to stdout (exit 0 or 1). Anything the tool itself
prints goes to stderr, so it can never corrupt the result. Standard library only: the container
executor runs this file's source with `python -c` in an image that has no tether installed.

When `TETHER_WATCH_FD` names an inherited pipe, a forked watchdog blocks reading it and SIGKILLs
this process group at end-of-file, i.e. as soon as the engine that holds the write end is gone.
A separate process rather than a thread: it acts even while the tool holds the GIL in C code.
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
import json
import os
import signal
import sys
from collections.abc import Callable, Mapping
from typing import Any

INJECTABLE = ("idempotency_key", "workdir", "cwd")
"""Keywords the executor passes to a tool only when its signature declares them by name."""


def resolve_target(target: str) -> Callable[..., Any]:
    """Import `module:qualname` and return the callable (a tool wrapper's `.fn` when it has one)."""
    module_name, sep, qualname = target.partition(":")
    if not sep or not module_name or not qualname:
        raise ValueError(f"tool target {target!r} is not 'module:qualname'")
    if "<locals>" in qualname:
        raise ValueError(f"tool target {target!r} is a local function; define it at module level")
    obj: Any = importlib.import_module(module_name)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    inner = getattr(obj, "fn", None)
    fn = inner if callable(inner) else obj
    if not callable(fn):
        raise TypeError(f"tool target {target!r} is not callable")
    return fn  # type: ignore[no-any-return]


def tool_kwargs(
    fn: Callable[..., Any], args: Mapping[str, Any], extras: Mapping[str, Any]
) -> dict[str, Any]:
    """The call's keywords: the args, plus each injectable extra the function declares by name."""
    kwargs = dict(args)
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return kwargs
    named = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    for name, value in extras.items():
        param = params.get(name)
        if param is not None and param.kind in named and name not in kwargs:
            kwargs[name] = value
    return kwargs


def _jsonable(value: Any) -> Any:
    dump = getattr(value, "model_dump", None)
    return dump(mode="json") if callable(dump) else value


def _call(request: Mapping[str, Any]) -> Any:
    fn = resolve_target(str(request["target"]))
    extras = {
        "idempotency_key": request.get("idempotency_key", ""),
        "workdir": request.get("workdir"),
        "cwd": os.getcwd(),
    }
    value = fn(**tool_kwargs(fn, request.get("args") or {}, extras))
    if inspect.isawaitable(value):
        value = asyncio.run(_settle(value))
    return value


async def _settle(awaitable: Any) -> Any:
    return await awaitable


def watch_engine() -> int | None:
    """Fork the watchdog that kills this process group once the engine's end of the pipe closes."""
    fd_text = os.environ.pop("TETHER_WATCH_FD", "")
    if not fd_text.isdigit():
        return None
    fd = int(fd_text)
    pid = os.fork()
    if pid != 0:
        os.close(fd)  # the tool and its children never hold it
        return pid
    try:
        while os.read(fd, 1):  # nothing is ever written: this returns only at end-of-file
            pass
        os.killpg(os.getpgid(0), signal.SIGKILL)
    finally:
        os._exit(0)


def stop_watchdog(pid: int | None) -> None:
    """The tool is done: end and reap the watchdog (the engine then kills what is left)."""
    if pid is not None:
        try:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        except OSError:
            pass


def _error(kind: str, message: str) -> str:
    """The error answer: `type` is the exception's class name (the engine maps resource caps from it)."""
    try:
        return json.dumps({"error": f"{kind}: {message}", "type": kind})
    except (ValueError, RecursionError):
        return json.dumps({"error": kind, "type": kind})


def main() -> int:
    """Run one request from stdin; the exit code is 0 for a result and 1 for an error."""
    watchdog = watch_engine()
    raw = sys.stdin.buffer.read()
    result_fd = os.dup(1)
    os.dup2(2, 1)  # the tool's prints (and its children's) land on stderr
    request = {}
    try:
        request = json.loads(raw)
        value = _call(request)
        payload, code = json.dumps({"ok": _jsonable(value)}, allow_nan=False), 0
    except BaseException as exc:  # the tool's failure, whatever it is, is the result
        payload, code = _error(type(exc).__name__, str(exc)), 1
    cap = request.get("max_result_bytes") if isinstance(request, dict) else None
    if isinstance(cap, int) and len(payload) > cap:  # the engine would refuse it unread: say why, in a few bytes
        payload, code = _error("ResultTooLarge", f"the result is {len(payload)} bytes, over max_result_bytes={cap}"), 1
    with os.fdopen(result_fd, "w", encoding="utf-8") as out:
        out.write(payload)
    stop_watchdog(watchdog)
    return code


if __name__ == "__main__":
    sys.exit(main())
