"""The in-process executor (the default): calls the tool function in this interpreter.

Async tools are awaited on the loop; sync tools run in a fresh daemon thread, never on the loop,
so a blocking tool stalls neither the other agents nor the lease renewal. `timeout_s` bounds both:
an async tool is cancelled; a thread cannot be killed, so a sync tool that overruns is abandoned
(its thread finishes in the background, its result is discarded, and a daemon thread never holds
up interpreter exit). Pick `subprocess` when a timeout must stop the work itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import inspect
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from tether.contracts.errors import ConfigError
from tether.contracts.protocols import ExecRequest, ExecResult
from tether.journal.canonical import to_jsonable
from tether.tools.executors._process import make_workdir, remove_workdir
from tether.tools.executors._runner import resolve_target, tool_kwargs

T = TypeVar("T")


@dataclass(frozen=True)
class _Raised:
    """The tool's own exception, carried past the timeout so it is never mistaken for ours."""

    exc: Exception


class InProcessExecutor:
    """Calls `fn(**args)` here; `idempotency_key`, `workdir` and `cwd` are passed only if declared.

    `propagate=True` (what the engine uses) returns the tool's value as-is and re-raises its
    exception, so `ModelRetry` and typed errors reach the agent loop; the default reports every
    outcome in the `ExecResult`, as the executor protocol promises.
    """

    name = "inprocess"

    def __init__(self, *, keep_workdir: bool = False, propagate: bool = False) -> None:
        self.keep_workdir = keep_workdir
        self.propagate = propagate

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
            got = await asyncio.wait_for(
                _invoke(fn, tool_kwargs(fn, request.args, extras), request.tool), request.timeout_s
            )
        except TimeoutError:
            got = _TIMED_OUT
        finally:
            if not self.keep_workdir:
                remove_workdir(workdir)
        duration_ms = (time.perf_counter() - started) * 1000.0
        return ExecResult(duration_ms=duration_ms, **placement, **self._outcome(request, fn, got))

    def _outcome(self, request: ExecRequest, fn: Callable[..., Any], got: Any) -> dict[str, Any]:
        if got is _TIMED_OUT:
            message = f"tool {request.tool!r} timed out after {request.timeout_s}s"
            if not _is_async(fn):
                message += "; its thread was abandoned and its result will be discarded"
            return {"outcome": "timeout", "error": message}
        if isinstance(got, _Raised):
            if self.propagate:
                raise got.exc
            return {"outcome": "error", "error": f"{type(got.exc).__name__}: {got.exc}"}
        if self.propagate:
            return {"outcome": "ok", "value": got}
        try:
            return {"outcome": "ok", "value": to_jsonable(got, what="the tool's result")}
        except Exception as exc:
            return {"outcome": "error", "error": f"{type(exc).__name__}: {exc}"}


_TIMED_OUT = object()


def _is_async(fn: Callable[..., Any]) -> bool:
    """Whether calling `fn` gives a coroutine (a `Tool` wraps its function as `.fn`)."""
    return inspect.iscoroutinefunction(getattr(fn, "fn", fn))


async def _invoke(fn: Callable[..., Any], kwargs: dict[str, Any], name: str) -> Any:
    """The tool's value, or its exception wrapped as `_Raised` (so its own TimeoutError stays its)."""
    try:
        if _is_async(fn):
            value = await fn(**kwargs)
        else:
            value = await in_thread(functools.partial(fn, **kwargs), name=name)
        if inspect.isawaitable(value):  # a sync callable that handed back an awaitable
            value = await value
        return value
    except Exception as exc:
        return _Raised(exc)


async def in_thread(fn: Callable[[], T], *, name: str = "call") -> T:
    """Run `fn` in a fresh daemon thread (with this task's context); cancelling abandons the thread.

    A daemon thread rather than the loop's default pool: an abandoned call must neither use up a
    shared pool's workers nor make `asyncio.run` wait for it at shutdown.
    """
    loop = asyncio.get_running_loop()
    future: asyncio.Future[T] = loop.create_future()
    context = contextvars.copy_context()

    def settle(value: Any, error: BaseException | None) -> None:
        if future.done():
            return  # timed out or cancelled: the result is discarded
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(value)

    def work() -> None:
        value: Any = None
        error: BaseException | None = None
        try:
            value = context.run(fn)
        except Exception as exc:
            error = exc
        except BaseException as exc:  # SystemExit in a tool must not end the engine
            error = RuntimeError(f"the tool raised {type(exc).__name__}: {exc}")
        with contextlib.suppress(RuntimeError):  # a closed loop: nobody waits for this result any more
            loop.call_soon_threadsafe(settle, value, error)

    threading.Thread(target=work, name=f"tether-tool-{name}", daemon=True).start()
    return await future
