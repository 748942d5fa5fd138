"""Owner liveness: only a same-host owner whose process is provably gone loses its lease early."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tether.stores.leases import current_owner, owner_is_provably_dead, process_start_time
from tether.testing.store_kit import NO_SUCH_PID


def test_current_owner_describes_this_process() -> None:
    me = current_owner("engine-1")
    assert (me.owner_id, me.pid) == ("engine-1", os.getpid())
    assert me.started_at == (process_start_time(os.getpid()) or 0.0)
    assert current_owner().owner_id != current_owner().owner_id


def test_this_process_is_alive() -> None:
    assert not owner_is_provably_dead(current_owner())


def test_an_owner_on_another_host_is_never_provably_dead() -> None:
    ghost = current_owner().model_copy(update={"host": "elsewhere.invalid", "pid": NO_SUCH_PID})
    assert not owner_is_provably_dead(ghost)


def test_an_exited_process_is_provably_dead() -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    assert owner_is_provably_dead(current_owner().model_copy(update={"pid": child.pid}))
    assert owner_is_provably_dead(current_owner().model_copy(update={"pid": NO_SUCH_PID}))


def needs_proc() -> None:
    """Liveness proofs read /proc: every Linux CI host has it, so there its absence fails; elsewhere it skips."""
    if os.environ.get("CI"):
        pytest.fail("/proc is missing: lease liveness proofs cannot be tested on this host")
    pytest.skip("needs /proc")


def test_a_zombie_is_provably_dead() -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT)  # exited, not yet reaped
        if process_start_time(child.pid) is None:
            needs_proc()
        owner = current_owner().model_copy(
            update={"pid": child.pid, "started_at": process_start_time(child.pid)}
        )
        assert owner_is_provably_dead(owner)
    finally:
        child.wait()


def test_a_reused_pid_is_provably_dead() -> None:
    started = process_start_time(os.getpid())
    if started is None:
        needs_proc()
    reused = current_owner().model_copy(update={"started_at": started + 1})
    assert owner_is_provably_dead(reused)
