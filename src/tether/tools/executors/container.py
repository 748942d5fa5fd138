"""The container executor: each call in a throwaway container via the docker or podman CLI.

The container has no network, a read-only root, a private `/tmp`, the dispatch's workdir at
`/work` (and the request's `cwd`, when given, at `/workspace`; the tool's `read_paths` read-only
at their own paths). By default the parent's Python
path directories (minus the standard library) are mounted read-only at the same paths so the
tool module imports; the runner itself is passed as `python -c <source>`, so the image needs
nothing but Python. On timeout the container is removed (`rm -f`), not just its client killed.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import sysconfig
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from tether.contracts.errors import ConfigError
from tether.contracts.protocols import ExecRequest, ExecResult
from tether.tools.executors._limits import container_caps, result_cap
from tether.tools.executors._process import (
    make_workdir,
    remove_workdir,
    run_child,
    unwrap_shell_status,
)
from tether.tools.executors.subprocess import (
    result_from,
    runner_input,
    runner_source,
    target_of,
)

WORK_MOUNT = "/work"
CWD_MOUNT = "/workspace"
RUNTIMES = ("docker", "podman")


def host_python_paths() -> list[str]:
    """The parent's `sys.path` directories a container should see, without the standard library."""
    paths = sysconfig.get_paths()
    stdlib = {paths["stdlib"], paths["platstdlib"], os.path.join(paths["stdlib"], "lib-dynload")}
    out = [p for p in sys.path if p and os.path.isdir(p) and p not in stdlib]
    return list(dict.fromkeys(out))


class ContainerExecutor:
    """Runs each call with `<runtime> run --rm --network none ... python -c <runner>`."""

    name = "container"

    def __init__(
        self,
        image: str = "python:3.11-slim",
        runtime: str | None = None,
        *,
        env_passthrough: Sequence[str] = (),
        mount_python_path: bool = True,
        keep_workdir: bool = False,
        kill_timeout_s: float = 30.0,
    ) -> None:
        self.image = image
        self.runtime = runtime
        self.env_passthrough = tuple(env_passthrough)
        self.mount_python_path = mount_python_path
        self.keep_workdir = keep_workdir
        self.kill_timeout_s = kill_timeout_s
        self._answered: str | None = None

    def available(self) -> bool:
        """Whether a runtime answers `info` (the first of docker, podman unless one was named)."""
        return self._engine() is not None

    def _engine(self) -> str | None:
        if self._answered is not None:
            return self._answered
        for candidate in (self.runtime,) if self.runtime else RUNTIMES:
            try:
                done = subprocess.run(
                    [candidate, "info"], capture_output=True, timeout=20, check=False
                )
            except (OSError, subprocess.TimeoutExpired):
                continue
            if done.returncode == 0:
                self._answered = candidate
                return candidate
        return None

    def prepare(self, request: ExecRequest) -> ExecRequest:
        """Create the workdir and fix the container's name and mount points before the effect."""
        update: dict[str, Any] = {}
        if not request.workdir:
            update["workdir"] = make_workdir(self.name)
        if not request.attempt_id:
            update["attempt_id"] = uuid.uuid4().hex
        if request.cwd and not request.work_mount:
            update["work_mount"] = CWD_MOUNT
        return request.model_copy(update=update) if update else request

    def container_name(self, request: ExecRequest) -> str:
        return f"tether-{request.attempt_id}"

    def build_command(self, request: ExecRequest, workdir: str) -> list[str]:
        """The full `<runtime> run ...` argv for one dispatch (no engine needed to build it)."""
        request = self.prepare(request.model_copy(update={"workdir": workdir}))
        runtime = self.runtime or self._answered or RUNTIMES[0]
        argv = [
            runtime,
            "run",
            "--rm",
            "-i",
            "--name",
            self.container_name(request),
            "--network",
            "none",
            "--read-only",
            "--tmpfs",
            "/tmp",
            "-v",
            f"{workdir}:{WORK_MOUNT}",
            *container_caps(request.limits),
        ]
        if request.cwd:
            mount = request.work_mount or CWD_MOUNT
            argv += ["-v", f"{request.cwd}:{mount}", "-w", mount]
        else:
            argv += ["-w", WORK_MOUNT]
        argv += ["--userns=keep-id"] if runtime == "podman" else ["--user", _uid_gid()]
        container_paths: list[str] = []
        if self.mount_python_path:
            for path in host_python_paths():
                argv += ["-v", f"{path}:{path}:ro"]
                container_paths.append(path)
        for path in dict.fromkeys(os.path.abspath(p) for p in request.read_paths):
            argv += ["-v", f"{path}:{path}:ro"]  # the tool's declared read paths, at the same place
        argv += ["-e", f"PYTHONPATH={os.pathsep.join(container_paths)}"]
        argv += ["-e", "PYTHONDONTWRITEBYTECODE=1"]
        for name in self._env_names(request):
            argv += ["-e", name]  # by name: the value travels in the client's env, not in argv
        return [*argv, self.image, "python", "-c", runner_source()]

    def _env_names(self, request: ExecRequest) -> list[str]:
        names = [n for n in self.env_passthrough if n in os.environ]
        return list(dict.fromkeys([*names, *request.env]))

    async def run(self, request: ExecRequest, fn: Callable[..., Any] | None = None) -> ExecResult:
        """Dispatch one call in a new container; on timeout remove the container itself."""
        runtime = await asyncio.to_thread(self._engine)
        if runtime is None:
            tried = self.runtime or " or ".join(RUNTIMES)
            raise ConfigError(
                f"container executor found no working container engine ({tried} 'info' failed); "
                "start the docker daemon or install podman, or pick executor='sandbox'",
                runtime=self.runtime,
            )
        target = target_of(request, fn)
        request = self.prepare(request)
        workdir = request.workdir or make_workdir(self.name)
        name = self.container_name(request)

        async def remove_container() -> None:
            await run_child(
                [runtime, "rm", "-f", name],
                stdin=b"",
                env=os.environ,
                cwd=workdir,
                timeout_s=self.kill_timeout_s,
            )

        try:
            child = await run_child(
                self.build_command(request, workdir),
                stdin=runner_input(request, target, WORK_MOUNT),
                env={**os.environ, **request.env},
                cwd=workdir,
                timeout_s=request.timeout_s,
                on_kill=remove_container,
                limits=result_cap(request.limits),  # the runtime enforces the rest (`container_caps`)
            )
            return result_from(
                request,
                unwrap_shell_status(child),
                workdir=workdir,
                cwd=request.cwd,
                work_mount=request.work_mount,
            )
        finally:
            if not self.keep_workdir:
                remove_workdir(workdir)


def _uid_gid() -> str:
    return f"{os.getuid()}:{os.getgid()}"
