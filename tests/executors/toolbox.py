"""Module-level tools the executor tests dispatch (out-of-process executors import them by name)."""

from __future__ import annotations

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
