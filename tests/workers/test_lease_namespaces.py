"""Lease liveness across pid namespaces: a pid is evidence only in the namespace that numbered it.

The holders here are real processes: one in a new pid namespace (`unshare --pid --fork --mount-proc`, as
root) on this same host name, and one beside the test. Both stores that judge liveness are exercised.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import psycopg
import pytest
from workerkit import SRC

import tether
from tether.contracts.entries import LeaseOwner
from tether.contracts.protocols import LeasableStore
from tether.engine.lease import LeaseKeeper
from tether.stores import open_store
from tether.stores.leases import current_owner, local_host, owner_is_provably_dead, pid_namespace
from tether.stores.postgres import PostgresStore
from tether.testing.store_kit import NO_SUCH_PID

pytestmark = pytest.mark.timeout(120)

TTL = 2.0
RUN = "ns-run"

# A driver: takes the run's lease the way a segment does (renewed every TTL/3) and holds it until killed.
HOLDER = """
import asyncio, sys
from tether.engine.lease import LeaseKeeper
from tether.stores import open_store

async def main() -> None:
    store = open_store(sys.argv[1])
    async with LeaseKeeper(store, sys.argv[2], float(sys.argv[3])) as lease:
        print("held", lease.owner.model_dump_json(), flush=True)
        await asyncio.sleep(3600)

asyncio.run(main())
"""


@pytest.fixture(params=["sqlite", "postgresql"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/leases.db"
    dsn, schema = request.getfixturevalue("pg_dsn"), request.getfixturevalue("pg_schema")
    return f"{dsn}?schema={schema}"


@pytest.fixture
async def store(url: str) -> AsyncIterator[LeasableStore]:
    opened = open_store(url)
    assert isinstance(opened, LeasableStore)
    yield opened
    await opened.close()


def needs_namespaces() -> None:
    """Creating a pid namespace needs root and util-linux `unshare`: CI has both, so there their absence fails."""
    if os.geteuid() == 0 and shutil.which("unshare") and pid_namespace() is not None:
        return
    if os.environ.get("CI"):
        pytest.fail("these tests need root, /proc and util-linux unshare to create a pid namespace")
    pytest.skip("needs root, /proc and util-linux unshare")


def start_holder(url: str, *, new_namespace: bool) -> tuple[subprocess.Popen[str], LeaseOwner]:
    """A holder process (in a new pid namespace, or beside us) and the owner its lease records."""
    argv = [sys.executable, "-c", HOLDER, url, RUN, str(TTL)]
    if new_namespace:  # the holder is pid 1 of its namespace and dies with unshare (--kill-child)
        argv = ["unshare", "--pid", "--fork", "--mount-proc", "--kill-child=SIGKILL", *argv]
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line.startswith("held "):
        proc.kill()
        raise AssertionError(f"the holder did not take the lease: {line}{proc.stdout.read()}")
    return proc, LeaseOwner.model_validate_json(line.removeprefix("held "))


@pytest.fixture
def holders() -> Iterator[list[subprocess.Popen[str]]]:
    procs: list[subprocess.Popen[str]] = []
    yield procs
    for p in procs:
        if p.poll() is None:
            p.kill()
        p.wait(10)


async def test_a_driver_in_another_pid_namespace_on_this_host_keeps_its_live_lease(
    url: str, store: LeasableStore, holders: list[subprocess.Popen[str]]
) -> None:
    needs_namespaces()
    proc, owner = start_holder(url, new_namespace=True)
    holders.append(proc)
    assert owner.host == local_host() and owner.pid_namespace not in (None, pid_namespace())
    # The attack: judged as though its pid were numbered here, this live driver would be "provably dead"
    # (its pid is 1 in its own namespace: here that is another process, started at another time).
    assert owner_is_provably_dead(owner.model_copy(update={"pid_namespace": pid_namespace()}))
    assert not owner_is_provably_dead(owner)
    deadline = time.monotonic() + 2 * TTL  # longer than the TTL: its renewals, not luck, keep it
    while time.monotonic() < deadline:
        with pytest.raises(tether.LeaseHeldError, match="another pid namespace"):
            async with LeaseKeeper(store, RUN, TTL):  # a second driver, exactly as a segment takes a lease
                pass
        await asyncio.sleep(TTL / 4)
    assert proc.poll() is None  # it lived all along
    proc.kill()
    assert proc.wait(10) != 0
    # Dead now, but nothing here can prove it: its lease is honoured until it expires, then taken.
    with pytest.raises(tether.LeaseHeldError):
        await store.acquire(RUN, current_owner(), TTL)
    started = time.monotonic()
    async with LeaseKeeper(store, RUN, TTL, patience_s=3 * TTL) as lease:
        waited = time.monotonic() - started
    assert lease.epoch == 2 and waited > TTL / 4


async def test_a_driver_in_this_pid_namespace_that_dies_is_taken_over_at_once(
    url: str, store: LeasableStore, holders: list[subprocess.Popen[str]]
) -> None:
    proc, owner = start_holder(url, new_namespace=False)
    holders.append(proc)
    assert owner.pid == proc.pid and owner.pid_namespace == pid_namespace()
    with pytest.raises(tether.LeaseHeldError):
        await store.acquire(RUN, current_owner(), TTL)
    proc.kill()
    proc.wait(10)
    started = time.monotonic()
    lease = await store.acquire(RUN, current_owner(), TTL)  # no patience: the dead holder is provably gone
    assert lease.epoch == 2 and time.monotonic() - started < TTL / 2


async def test_a_lease_whose_owner_recorded_no_pid_namespace_is_honoured_until_it_expires(
    store: LeasableStore, pg_dsn: str, pg_schema: str
) -> None:
    needs_namespaces()  # on Linux (where pid namespaces exist) an unknown namespace proves nothing
    legacy = current_owner("legacy").model_copy(update={"pid": NO_SUCH_PID, "pid_namespace": None})
    assert not owner_is_provably_dead(legacy)
    assert owner_is_provably_dead(legacy.model_copy(update={"pid_namespace": pid_namespace()}))
    await store.acquire(RUN, legacy, TTL)
    if isinstance(store, PostgresStore):  # the row as a tether before this field wrote it: no such key at all
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute(f"UPDATE \"{pg_schema}\".leases SET owner = (owner::jsonb - 'pid_namespace')::text")
            (text,) = conn.execute(f'SELECT owner FROM "{pg_schema}".leases').fetchone() or ("",)
        assert "pid_namespace" not in text and LeaseOwner.model_validate_json(text).pid_namespace is None
    with pytest.raises(tether.LeaseHeldError, match="lease held"):
        await store.acquire(RUN, current_owner(), TTL)
    await asyncio.sleep(TTL + 0.2)
    assert (await store.acquire(RUN, current_owner(), TTL)).epoch == 2
