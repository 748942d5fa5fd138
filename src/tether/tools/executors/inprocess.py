"""The in-process executor (the default): calls the tool function in this interpreter.

Async tools are awaited; sync tools run in a worker thread so they never block the loop. A
timeout abandons the call (outcome "timeout"); a thread cannot be killed, so a sync tool that
overruns finishes in the background. Pick `subprocess` when a timeout must stop the work.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import time
from collections.abc import Callable
from typing import Any

from tether.contracts.errors import ConfigError
from tether.contracts.protocols import ExecRequest, ExecResult
from tether.journal.canonical import to_jsonable
from tether.tools.executors._process import make_workdir, remove_workdir
from tether.tools.executors._runner import resolve_target, tool_kwargs


class InProcessExecutor:
    """Calls `fn(**args)` here; `idempotency_key` and `workdir` are passed only if declared."""

    name = "inprocess"

    def __init__(self, *, keep_workdir: bool = False) -> None:
        self.keep_workdir = keep_workdir

    def prepare(self, request: ExecRequest) -> ExecRequest:
        """Create the dispatch's workdir now, so the ledger's intent row can name it."""
        if request.workdir:
            return request
        return request.model_copy(update={"workdir": make_workdir(self.name)})

    async def run(self, request: ExecRequest, fn: Callable[..., Any] | None = None) -> ExecResult:
        """Dispatch one call; the workdir is removed afterwards unless `keep_workdir`."""
        if fn is None:
            if not request.target:
                raise ConfigError(f"tool {request.tool!r} has neither a function nor a target")
            fn = resolve_target(request.target)
        request = self.prepare(request)
        workdir = request.workdir or make_workdir(self.name)
        extras = {"idempotency_key": request.idempotency_key, "workdir": workdir, "cwd": request.cwd}
        placement: dict[str, Any] = {"workdir": workdir, "cwd": request.cwd}
        started = time.perf_counter()
        try:
            outcome = await asyncio.wait_for(
                _call(fn, tool_kwargs(fn, request.args, extras)), request.timeout_s
            )
        except TimeoutError:
            message = f"tool {request.tool!r} timed out after {request.timeout_s}s"
            outcome = {"outcome": "timeout", "error": message}
        finally:
            if not self.keep_workdir:
                remove_workdir(workdir)
        duration_ms = (time.perf_counter() - started) * 1000.0
        return ExecResult(duration_ms=duration_ms, **placement, **outcome)


async def _call(fn: Callable[..., Any], kwargs: dict[str, Any]) -> dict[str, Any]:
    """The tool's result or its failure as outcome fields (so its own TimeoutError is an error)."""
    try:
        if inspect.iscoroutinefunction(fn):
            value = await fn(**kwargs)
        else:
            value = await asyncio.to_thread(functools.partial(fn, **kwargs))
            if inspect.isawaitable(value):
                value = await value
        return {"outcome": "ok", "value": to_jsonable(value, what="the tool's result")}
    except Exception as exc:
        return {"outcome": "error", "error": f"{type(exc).__name__}: {exc}"}
