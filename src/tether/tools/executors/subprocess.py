"""The subprocess executor: a fresh interpreter per call, in its own process group and workdir.

The child runs the runner's source (`python -c`, so it imports no tether unless the tool does),
imports the tool by `module:qualname`, reads the request as JSON on stdin and answers JSON on
stdout. A timeout kills the whole process group, grandchildren included, and so does the death
of the engine (a watchdog in the group notices; see `_process.run_child`). The child's environment
is an allow-list of the engine's (`_process.HARMLESS_ENV`), never the engine's secrets.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from tether.contracts.errors import ConfigError
from tether.contracts.protocols import ExecRequest, ExecResult, LimitName, ToolLimits
from tether.journal.canonical import to_jsonable
from tether.tools.executors import _runner
from tether.tools.executors._process import (
    ChildExit,
    child_env,
    describe,
    make_workdir,
    remove_workdir,
    run_child,
)


def runner_source() -> str:
    """The child-side runner's source, run with `python -c` so the child imports no tether."""
    return Path(_runner.__file__).read_text(encoding="utf-8")


def target_of(request: ExecRequest, fn: Callable[..., Any] | None) -> str:
    """The `module:qualname` to import in the child: the request's, else derived from `fn`."""
    if request.target:
        return request.target
    if fn is None:
        raise ConfigError(
            f"tool {request.tool!r} has no import target; out-of-process executors import the tool "
            "by 'module:qualname', so define it at module level",
            tool=request.tool,
        )
    return f"{fn.__module__}:{fn.__qualname__}"


def runner_input(request: ExecRequest, target: str, workdir: str) -> bytes:
    """The JSON the runner reads on stdin."""
    body = {
        "target": target,
        "args": to_jsonable(request.args, what=f"the arguments of tool {request.tool!r}"),
        "idempotency_key": request.idempotency_key,
        "workdir": workdir,
        "max_result_bytes": request.limits.max_result_bytes,
    }
    return json.dumps(body).encode()


def result_from(request: ExecRequest, child: ChildExit, **placement: Any) -> ExecResult:
    """Turn a finished child (and the runner's JSON answer) into an `ExecResult`."""
    ended = describe(child)
    common: dict[str, Any] = {
        "duration_ms": child.duration_ms,
        "pgid": child.pgid,
        **ended,
        **placement,
    }
    if child.timed_out:
        message = (
            f"tool {request.tool!r} timed out after {request.timeout_s}s; "
            "its process group was killed"
        )
        return ExecResult(outcome="timeout", error=message, **common)
    try:
        answer = json.loads(child.stdout)
    except (ValueError, RecursionError):
        answer = None
    if isinstance(answer, dict) and "ok" in answer and child.limit != "max_result_bytes":
        return ExecResult(outcome="ok", value=answer["ok"], **common)
    limit = _limit_hit(request.limits, child, answer)
    if limit is not None:
        return ExecResult(outcome="error", error=_cap_message(request, limit, answer, child), limit=limit, **common)
    if isinstance(answer, dict) and "error" in answer:
        return ExecResult(outcome="error", error=str(answer["error"]), **common)
    how = f"signal {ended['signal']}" if ended["signal"] else f"exit code {ended['exit_code']}"
    message = f"tool {request.tool!r} process ended ({how}) without a result"
    if child.stderr_tail:
        message += f"; stderr: {child.stderr_tail}"
    return ExecResult(outcome="error", error=message, **common)


_CAP_OF_ERROR = {"MemoryError": "max_memory_bytes", "BlockingIOError": "max_processes",
                 "ResultTooLarge": "max_result_bytes"}
"""The runner's typed error (`type`) each cap shows up as inside the tool."""


def _limit_hit(limits: ToolLimits, child: ChildExit, answer: Any) -> LimitName | None:
    """The cap that ended a call that returned no result, read from typed facts (never a message)."""
    if child.limit in ("max_result_bytes", "max_processes"):
        return child.limit  # type: ignore[return-value]  # one of the two, as the branch says
    if describe(child)["signal"] in ("SIGXCPU",) and limits.max_cpu_s is not None:
        return "max_cpu_s"
    kind = answer.get("type") if isinstance(answer, dict) else None
    cap = _CAP_OF_ERROR.get(kind) if isinstance(kind, str) else None
    if cap is not None and getattr(limits, cap) is not None:
        return cap  # type: ignore[return-value]  # a key of LimitName's values
    return None


def _cap_message(request: ExecRequest, limit: LimitName, answer: Any, child: ChildExit) -> str:
    value = getattr(request.limits, limit)
    inner = f" ({answer['error']})" if isinstance(answer, dict) and "error" in answer else ""
    return (f"[{limit}] tool {request.tool!r} hit its resource cap {limit}={value}{inner}; raise it with "
            f"@tether.tool({limit}=...) if the call needs more")

class SubprocessExecutor:
    """Runs each call in a fresh interpreter; `env_passthrough` names engine variables it may see.

    `scrub=False` gives the tool the engine's whole environment instead of the allow-list.
    """

    name = "subprocess"
    watch_engine = True
    """Hand the child the engine-death pipe, so its group dies with the engine."""

    def __init__(
        self, env_passthrough: Sequence[str] = (), scrub: bool = True, *, keep_workdir: bool = False
    ) -> None:
        self.env_passthrough = tuple(env_passthrough)
        self.scrub = scrub
        self.keep_workdir = keep_workdir

    def prepare(self, request: ExecRequest) -> ExecRequest:
        """Create the dispatch's workdir now, so the ledger's intent row can name it."""
        if request.workdir:
            return request
        return request.model_copy(update={"workdir": make_workdir(self.name)})

    def command(self, request: ExecRequest, workdir: str) -> list[str]:
        """The argv that starts the runner (the sandbox wraps it)."""
        return [sys.executable, "-c", runner_source()]

    def environment(self, request: ExecRequest, workdir: str) -> dict[str, str]:
        """The child's environment: the allow-list, `env_passthrough`, and the request's `env`."""
        return child_env(self.env_passthrough, request.env, scrub=self.scrub)

    def describe_child(self, child: ChildExit) -> ChildExit:
        """Hook for wrappers whose own exit status encodes the tool's (bwrap: 128 + signal)."""
        return child

    async def run(self, request: ExecRequest, fn: Callable[..., Any] | None = None) -> ExecResult:
        """Dispatch one call; the workdir is removed afterwards unless `keep_workdir`."""
        target = target_of(request, fn)
        request = self.prepare(request)
        workdir = request.workdir or make_workdir(self.name)
        try:
            child = await run_child(
                self.command(request, workdir),
                stdin=runner_input(request, target, workdir),
                env=self.environment(request, workdir),
                cwd=request.cwd or workdir,
                timeout_s=request.timeout_s,
                watch=self.watch_engine,
                limits=request.limits,
            )
            return result_from(
                request, self.describe_child(child), workdir=workdir, cwd=request.cwd
            )
        finally:
            if not self.keep_workdir:
                remove_workdir(workdir)
