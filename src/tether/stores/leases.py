"""Fencing shared by every store: who may append (lease liveness, epochs) and what (the next seq).

Invariant 13 rejects stale writers by seq *and* by lease epoch; the epoch check lives here and the seq
check in `codec.number_entries`, so every backend applies the same rules inside its own transaction.
"""

from __future__ import annotations

import functools
import math
import os
import socket
import sys
import time
import uuid
from typing import TypeGuard

from tether.contracts.entries import Lease, LeaseOwner
from tether.contracts.errors import ConfigError, LeaseHeldError


def cancel_request_key(run_id: str) -> str:
    """The blob a cancel request of `run_id` is written to (a lease holder reads it at every renewal)."""
    return f"{run_id}/cancel-request"


def local_host() -> str:
    """The host name leases record; a dead owner is provable only on the same host (and pid namespace)."""
    return socket.gethostname()


def _proc_stat(pid: int) -> tuple[str, float] | None:
    """(state, start time in clock ticks since boot) from /proc/<pid>/stat, or None off Linux."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    # comm (field 2) may hold spaces and parentheses: the fields after it start past the last ')'.
    rest = data[data.rindex(b")") + 2 :].split()
    return rest[0].decode(), float(rest[19])  # field 3 is the state, field 22 the start time


def process_start_time(pid: int) -> float | None:
    """Boot-relative start time of `pid` (ticks), which tells a live process from a reused pid."""
    stat = _proc_stat(pid)
    return None if stat is None else stat[1]


_PID_NAMESPACES = sys.platform.startswith("linux")
"""Whether this platform has pid namespaces (elsewhere one pid space spans the host)."""


@functools.lru_cache(maxsize=1)
def _pid_namespace_of(pid: int) -> str | None:
    """This process's namespace, read once per pid (a forked child has another pid, so it reads its own)."""
    if not _PID_NAMESPACES:
        return None
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
        namespace = os.readlink("/proc/self/ns/pid")
        # A /proc mounted by another pid namespace numbers processes differently from os.getpid(), so
        # nothing this process reads from it about a pid could prove anything: judge no one by pid.
        if os.readlink("/proc/self") != str(os.getpid()):
            return None
    except OSError:
        return None
    return f"{boot}/{namespace}" if boot else None


def pid_namespace() -> str | None:
    """`<boot id>/pid:[<inode>]`: the kernel boot and pid namespace this process's pids mean something in.

    None where it cannot be read (no /proc, or a /proc of another pid namespace) and off Linux.
    """
    return _pid_namespace_of(os.getpid())


def current_owner(owner_id: str | None = None) -> LeaseOwner:
    """A `LeaseOwner` for this process; `owner_id` defaults to a fresh unique id per call."""
    host, pid = local_host(), os.getpid()
    return LeaseOwner(
        owner_id=owner_id or f"{host}:{pid}:{uuid.uuid4().hex[:12]}",
        host=host,
        pid=pid,
        started_at=process_start_time(pid) or 0.0,
        pid_namespace=pid_namespace(),
    )


def shares_pid_namespace(owner: LeaseOwner) -> bool:
    """Whether `owner.pid` names a process in this process's pid namespace (on the same kernel boot).

    A hostname is not a kernel: containers and `unshare --pid` share it with processes whose pids mean
    nothing here. An owner that recorded no namespace (an older tether, or no /proc) is judged only on
    platforms without pid namespaces.
    """
    mine = pid_namespace()
    if owner.pid_namespace is None:
        return mine is None and not _PID_NAMESPACES
    return owner.pid_namespace == mine


def owner_is_provably_dead(owner: LeaseOwner) -> bool:
    """True only when the owner ran on this host, in this pid namespace, and its process is gone (or its pid
    was reused)."""
    if owner.host != local_host() or not shares_pid_namespace(owner):
        return False
    if owner.pid <= 0:
        return True  # no process has such a pid (and os.kill(0, ...) would signal our own group)
    try:
        os.kill(owner.pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        pass  # it exists, under another user
    except OSError:
        return False
    stat = _proc_stat(owner.pid)
    if stat is None:
        return False
    state, started = stat
    return state == "Z" or (owner.started_at != 0.0 and started != owner.started_at)


def _when(expires_at: float, now: float) -> str:
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(expires_at))
    left = expires_at - now
    return f"{stamp} ({left:.1f} s from now)" if left >= 0 else f"{stamp} ({-left:.1f} s ago)"


def check_acquire(
    run_id: str, held: Lease | None, owner: LeaseOwner, ttl_s: float, now: float
) -> None:
    """Raise `LeaseHeldError` if another live owner holds an unexpired lease on `run_id`."""
    if not (math.isfinite(ttl_s) and ttl_s > 0):
        raise ConfigError(f"lease ttl_s must be a positive number of seconds, got {ttl_s!r}.")
    if held is None or held.owner.owner_id == owner.owner_id or now > held.expires_at:
        return
    if owner_is_provably_dead(held.owner):
        return
    h = held.owner
    where = ""
    if h.host == local_host() and not shares_pid_namespace(h):
        other = "in another pid namespace" if h.pid_namespace is not None else "in a pid namespace it did not record"
        where = f" {other} (so its pid proves nothing here)"
    raise LeaseHeldError(
        f"lease held: run '{run_id}' is driven by pid {h.pid} on host '{h.host}'{where} (owner "
        f"'{h.owner_id}', epoch {held.epoch}) until {_when(held.expires_at, now)}. Wait for that "
        f"driver to finish or its lease to expire; a holder that dies on this host, in this pid "
        f"namespace, is taken over at once.",
        run_id=run_id,
        holder=h.model_dump(),
        epoch=held.epoch,
        expires_at=held.expires_at,
    )


def new_lease(run_id: str, owner: LeaseOwner, prev_epoch: int, ttl_s: float, now: float) -> Lease:
    """The lease an acquire grants: the epoch after every one this run ever had."""
    return Lease(
        run_id=run_id, owner=owner, epoch=prev_epoch + 1, expires_at=now + ttl_s, ttl_s=ttl_s
    )


def _lost(run_id: str, lease: Lease, held: Lease | None, action: str) -> LeaseHeldError:
    if held is None:
        now_at = "has no lease (it was released, taken over and released, or the run was deleted)"
    else:
        h = held.owner
        now_at = f"is now at lease epoch {held.epoch}, held by pid {h.pid} on '{h.host}'"
    return LeaseHeldError(
        f"lease lost: run '{run_id}' {now_at}; this writer holds epoch {lease.epoch}, so the "
        f"{action} was rejected and nothing was written. Stop this segment; resume the run to "
        f"continue under a new lease.",
        run_id=run_id,
        epoch=lease.epoch,
        current_epoch=None if held is None else held.epoch,
    )


def check_fence(run_id: str, lease: Lease, held: Lease | None, now: float) -> None:
    """Raise `LeaseHeldError` unless `lease` is the run's current, unexpired lease."""
    if lease.run_id != run_id:
        raise LeaseHeldError(
            f"lease mismatch: a lease on run '{lease.run_id}' cannot fence appends to run "
            f"'{run_id}'; nothing was written. Acquire a lease on '{run_id}'.",
            run_id=run_id,
            lease_run_id=lease.run_id,
        )
    if not _holds(held, lease):
        raise _lost(run_id, lease, held, "append")
    if now > held.expires_at:
        raise LeaseHeldError(
            f"lease expired: run '{run_id}' epoch {lease.epoch} expired at "
            f"{_when(held.expires_at, now)}; the append was rejected and nothing was written. "
            f"Renew every ttl/3 (ttl {held.ttl_s:g} s), or renew now if no one else took over.",
            run_id=run_id,
            epoch=lease.epoch,
            expires_at=held.expires_at,
        )


def _holds(held: Lease | None, lease: Lease) -> TypeGuard[Lease]:
    """Whether `held` (the run's current lease) is `lease`: the same epoch and owner (checked on every append,
    so the usual case, the very same object, skips comparing the owners field by field)."""
    return held is lease or (held is not None and held.epoch == lease.epoch and held.owner == lease.owner)


def renewed(lease: Lease, held: Lease | None, now: float) -> Lease:
    """`lease` extended by its ttl, if it is still the run's current lease (expired or not)."""
    if not _holds(held, lease):
        raise _lost(lease.run_id, lease, held, "renew")
    return held.model_copy(update={"expires_at": now + held.ttl_s})


def releases(lease: Lease, held: Lease | None) -> bool:
    """Whether releasing `lease` clears `held` (a stale release is a silent no-op)."""
    return held is not None and held.epoch == lease.epoch
