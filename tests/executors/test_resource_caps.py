"""Resource caps (issue 43): a tool that forks 400 processes, allocates 2 GB, returns 300 MB or spins ends as a
typed tool error naming the cap, and the engine's memory stays small (it never reads an oversized result)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest
from cap_tools import MB, fork_bomb

import tether
from tether.contracts.protocols import ExecRequest, ToolLimits
from tether.testing import Reply, ToolCall
from tether.tools.executors import SandboxExecutor, SubprocessExecutor
from tether.tools.executors._limits import pids_group, process_cap_enforced

pytestmark = pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(), reason="Linux /proc needed")

EXECUTORS = ["subprocess", pytest.param("sandbox", marks=pytest.mark.skipif(
    shutil.which("bwrap") is None, reason="bubblewrap is not installed"))]


def _executor(name: str) -> Any:
    return SubprocessExecutor() if name == "subprocess" else SandboxExecutor()


def _peak_rss_reset() -> None:
    Path("/proc/self/clear_refs").write_text("5")  # the kernel's high-water mark starts again from now


def _peak_rss() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM")


def _held_down(before: int) -> bool:
    """The engine's peak RSS grew by under 64 MB over the call, and stayed under 300 MB when the test process
    started small enough to tell (run alone it does; deep in the full suite it is big already)."""
    peak = _peak_rss()
    return peak - before < 64 * MB and (before > 236 * MB or peak < 300 * MB)


def _process_cap_binds() -> bool:
    group = pids_group(8)
    if group is not None:
        group.close()
    return process_cap_enforced(ToolLimits(), group)


@pytest.mark.parametrize("executor", EXECUTORS)
@pytest.mark.parametrize(("fn", "limits", "cap"), [
    ("fork_400", ToolLimits(max_processes=64), "max_processes"),
    ("allocate_2gb", ToolLimits(max_memory_bytes=1024 * MB), "max_memory_bytes"),
    ("return_300mb", ToolLimits(), "max_result_bytes"),
    ("write_300mb_to_the_result", ToolLimits(), "max_result_bytes"),
    ("spin", ToolLimits(max_cpu_s=1), "max_cpu_s"),
])
async def test_a_tool_past_its_cap_is_a_typed_error_naming_it(executor: str, fn: str, limits: ToolLimits,
                                                              cap: str) -> None:
    if cap == "max_processes" and not _process_cap_binds():
        pytest.skip("root without a writable pids cgroup: RLIMIT_NPROC does not bind root (docs/executors.md)")
    _peak_rss_reset()
    before = _peak_rss()
    result = await _executor(executor).run(ExecRequest(tool=fn, target=f"cap_tools:{fn}", args={}, timeout_s=60,
                                                       limits=limits))
    assert result.outcome == "error" and result.limit == cap, result
    assert result.error is not None and result.error.startswith(f"[{cap}]")
    assert _held_down(before)  # never 300 MB read into the engine


@pytest.mark.parametrize("executor", EXECUTORS)
async def test_the_default_caps_refuse_a_300mb_result_unread(executor: str) -> None:
    _peak_rss_reset()
    before = _peak_rss()
    result = await _executor(executor).run(ExecRequest(tool="r", target="cap_tools:return_300mb", args={}))
    assert result.limit == "max_result_bytes" and _held_down(before)


async def test_a_fork_bomb_in_a_run_is_a_tool_error_the_agent_reads_and_the_run_goes_on(tmp_path: Path) -> None:
    if not _process_cap_binds():
        pytest.skip("root without a writable pids cgroup: RLIMIT_NPROC does not bind root (docs/executors.md)")

    def script(request: tether.contracts.ChatRequest) -> Reply:
        tool_results = [p for m in request.messages for p in m.parts if getattr(p, "call_id", None)
                        and getattr(p, "is_error", None) is not None]
        if tool_results:
            return Reply(text=f"the tool failed: {tool_results[-1].content[:80]}")
        return Reply(tool_calls=[ToolCall("fork_bomb", {})])

    model = tether.models.fake("fake", script=script, prices={"m": tether.Price(input=1.0, output=1.0)})
    engine = tether.Engine(models=[model], routing={"loop": "fake:m"}, store=f"sqlite:///{tmp_path}/t.db")

    @tether.workflow(name="bomb")
    async def bomb(ctx: tether.Ctx) -> Any:
        return await ctx.agent("fork", tools=[fork_bomb])

    try:
        _peak_rss_reset()
        before = _peak_rss()
        out = await engine.run(bomb, run_id="bomb-1")
        assert out.status == "ok" and "[max_processes]" in out.value, out.value
        ledger = await engine.effect_ledger("bomb-1")
        assert [r.outcome for r in ledger] == ["error"]
        assert _held_down(before)
    finally:
        await engine.close()


def test_a_cap_below_one_is_a_config_error() -> None:
    with pytest.raises(tether.ConfigError, match="max_processes"):
        tether.tool(max_processes=0)(lambda: None)


def test_the_process_count_of_the_engine_is_untouched_by_the_caps() -> None:
    assert os.getpid() > 0  # the rlimits are set in the child between fork and exec, never in the engine
    import resource

    assert resource.getrlimit(resource.RLIMIT_AS)[0] == resource.RLIM_INFINITY
