"""`tether cancel` from one process stops a run another process drives, within its lease renewal interval."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from clikit import AppDir

import tether

TTL_S = 1.5  # the driver renews (and reads cancel requests) every 0.5 s


def _tether(appdir: AppDir, *argv: str) -> list[str]:
    return [sys.executable, "-m", "tether.cli.main", *argv]


def _status(store: str, run_id: str) -> str | None:
    async def go() -> str | None:
        engine = tether.Engine(store=store)
        try:
            return (await engine.run_meta(run_id)).status
        except tether.RunNotFoundError:
            return None
        finally:
            await engine.close()

    return asyncio.run(go())


def test_a_run_driven_by_another_process_stops_when_cancelled(appdir: AppDir) -> None:
    env = {**os.environ, "FLOWS_STORE": appdir.store, "FLOWS_LEASE_TTL_S": str(TTL_S)}
    driver = subprocess.Popen(_tether(appdir, "run", "flows:slow", "--run-id", "slow-1"), cwd=appdir.path, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while _status(appdir.store, "slow-1") != "running":
            assert driver.poll() is None, driver.communicate()
            assert time.monotonic() < deadline, "the driver never started the run"
            time.sleep(0.1)
        asked = time.monotonic()
        cancel = subprocess.run(_tether(appdir, "cancel", "slow-1", "--store", appdir.store, "--reason", "stop it",
                                        "--wait", "30", "--json"),
                                cwd=appdir.path, env=env, capture_output=True, text=True, timeout=60)
        assert cancel.returncode == 0, cancel.stderr
        assert json.loads(cancel.stdout) == {"run_id": "slow-1", "result": "requested", "status": "cancelled"}
        out, err = driver.communicate(timeout=60)
        took = time.monotonic() - asked
    finally:
        if driver.poll() is None:
            driver.kill()
    assert driver.returncode == 5, (out, err)
    assert "run slow-1: cancelled" in out and "stop it" in out
    # The step sleeps 60 s; the request is read at a renewal (every TTL/3). Generous slack for a loaded machine.
    assert took < 20, took


async def test_a_cancel_request_stops_the_segment_it_was_made_for_and_not_a_later_one(tmp_path: Path) -> None:
    engine = tether.Engine(store=f"sqlite:///{tmp_path}/t.db", lease_ttl_s=0.6)

    @tether.workflow
    async def nap(ctx: tether.Ctx) -> str:
        async def sleep() -> str:
            await asyncio.sleep(1.0)
            return "up"

        return await ctx.step("nap", sleep)

    try:
        handle = engine.start(nap, run_id="n")
        while True:  # the segment holds the lease once its meta says running
            try:
                if (await engine.run_meta("n")).status == "running":
                    break
            except tether.RunNotFoundError:
                pass
            await asyncio.sleep(0.02)
        assert await engine.cancel("n", "first") == "requested"  # this process drives it, under its lease
        first = await handle
        assert first.status == "cancelled" and first.error["message"] == "first"
        again = await engine.resume("n", nap)  # the request is still stored, but older than this segment
        assert again.status == "ok" and again.value == "up"
    finally:
        await engine.close()
