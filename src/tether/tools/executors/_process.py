"""Running one child in its own process group, with a hard timeout that kills the whole group.

Stdin, stdout and stderr are unlinked temporary files rather than pipes, so a grandchild that
inherited them can never keep a dispatch waiting for end-of-file: we wait for the child's exit,
then kill whatever it left behind in its group.

With `watch=True` the child also inherits the read end of a pipe whose only write end this process
holds. The runner forks a watchdog that blocks reading it: when this process dies (even by SIGKILL)
the kernel closes the write end, the read returns end-of-file, and the watchdog SIGKILLs the
child's whole process group. So a tool never outlives the engine that started it.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, TypeVar

from tether.contracts.errors import ConfigError
from tether.contracts.protocols import ToolLimits
from tether.contracts.trace import TRACEPARENT
from tether.tools.executors._limits import PidsGroup, pids_group, preexec

T = TypeVar("T")

_STDERR_TAIL = 2000
_GROUP_GONE_WAIT_S = 2.0
_GROUP_POLL_S = 0.01
_SIZE_POLL_S = 0.02

WATCH_FD_ENV = "TETHER_WATCH_FD"
"""The child's environment variable naming its inherited engine-death pipe (see `run_child`)."""

HARMLESS_ENV = frozenset(
    {"PATH", "HOME", "USER", "LOGNAME", "LANG", "LANGUAGE", "TZ", "TMPDIR", "TERM"}
    | {"LD_LIBRARY_PATH", "PYTHONHOME"}  # what some interpreters need to start at all
)
"""What a tool inherits from the engine without being asked: locale, paths, identity, no credentials."""
HARMLESS_PREFIXES = ("LC_",)


@dataclass(frozen=True)
class ChildExit:
    """How a child ended: return code (negative = signal), output, and whether we killed it."""

    returncode: int | None
    stdout: bytes
    stderr_tail: str
    timed_out: bool
    pgid: int
    duration_ms: float
    limit: str | None = None
    """A cap the engine saw hit: `max_result_bytes` (the output, never read) or `max_processes` (a refused fork)."""


def is_harmless(name: str, allowed: Iterable[str] = HARMLESS_ENV) -> bool:
    """Whether an engine variable is on the allow-list a tool inherits (`LC_*` always is)."""
    return name in allowed or name.startswith(HARMLESS_PREFIXES)


def child_env(
    passthrough: Sequence[str], explicit: Mapping[str, str], *, scrub: bool
) -> dict[str, str]:
    """The child's environment: the allow-list and `passthrough` of the engine's, plus `explicit`.

    An allow-list, not a deny-list of secret-looking names: `PGPASSWORD`, `DATABASE_URL` or
    `TETHER_STORE` carry credentials under names no pattern predicts. `scrub=False` hands the child
    the engine's whole environment. PYTHONPATH carries the parent's `sys.path`, so the tool imports.
    """
    keep = set(passthrough)
    env = {k: v for k, v in os.environ.items() if not scrub or k in keep or is_harmless(k)}
    env.update(explicit)
    if traceparent := TRACEPARENT.get():  # the open execute_tool span: the tool's spans join the trace
        env["TRACEPARENT"] = traceparent
    env["PYTHONPATH"] = python_path(env.get("PYTHONPATH"))
    env.setdefault("PYTHONDONTWRITEBYTECODE", "1")
    return env


def python_path(extra: str | None = None) -> str:
    """The parent's `sys.path` as a PYTHONPATH (absolute), then `extra`, so tool modules import."""
    # '' and relative entries mean "the parent's current directory"; the child's cwd differs.
    paths = [os.path.abspath(p) for p in sys.path]
    if extra:
        paths.append(extra)
    return os.pathsep.join(dict.fromkeys(paths))


def make_workdir(executor: str) -> str:
    """A fresh, empty directory for one dispatch."""
    return tempfile.mkdtemp(prefix=f"tether-{executor}-")


def remove_workdir(path: str) -> None:
    shutil.rmtree(path, ignore_errors=True)


def live_group_members(pgid: int) -> list[int]:
    """Pids of processes still running in group `pgid` (zombies don't count); Linux /proc only."""
    found: list[int] = []
    proc = Path("/proc")
    if not proc.is_dir():
        return found
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # Fields after the parenthesised command: state ppid pgrp ...
        fields = stat[stat.rfind(")") + 2 :].split()
        if len(fields) > 2 and int(fields[2]) == pgid and fields[0] not in ("Z", "X"):
            found.append(int(entry.name))
    return found


async def kill_group(pgid: int) -> None:
    """SIGKILL every process in the group and wait (briefly) until none is left running."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        return
    # SIGKILL is delivered asynchronously: wait until the group is really gone.
    for _ in range(int(_GROUP_GONE_WAIT_S / _GROUP_POLL_S)):
        if not live_group_members(pgid):
            return
        await asyncio.sleep(_GROUP_POLL_S)


def _tail(f: IO[bytes]) -> str:
    f.seek(0, os.SEEK_END)
    f.seek(max(0, f.tell() - _STDERR_TAIL))
    return f.read().decode("utf-8", "replace").strip()


async def run_child(
    argv: Sequence[str],
    *,
    stdin: bytes,
    env: Mapping[str, str],
    cwd: str,
    timeout_s: float | None,
    on_kill: Callable[[], Awaitable[None]] | None = None,
    watch: bool = False,
    limits: ToolLimits | None = None,
) -> ChildExit:
    """Run `argv` in a new session; on timeout or cancellation kill its whole group.

    `on_kill` runs first (the container executor removes its container there). `watch` hands the
    child the engine-death pipe; its read end's number is in the child's `TETHER_WATCH_FD`. `limits`
    are set in the child before it starts (`_limits`); its output is never read past `max_result_bytes`.
    """
    if shutil.which(argv[0], path=env.get("PATH")) is None and not os.path.isabs(argv[0]):
        raise ConfigError(f"executor command {argv[0]!r} is not on PATH", command=argv[0])
    with tempfile.TemporaryFile() as fin, tempfile.TemporaryFile() as fout:
        fin.write(stdin)
        fin.seek(0)
        limits = limits or ToolLimits(max_processes=None, max_memory_bytes=None, max_cpu_s=None,
                                      max_result_bytes=None)
        group = pids_group(limits.max_processes) if limits.max_processes is not None else None
        try:
            if not watch:
                return await _run(argv, fin, fout, env=env, cwd=cwd, timeout_s=timeout_s, on_kill=on_kill,
                                  limits=limits, group=group)
            read_end, write_end = os.pipe()  # both close-on-exec; the child gets the read end only
            try:
                env = {**env, WATCH_FD_ENV: str(read_end)}
                return await _run(argv, fin, fout, env=env, cwd=cwd, timeout_s=timeout_s, on_kill=on_kill,
                                  pass_fds=(read_end,), limits=limits, group=group)
            finally:
                os.close(read_end)
                os.close(write_end)  # the watchdog (if still alive) sees end-of-file and kills the group
        finally:
            if group is not None:
                group.close()


async def _run(
    argv: Sequence[str],
    fin: IO[bytes],
    fout: IO[bytes],
    *,
    env: Mapping[str, str],
    cwd: str,
    timeout_s: float | None,
    on_kill: Callable[[], Awaitable[None]] | None,
    pass_fds: tuple[int, ...] = (),
    limits: ToolLimits,
    group: PidsGroup | None = None,
) -> ChildExit:
    with tempfile.TemporaryFile() as ferr:
        started = time.perf_counter()
        proc = await asyncio.create_subprocess_exec(
            *argv,
            stdin=fin,
            stdout=fout,
            stderr=ferr,
            env=dict(env),
            cwd=cwd,
            start_new_session=True,
            pass_fds=pass_fds,
            preexec_fn=preexec(limits, group),
        )
        pgid = proc.pid  # a new session's leader is also its group's leader
        cap = limits.max_result_bytes
        try:
            ended = await _wait(proc, fout, cap, timeout_s)
            if ended != "exit":
                await _stop(proc, pgid, on_kill)
        except BaseException:
            await complete_despite_cancel(_stop(proc, pgid, on_kill))
            raise
        duration_ms = (time.perf_counter() - started) * 1000.0
        await kill_group(pgid)  # whatever the tool left running in its group
        limit = None
        if ended == "result" or (cap is not None and os.fstat(fout.fileno()).st_size > cap):
            limit, stdout = "max_result_bytes", b""  # never read: the engine holds at most `cap` of it
        else:
            fout.seek(0)
            stdout = fout.read()
            limit = "max_processes" if group is not None and group.hit() else None
        return ChildExit(proc.returncode, stdout, _tail(ferr), ended == "timeout", pgid, duration_ms, limit)


async def _wait(
    proc: asyncio.subprocess.Process, fout: IO[bytes], cap: int | None, timeout_s: float | None
) -> str:
    """Wait for the child: `exit`, `timeout`, or `result` (its output grew past `cap` while it wrote)."""
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    while True:
        step = _SIZE_POLL_S if cap is not None else None
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                return "timeout"
            step = left if step is None else min(step, left)
        try:
            await asyncio.wait_for(proc.wait(), step)
            return "exit"
        except TimeoutError:
            if cap is not None and os.fstat(fout.fileno()).st_size > cap:
                return "result"


async def _stop(
    proc: asyncio.subprocess.Process, pgid: int, on_kill: Callable[[], Awaitable[None]] | None
) -> None:
    if on_kill is not None:
        with contextlib.suppress(Exception):
            await on_kill()
    await kill_group(pgid)
    await proc.wait()


def signal_name(returncode: int | None) -> str | None:
    """`SIGKILL` for a return code of -9; None for a normal exit."""
    if returncode is None or returncode >= 0:
        return None
    try:
        return signal.Signals(-returncode).name
    except ValueError:
        return f"SIG{-returncode}"


def unwrap_shell_status(child: ChildExit) -> ChildExit:
    """Wrappers (bwrap, docker) exit 128 + N when the process inside died of signal N: report N."""
    code = child.returncode
    if code is not None and 128 < code < 128 + signal.NSIG:
        return dataclasses.replace(child, returncode=-(code - 128))
    return child


def describe(child: ChildExit) -> dict[str, Any]:
    """The exit code / signal pair of a finished child (exit_code None when a signal ended it)."""
    if child.timed_out:
        return {"exit_code": None, "signal": "SIGKILL"}
    sig = signal_name(child.returncode)
    return {"exit_code": None if sig else child.returncode, "signal": sig}


async def complete_despite_cancel(aw: Awaitable[T]) -> T:
    """Await `aw` to the end even if the caller is cancelled meanwhile; then re-raise the cancel."""
    task = asyncio.ensure_future(aw)
    cancelled = False
    while True:
        try:
            result = await asyncio.shield(task)
            break
        except asyncio.CancelledError:
            if task.cancelled():
                raise
            cancelled = True
    if cancelled:
        raise asyncio.CancelledError
    return result
