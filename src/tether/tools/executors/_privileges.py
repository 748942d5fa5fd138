"""What a sandboxed tool is stripped of: namespaces, every capability, and the writable corners of /proc.

Run as root, bubblewrap hands the sandboxed process the caller's capabilities (inside a user
namespace that maps it back to host root): enough to unmount the masks over the engine's store and
remount the read-only binds writable. So the sandbox always passes `--cap-drop ALL`, unshares a user
namespace where the kernel allows one, and forbids nested ones where bubblewrap can
(`--disable-userns`, 0.8+). A process that is uid 0 without capabilities still passes the owner
check on root's files, and that is all a sysctl write asks for (`kernel.core_pattern` runs a program
as host root), so the writable roots of `/proc` are bound read-only too.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Sequence

NAMESPACES = ("--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts", "--unshare-cgroup-try")
"""`--unshare-all` minus its implicit user namespace, which `privilege_flags` decides on."""
DROP_CAPS = ("--cap-drop", "ALL")
USERNS_CHOICES = (("--unshare-user", "--disable-userns"), ("--unshare-user",))
"""Strongest first: a user namespace that cannot nest another, then one that can."""
PROC_READ_ONLY = ("/proc/sys", "/proc/sysrq-trigger", "/proc/fs", "/proc/irq", "/proc/bus")
"""Where uid 0 without capabilities could still change the host (Docker keeps the same list read-only)."""
_PROBE_TIMEOUT_S = 10.0


def privilege_flags(bwrap: str, euid: int) -> tuple[str, ...]:
    """The strongest privilege drop this bwrap accepts here (the executor asks once and keeps the answer).

    Root always gets `--cap-drop ALL` (bwrap never refuses it to root). A non-root caller of a
    setuid bwrap may be refused the flag, and then needs none: bwrap gives it no capabilities.
    """
    for userns in USERNS_CHOICES:
        if _starts(bwrap, (*userns, *DROP_CAPS)):
            return (*userns, *DROP_CAPS)
    if euid == 0 or _starts(bwrap, DROP_CAPS):
        return DROP_CAPS
    return ()


def proc_guards() -> list[str]:
    """Read-only binds over the writable roots of the fresh `/proc` (after `--proc /proc`)."""
    argv: list[str] = []
    for path in PROC_READ_ONLY:
        argv += ["--ro-bind-try", path, path]
    return argv


def _starts(bwrap: str, flags: Sequence[str]) -> bool:
    """Whether bwrap builds a sandbox with `flags` here (some kernels or setuid builds refuse them)."""
    true = shutil.which("true") or "/bin/true"
    argv = [bwrap, *NAMESPACES, *flags, "--ro-bind", "/", "/", "--", true]
    try:
        done = subprocess.run(argv, capture_output=True, timeout=_PROBE_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0
