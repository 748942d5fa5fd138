"""The executor conformance kit: the promises every tool executor keeps, as a test base class.

    from tether.testing.executor_kit import ExecutorConformance

    class TestMyExecutor(ExecutorConformance):
        isolated_process = True          # each call runs in its own process group

        @pytest.fixture
        def executor(self):
            return MyExecutor()

The kit's tools are the `kit_*` functions of this module (importable by `module:qualname`).
Run it under pytest-asyncio (its tests are `async def`).
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    from tether.contracts.protocols import ExecRequest, ExecResult, Executor

# Only the standard library at import time: out-of-process executors import this module in every
# child to reach the kit's tools, so it must start fast.

KIT_VALUE: dict[str, Any] = {
    "text": "ünïcode ✓",
    "int": 3,
    "float": 2.5,
    "yes": True,
    "nothing": None,
    "nested": [1, [2, {"deep": "value"}], []],
    "empty": {},
}


def kit_echo(value: Any) -> Any:
    """Return the argument unchanged."""
    return value


async def kit_async_echo(value: Any) -> Any:
    """Return the argument unchanged, from a coroutine."""
    await asyncio.sleep(0)
    return value


def kit_fail(message: str) -> None:
    """Raise with a recognizable message."""
    raise ValueError(message)


def kit_sleep(seconds: float) -> float:
    """Sleep, then return how long."""
    time.sleep(seconds)
    return seconds


async def kit_async_sleep(seconds: float) -> float:
    """Sleep without holding a thread (an in-process timeout can stop it), then return how long."""
    await asyncio.sleep(seconds)
    return seconds


def kit_sleep_with_grandchild(seconds: float) -> int:
    """Start a grandchild that sleeps too (it must die with the group), then sleep."""
    child = subprocess.Popen([sys.executable, "-c", f"import time; time.sleep({seconds})"])
    time.sleep(seconds)
    return child.pid


def kit_where(workdir: str) -> dict[str, Any]:
    """Report the workdir the executor gave this call, and leave a file in it."""
    seen = {
        "workdir": workdir,
        "exists": os.path.isdir(workdir),
        "entries": sorted(os.listdir(workdir)),
        "cwd": os.getcwd(),
    }
    with open(os.path.join(workdir, "marker.txt"), "w") as f:
        f.write("left behind")
    return seen


def kit_key(idempotency_key: str) -> str:
    """Return the idempotency key the executor passed in."""
    return idempotency_key


def _exists(path: str) -> bool:
    return os.path.exists(path)


class ExecutorConformance:
    """Subclass with an `executor` fixture; set `isolated_process` for process-group executors."""

    isolated_process: ClassVar[bool] = False
    """Calls run in their own process group (the kit then checks the group dies on timeout)."""
    timeout_probe_s: ClassVar[float] = 1.0
    """The timeout the kit sets on a call that would run for a minute."""
    call_timeout_s: ClassVar[float | None] = 60.0
    """The timeout of calls that should finish (generous: container start-up counts)."""

    def request(
        self, fn: Callable[..., Any], timeout_s: float | None = None, **args: Any
    ) -> ExecRequest:
        from tether.contracts.protocols import ExecRequest

        return ExecRequest(
            tool=fn.__name__,
            target=f"{fn.__module__}:{fn.__qualname__}",
            args=args,
            timeout_s=timeout_s if timeout_s is not None else self.call_timeout_s,
            idempotency_key=f"kit-key-{fn.__name__}",
        )

    async def call(
        self,
        executor: Executor,
        fn: Callable[..., Any],
        timeout_s: float | None = None,
        **args: Any,
    ) -> ExecResult:
        return await executor.run(self.request(fn, timeout_s, **args), fn)

    async def test_a_json_result_round_trips_unchanged(self, executor: Executor) -> None:
        result = await self.call(executor, kit_echo, value=KIT_VALUE)
        assert (result.outcome, result.error) == ("ok", None)
        assert result.value == KIT_VALUE
        result = await self.call(executor, kit_async_echo, value=KIT_VALUE)
        assert (result.outcome, result.value) == ("ok", KIT_VALUE)

    async def test_a_tool_exception_is_an_error_outcome_with_its_message(
        self, executor: Executor
    ) -> None:
        result = await self.call(executor, kit_fail, message="kit-boom-8472")
        assert result.outcome == "error"
        assert result.error is not None and "kit-boom-8472" in result.error
        assert "ValueError" in result.error

    async def test_a_timeout_is_a_timeout_outcome_and_stops_the_call(
        self, executor: Executor
    ) -> None:
        from tether.tools.executors._process import live_group_members

        # In-process, a sleeping thread cannot be stopped (only abandoned); an async sleep can.
        tool = kit_sleep_with_grandchild if self.isolated_process else kit_async_sleep
        started = time.monotonic()
        result = await self.call(executor, tool, timeout_s=self.timeout_probe_s, seconds=60)
        assert result.outcome == "timeout"
        assert time.monotonic() - started < self.timeout_probe_s + 20
        if self.isolated_process:
            assert (result.signal, result.exit_code) == ("SIGKILL", None)
            assert result.pgid is not None
            assert live_group_members(result.pgid) == [], "the process group outlived the timeout"

    async def test_a_blocking_sync_call_past_its_timeout_returns_on_time(self, executor: Executor) -> None:
        # In-process the sleeping thread is abandoned (it cannot be killed), but the call returns.
        started = time.monotonic()
        result = await self.call(executor, kit_sleep, timeout_s=self.timeout_probe_s, seconds=30)
        assert result.outcome == "timeout"
        assert time.monotonic() - started < self.timeout_probe_s + 20

    async def test_the_workdir_exists_during_the_call_and_is_fresh_per_dispatch(
        self, executor: Executor
    ) -> None:
        first = await self.call(executor, kit_where)
        second = await self.call(executor, kit_where)
        for result in (first, second):
            assert result.outcome == "ok", result.error
            assert result.value["exists"] is True
            assert result.value["entries"] == [], "a workdir must start empty"
            assert result.workdir and not _exists(result.workdir), "workdir not removed"
            if self.isolated_process:
                assert result.value["cwd"] == result.value["workdir"]
        assert first.workdir != second.workdir

    async def test_the_idempotency_key_reaches_a_tool_that_asks_for_it(
        self, executor: Executor
    ) -> None:
        result = await self.call(executor, kit_key)
        assert (result.outcome, result.value) == ("ok", "kit-key-kit_key")

    async def test_durations_are_recorded(self, executor: Executor) -> None:
        result = await self.call(executor, kit_sleep, seconds=0.3)
        assert result.outcome == "ok"
        assert 250 <= result.duration_ms < 60_000
