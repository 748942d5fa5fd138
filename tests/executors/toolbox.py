"""Module-level tools the executor tests dispatch (out-of-process executors import them by name)."""

from __future__ import annotations

import ctypes
import errno
import os
import socket
import subprocess
import sys
import time
from pathlib import Path


def echo(value: object) -> object:
    return value


def spawn_grandchild_and_sleep(pidfile: str) -> None:
    """Start a grandchild that sleeps forever, record its pid, then sleep forever too."""
    child = subprocess.Popen([sys.executable, "-c", "import time\nwhile True: time.sleep(60)"])
    Path(pidfile).write_text(str(child.pid))
    while True:
        time.sleep(60)


def connect(host: str, port: int) -> str:
    """Open a TCP connection; returns "connected" or raises."""
    with socket.create_connection((host, port), timeout=3):
        return "connected"


def write_file(path: str, text: str) -> str:
    Path(path).write_text(text)
    return path


def visible_pids() -> list[int]:
    return sorted(int(name) for name in os.listdir("/proc") if name.isdigit())


def read_env(names: list[str]) -> dict[str, str | None]:
    return {name: os.environ.get(name) for name in names}


def exit_with(code: int) -> None:
    sys.stdout.flush()
    os._exit(code)


def kill_self(signum: int) -> None:
    os.kill(os.getpid(), signum)


def chatty(value: int) -> int:
    """Print to stdout (must not corrupt the result channel)."""
    print("noise on stdout", value)
    return value * 2


def edit_repo(name: str, text: str) -> list[str]:
    """Change the checkout in the current directory: add a file and edit README."""
    Path(name).write_text(text)
    with open("README.md", "a") as f:
        f.write("edited by a tool\n")
    return sorted(os.listdir("."))


def sleep_with_grandchild_forever() -> None:
    """Start a grandchild that sleeps forever, then sleep forever too (only a kill ends either)."""
    subprocess.Popen([sys.executable, "-c", "import time\nwhile True: time.sleep(60)"])
    while True:
        time.sleep(60)


def probe(paths: list[str], names: list[str]) -> dict[str, object]:
    """What this process can read and which variables it sees; also starts a fresh interpreter."""
    read: dict[str, str] = {}
    for path in paths:
        try:
            read[path] = "ok:" + Path(path).read_text()[:40]
        except OSError as exc:
            read[path] = f"error:{type(exc).__name__}"
    python = subprocess.run([sys.executable, "-c", "print(6 * 7)"], capture_output=True, text=True, check=False)
    return {
        "read": read,
        "env": {name: os.environ.get(name) for name in names},
        "python": python.stdout.strip() or python.stderr[-200:],
        "cwd": os.getcwd(),
    }


# Attacks a sandboxed tool may try (tests/executors/test_sandbox_escapes.py). Each reports what the
# kernel answered (an errno name, or "ok") and what the follow-up read or write achieved.

MNT_DETACH = 2
MS_REMOUNT = 32
MS_BIND = 4096
CLONE_NEWNS = 0x00020000
CLONE_NEWUSER = 0x10000000


def _libc() -> ctypes.CDLL:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_void_p]
    libc.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]
    libc.unshare.argtypes = [ctypes.c_int]
    return libc


def _answer(rc: int) -> str:
    return "ok" if rc == 0 else errno.errorcode.get(ctypes.get_errno(), str(ctypes.get_errno()))


def _read(path: str) -> str:
    try:
        return "ok:" + Path(path).read_bytes()[:80].decode("utf-8", "replace")
    except OSError as exc:
        return f"error:{type(exc).__name__}"


def _mount_point_of(path: str) -> str:
    """The mount point that holds `path` here (the longest one that is `path` or a parent of it)."""
    points = [line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()]
    holding = [p for p in points if path == p or path.startswith(p.rstrip("/") + "/")]
    return max(holding, key=len)


def _write(path: str) -> str:
    try:
        Path(path).write_text("escaped")
        return "ok"
    except OSError as exc:
        return f"error:{errno.errorcode.get(exc.errno or 0, type(exc).__name__)}"


def unmount_and_read(path: str, nested: bool = False, also: list[str] | None = None) -> dict[str, object]:
    """Read `path`, unmount what is mounted over it (plainly, then lazily), read it and `also` again.

    `nested` first enters a new user and mount namespace, where the process holds every capability.
    """
    libc = _libc()
    out: dict[str, object] = {"unshare": _answer(libc.unshare(CLONE_NEWUSER | CLONE_NEWNS))} if nested else {}
    out["read_before"] = _read(path)
    mount_point = _mount_point_of(path)
    out["mount_point"] = mount_point
    out["umount"] = _answer(libc.umount2(mount_point.encode(), 0))
    out["umount_lazy"] = _answer(libc.umount2(mount_point.encode(), MNT_DETACH))
    out["read"] = _read(path)
    out["also"] = {p: _read(p) for p in also or []}
    out["masked"] = {p: _mount_point_of(p) == p for p in [path, *(also or [])]}
    return out


def remount_writable_and_write(path: str, nested: bool = False) -> dict[str, str]:
    """Remount the read-only bind that holds `path` read-write, then write `path`."""
    libc = _libc()
    out = {"unshare": _answer(libc.unshare(CLONE_NEWUSER | CLONE_NEWNS))} if nested else {}
    mount_point = out["mount_point"] = _mount_point_of(os.path.dirname(path))
    out["remount"] = _answer(libc.mount(None, mount_point.encode(), None, MS_REMOUNT | MS_BIND, None))
    out["write"] = _write(path)
    return out


def rewrite_sysctl(path: str) -> dict[str, str]:
    """Write a sysctl's own value back (no effect if it lands; the test only needs to know it could)."""
    try:
        value = Path(path).read_text()
    except OSError as exc:
        return {"read": f"error:{type(exc).__name__}", "write": "not tried"}
    try:
        with open(path, "w") as f:
            f.write(value)
        return {"read": "ok", "write": "ok"}
    except OSError as exc:
        return {"read": "ok", "write": f"error:{errno.errorcode.get(exc.errno or 0, type(exc).__name__)}"}


def capabilities() -> dict[str, str]:
    """The capability sets, the no_new_privs bit and the uid map this process runs with."""
    status = dict(line.split(":\t", 1) for line in Path("/proc/self/status").read_text().splitlines() if ":\t" in line)
    uid_map = " ".join(Path("/proc/self/uid_map").read_text().split())
    wanted = ("CapEff", "CapPrm", "CapBnd", "CapAmb", "NoNewPrivs")
    return {**{k: status[k].strip() for k in wanted}, "uid_map": uid_map, "uid": str(os.getuid())}
