"""Resource caps for one child process: rlimits set between fork and exec, and a pids cgroup where one is writable.

Memory and CPU are rlimits (`RLIMIT_AS`, `RLIMIT_CPU`), which bind whoever runs the engine. Processes are
a cgroup's `pids.max` when this process may create a cgroup (v2 with the pids controller, else the v1 pids
hierarchy): the kernel then counts every task of the call, whatever its uid. Otherwise they are
`RLIMIT_NPROC`, which counts all processes of the user and which the kernel does not enforce for root, so a
root engine without a writable pids cgroup has no process cap (docs/executors.md, *Resource caps*).
"""

from __future__ import annotations

import contextlib
import os
import resource
import signal
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tether.contracts.protocols import ToolLimits

_RMDIR_WAIT_S = 2.0


@dataclass(frozen=True)
class PidsGroup:
    """A cgroup made for one call, capping its tasks (`pids.max`); removed with `close`."""

    path: Path

    @property
    def procs(self) -> Path:
        return self.path / "cgroup.procs"

    def hit(self) -> bool:
        """Whether a fork in the call was refused by `pids.max`."""
        try:
            for line in (self.path / "pids.events").read_text().splitlines():
                name, _, count = line.partition(" ")
                if name == "max" and count.strip().isdigit() and int(count) > 0:
                    return True
        except OSError:
            pass
        return False

    def close(self) -> None:
        """SIGKILL whatever is left in the group (a grandchild that left the process group too), then remove it."""
        deadline = time.monotonic() + _RMDIR_WAIT_S
        while True:
            try:
                pids = [int(p) for p in self.procs.read_text().split()]
            except (OSError, ValueError):
                pids = []
            for pid in pids:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
            try:
                self.path.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError:
                if time.monotonic() > deadline:
                    return  # left behind empty-to-be; the kernel frees it once its zombies are reaped
                time.sleep(0.01)


def pids_group(max_processes: int) -> PidsGroup | None:
    """A fresh pids cgroup capped at `max_processes`, or None when no pids hierarchy here is writable."""
    for parent in _pids_parents():
        path = parent / f"tether-{uuid.uuid4().hex[:12]}"
        try:
            path.mkdir()
        except OSError:
            continue
        try:
            (path / "pids.max").write_text(str(max_processes))
        except OSError:
            with contextlib.suppress(OSError):
                path.rmdir()
            continue
        return PidsGroup(path)
    return None


def _pids_parents() -> list[Path]:
    """Where this process's cgroups are, in the hierarchies that have the pids controller (v2 first)."""
    try:
        mounts = Path("/proc/self/mountinfo").read_text().splitlines()
        own = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return []
    v2: list[Path] = []
    v1: list[Path] = []
    for line in mounts:
        head, _, tail = line.partition(" - ")
        fields, more = head.split(), tail.split()
        if len(fields) < 5 or len(more) < 3:
            continue
        point, kind, options = fields[4], more[0], more[2].split(",")
        if kind == "cgroup2":
            controllers = Path(point, "cgroup.controllers")
            rel = next((c.split(":", 2)[2] for c in own if c.startswith("0::")), None)
            with contextlib.suppress(OSError):
                if rel is not None and "pids" in controllers.read_text().split():
                    v2.append(Path(point + rel.rstrip("/")) if rel != "/" else Path(point))
        elif kind == "cgroup" and "pids" in options:
            rel = next((c.split(":", 2)[2] for c in own if c.split(":", 2)[1:2] == ["pids"]), None)
            if rel is not None:
                v1.append(Path(point + rel.rstrip("/")) if rel != "/" else Path(point))
    return v2 + v1


def user_processes(uid: int) -> int:
    """How many tasks (threads included, as RLIMIT_NPROC counts them) the user runs now."""
    count = 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError, ValueError):
            uid_line = threads = ""
            for line in (entry / "status").read_text().splitlines():
                if line.startswith("Uid:"):
                    uid_line = line
                elif line.startswith("Threads:"):
                    threads = line
            if uid_line.split()[1] == str(uid):
                count += int(threads.split()[1])
    return count


def preexec(limits: ToolLimits, group: PidsGroup | None) -> Callable[[], None] | None:
    """What the child runs between fork and exec: join `group`, then set the rlimits. None when there is nothing."""
    caps: list[tuple[int, int, int]] = []
    if limits.max_memory_bytes is not None:
        caps.append((resource.RLIMIT_AS, limits.max_memory_bytes, limits.max_memory_bytes))
    if limits.max_cpu_s is not None:  # SIGXCPU at the soft limit; SIGKILL a second later if it is ignored
        caps.append((resource.RLIMIT_CPU, limits.max_cpu_s, limits.max_cpu_s + 1))
    if limits.max_processes is not None and group is None and os.geteuid() != 0:
        allowed = user_processes(os.getuid()) + limits.max_processes
        caps.append((resource.RLIMIT_NPROC, allowed, allowed))
    if not caps and group is None:
        return None
    procs = str(group.procs) if group is not None else None

    def apply() -> None:  # runs in the forked child: no allocation-heavy work, no locks
        if procs is not None:
            with open(procs, "w") as f:
                f.write(str(os.getpid()))
        for which, soft, hard in caps:
            _, current = resource.getrlimit(which)
            hard = hard if current == resource.RLIM_INFINITY else min(hard, current)
            resource.setrlimit(which, (min(soft, hard), hard))

    return apply


def process_cap_enforced(limits: ToolLimits, group: PidsGroup | None) -> bool:
    """Whether the call's process cap binds: a pids cgroup, or RLIMIT_NPROC for a user other than root."""
    return limits.max_processes is not None and (group is not None or os.geteuid() != 0)


def result_cap(limits: ToolLimits) -> ToolLimits:
    """Only the engine-side cap of `limits` (a container runtime enforces the others in the container)."""
    return ToolLimits(max_processes=None, max_memory_bytes=None, max_cpu_s=None,
                      max_result_bytes=limits.max_result_bytes)


def container_caps(limits: ToolLimits) -> list[str]:
    """`docker run` / `podman run` flags for `limits` (a cgroup per container: processes and memory in total)."""
    argv: list[str] = []
    if limits.max_processes is not None:
        argv += ["--pids-limit", str(limits.max_processes)]
    if limits.max_memory_bytes is not None:
        argv += ["--memory", f"{limits.max_memory_bytes}b"]
    if limits.max_cpu_s is not None:
        argv += ["--ulimit", f"cpu={limits.max_cpu_s}:{limits.max_cpu_s + 1}"]
    return argv
