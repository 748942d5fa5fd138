"""The sandbox executor: the subprocess executor inside bubblewrap.

No network, a read-only view of `/`, a private `/tmp`, its own pid namespace, and only the
dispatch's workdir (and the request's `cwd`, when given) writable. Tool modules must therefore
live outside `/tmp`, which the sandbox replaces with an empty tmpfs — except the interpreter and
the import path, which are bound back read-only so a virtualenv under `/tmp` still works.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Sequence

from tether.contracts.errors import ConfigError
from tether.contracts.protocols import ExecRequest
from tether.tools.executors._process import ChildExit, unwrap_shell_status
from tether.tools.executors.subprocess import SubprocessExecutor

INSTALL_HINT = (
    "sandbox executor needs bubblewrap: apt-get install bubblewrap (Debian/Ubuntu), "
    "dnf install bubblewrap (Fedora), or pick executor='subprocess'"
)


class SandboxExecutor(SubprocessExecutor):
    """Runs each call in a fresh interpreter under `bwrap`; raises `ConfigError` without it."""

    name = "sandbox"

    def __init__(
        self,
        env_passthrough: Sequence[str] = (),
        scrub: bool = True,
        *,
        keep_workdir: bool = False,
        bwrap: str = "bwrap",
    ) -> None:
        super().__init__(env_passthrough, scrub, keep_workdir=keep_workdir)
        found = shutil.which(bwrap)
        if found is None:
            raise ConfigError(INSTALL_HINT, command=bwrap)
        self.bwrap = found

    def command(self, request: ExecRequest, workdir: str) -> list[str]:
        """`bwrap <isolation> -- python -c <runner>`; later mounts win (binds sit on the tmpfs)."""
        argv = [
            self.bwrap,
            "--unshare-all",  # no network, ipc, uts, cgroup sharing
            "--unshare-pid",  # (included above; explicit because the promise depends on it)
            "--die-with-parent",
            "--ro-bind",
            "/",
            "/",
            "--dev",
            "/dev",
            "--proc",
            "/proc",
            "--tmpfs",
            "/tmp",
            "--bind",
            workdir,
            workdir,
        ]
        for path in _tmp_paths_to_keep():
            argv += ["--ro-bind", path, path]
        if request.cwd:
            argv += ["--bind", request.cwd, request.cwd]
        argv += ["--chdir", request.cwd or workdir, "--"]
        return argv + super().command(request, workdir)

    def describe_child(self, child: ChildExit) -> ChildExit:
        """bwrap exits 128 + N when the sandboxed process died of signal N."""
        return unwrap_shell_status(child)


def _tmp_paths_to_keep() -> list[str]:
    """The interpreter's prefixes and import path entries that live under /tmp (hidden by the tmpfs)."""
    candidates = {sys.prefix, sys.base_prefix, os.path.dirname(sys.executable), *sys.path}
    keep = []
    for path in sorted(candidates):
        real = os.path.realpath(path) if path else ""
        for p in {path, real}:
            if p and p.startswith("/tmp/") and os.path.exists(p):
                keep.append(p)
    return sorted(set(keep))
