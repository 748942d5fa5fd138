"""Tools that try to exhaust a resource (the resource-cap tests dispatch them out of process)."""

from __future__ import annotations

import os
import time

import tether

MB = 1024 * 1024


def fork_400() -> int:
    """Start 400 processes that sleep; raises once the kernel refuses a fork."""
    started = 0
    for _ in range(400):
        if os.fork() == 0:
            time.sleep(30)
            os._exit(0)
        started += 1
    return started


def allocate_2gb() -> int:
    return len(bytearray(2 * 1000 * MB))


def return_300mb() -> str:
    return "x" * (300 * MB)


def write_300mb_to_the_result() -> str:
    """Write 300 MB straight into the result file (past the runner's own check): the engine must not read it."""
    chunk = b"x" * MB
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if fd > 2 and "(deleted)" in target and os.lseek(fd, 0, os.SEEK_CUR) == 0:
            for _ in range(300):
                os.write(fd, chunk)
    return "done"


def spin() -> None:
    while True:
        pass


@tether.tool(executor="sandbox", max_processes=64, timeout_s=60)
def fork_bomb() -> int:
    """Fork many processes."""
    return fork_400()
