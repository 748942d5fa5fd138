"""A `tether worker` honours SIGTERM while its database stalls (accepts bytes, answers nothing).

A real worker process talks to PostgreSQL through a loopback proxy the test can stall; once the
worker is idle (claiming, listening, polling) the proxy stops forwarding, and the worker gets SIGTERM.
It must exit 0 within its `--grace` plus the bounded stop the docs promise, saying what it abandoned,
where it used to sit on the stalled connections for well over 45 s.
"""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from workerkit import PausableProxy, run_cli, spawn_worker

pytestmark = pytest.mark.timeout(180)

GRACE_S = 10.0


@pytest.fixture
def proxy() -> Iterator[PausableProxy]:
    with PausableProxy("127.0.0.1", 5432) as p:
        yield p


def _stop_stalled(
    proxy: PausableProxy, store_url: str, request_log: Path, *, latency: float = 0.02, busy: str = ""
) -> tuple[int, float, str]:
    """Start a worker through the proxy, stall it, SIGTERM it: (exit code, seconds to exit, output).

    `busy`: a run id the worker claims and drives (its calls take `latency` s) before the stall; else it idles."""
    worker = spawn_worker(
        proxy.url(store_url), request_log, poll=0.2, latency=latency, extra=("--grace", f"{GRACE_S:g}")
    )
    try:
        if busy:
            run_cli("run", "worker_app:chain", "--queue", "--run-id", busy, "--json", "--args", '{"tag": "t"}',
                    env_extra={"WORKER_STORE": store_url})
            worker.wait_for(f"run {busy}: claimed")
        time.sleep(1.0)  # several claims and polls went through the proxy; a run's call is in flight
        proxy.pause()
        time.sleep(1.5)  # the next claim is sent and waits on the stalled connection
        assert worker.proc.poll() is None, worker.output
        began = time.monotonic()
        worker.signal(signal.SIGTERM)
        try:
            code = worker.proc.wait(90)
        except subprocess.TimeoutExpired:
            code = None
        took = time.monotonic() - began
        time.sleep(0.2)  # let the pump drain the last lines
        assert code is not None, f"still running {took:.1f} s after SIGTERM:\n{worker.output}"
        return code, took, worker.output
    finally:
        if worker.proc.poll() is None:
            worker.proc.kill()
            worker.proc.wait()
        proxy.resume()


def test_an_idle_worker_exits_on_sigterm_within_its_grace_while_the_database_stalls(
    proxy: PausableProxy, store_url: str, request_log: Path
) -> None:
    code, took, output = _stop_stalled(proxy, store_url, request_log)
    print(f"exited {code} {took:.2f} s after SIGTERM\n{output}")
    assert code == 0, output
    assert took < GRACE_S + 20, f"took {took:.1f} s to exit after SIGTERM:\n{output}"
    assert "store unreachable" in output, output


def test_a_worker_holding_a_run_exits_within_grace_while_the_database_stalls_and_names_what_lapses(
    proxy: PausableProxy, store_url: str, request_log: Path
) -> None:
    code, took, output = _stop_stalled(proxy, store_url, request_log, latency=60.0, busy="held-run")
    print(f"exited {code} {took:.2f} s after SIGTERM\n{output}")
    assert code == 0, output
    assert took < GRACE_S + 20, f"took {took:.1f} s to exit after SIGTERM:\n{output}"
    line = next(line for line in output.splitlines() if "store unreachable: released nothing" in line)
    assert "held-run" in line and "taken over when their leases lapse" in line, output
