"""What the process executors promise beyond the kit: group kills, sandbox walls, allow-listed env."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest
import toolbox

from tether.contracts.errors import ConfigError
from tether.contracts.protocols import ExecRequest, ExecResult
from tether.tools.executors import (
    EXECUTOR_NAMES,
    InProcessExecutor,
    SandboxExecutor,
    SubprocessExecutor,
    get_executor,
)
from tether.tools.executors._process import is_harmless, live_group_members
from tether.tools.executors.sandbox import INSTALL_HINT

REPO = Path(__file__).resolve().parents[2]


def request(fn_name: str, timeout_s: float | None = 60.0, **args: object) -> ExecRequest:
    return ExecRequest(
        tool=fn_name,
        target=f"toolbox:{fn_name}",
        args=dict(args),
        timeout_s=timeout_s,
        idempotency_key="k-1",
    )


def exists(path: str) -> bool:
    return os.path.exists(path)


def pid_is_dead(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return True
    return state in ("Z", "X")  # a zombie is dead; this container's pid 1 may never reap it


async def test_a_timeout_kills_the_whole_process_group_grandchildren_included(
    tmp_path: Path,
) -> None:
    pidfile = tmp_path / "grandchild.pid"
    started = time.monotonic()
    result = await SubprocessExecutor().run(
        request("spawn_grandchild_and_sleep", timeout_s=2.0, pidfile=str(pidfile))
    )
    assert time.monotonic() - started < 15
    assert (result.outcome, result.signal, result.exit_code) == ("timeout", "SIGKILL", None)
    grandchild = int(pidfile.read_text())
    assert pid_is_dead(grandchild), f"grandchild {grandchild} survived the timeout"
    assert result.pgid is not None and live_group_members(result.pgid) == []


async def test_cancelling_a_dispatch_kills_its_process_group(tmp_path: Path) -> None:
    pidfile = tmp_path / "grandchild.pid"
    task = asyncio.ensure_future(
        SubprocessExecutor().run(
            request("spawn_grandchild_and_sleep", timeout_s=None, pidfile=str(pidfile))
        )
    )
    for _ in range(200):
        if pidfile.exists() and pidfile.read_text():
            break
        await asyncio.sleep(0.05)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert pid_is_dead(int(pidfile.read_text()))


@pytest.mark.parametrize("executor_cls", [SubprocessExecutor, SandboxExecutor])
async def test_exit_codes_and_signals_are_recorded(
    executor_cls: type[SubprocessExecutor],
) -> None:
    executor = executor_cls()
    exited = await executor.run(request("exit_with", code=7))
    assert (exited.outcome, exited.exit_code, exited.signal) == ("error", 7, None)
    assert exited.error is not None and "exit code 7" in exited.error
    killed = await executor.run(request("kill_self", signum=int(signal.SIGTERM)))
    assert (killed.outcome, killed.exit_code, killed.signal) == ("error", None, "SIGTERM")
    ok = await executor.run(request("echo", value=1))
    assert (ok.outcome, ok.exit_code, ok.signal) == ("ok", 0, None)
    failed = await executor.run(request("no_such_tool"))
    assert failed.outcome == "error" and "no_such_tool" in (failed.error or "")


async def test_a_tool_printing_to_stdout_cannot_corrupt_its_result() -> None:
    result = await SubprocessExecutor().run(request("chatty", value=21))
    assert (result.outcome, result.value) == ("ok", 42)


SECRETS = {
    "ANTHROPIC_API_KEY": "sk-ant-test",
    "OPENAI_API_KEY": "sk-openai-test",
    "GITHUB_TOKEN": "ghp-test",
    "MY_SECRET": "hunter2",
}


@pytest.mark.parametrize("executor_cls", [SubprocessExecutor, SandboxExecutor])
async def test_only_allow_listed_variables_reach_the_tool_environment(
    executor_cls: type[SubprocessExecutor], monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("UNLISTED_SETTING", "not a secret, still not passed")
    monkeypatch.setenv("LC_TIME", "C.UTF-8")
    names = [*SECRETS, "UNLISTED_SETTING", "LC_TIME"]
    result = await executor_cls().run(request("read_env", names=names))
    assert result.outcome == "ok", result.error
    assert result.value == {**dict.fromkeys(SECRETS), "UNLISTED_SETTING": None, "LC_TIME": "C.UTF-8"}


async def test_passthrough_and_explicit_env_reach_the_tool(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
    executor = SubprocessExecutor(env_passthrough=["GITHUB_TOKEN"])
    req = request("read_env", names=list(SECRETS)).model_copy(
        update={"env": {"MY_SECRET": "given-explicitly"}}
    )
    result = await executor.run(req)
    assert result.value == {
        "ANTHROPIC_API_KEY": None,
        "OPENAI_API_KEY": None,
        "GITHUB_TOKEN": "ghp-test",
        "MY_SECRET": "given-explicitly",
    }


def test_the_environment_allow_list_holds_locale_and_paths_and_no_credentials() -> None:
    for name in ("PATH", "HOME", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR"):
        assert is_harmless(name), name
    for name in ("PGPASSWORD", "DATABASE_URL", "TETHER_STORE", "AWS_SECRET_ACCESS_KEY", "PYTHONPATH", "lang"):
        assert not is_harmless(name), name


async def test_scrub_false_hands_the_tool_the_whole_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("UNLISTED_SETTING", "visible")
    result = await SubprocessExecutor(scrub=False).run(request("read_env", names=["UNLISTED_SETTING"]))
    assert result.value == {"UNLISTED_SETTING": "visible"}


async def sandboxed(fn_name: str, **args: Any) -> ExecResult:
    return await SandboxExecutor().run(request(fn_name, **args))


async def test_a_sandboxed_tool_cannot_open_a_network_socket() -> None:
    # Postgres listens on the host's 127.0.0.1:5432; outside the sandbox this connects.
    host = await SubprocessExecutor().run(request("connect", host="127.0.0.1", port=5432))
    inside = await sandboxed("connect", host="127.0.0.1", port=5432)
    assert inside.outcome == "error"
    assert any(word in (inside.error or "") for word in ("Connection", "Network", "OSError"))
    if host.outcome != "ok":
        pytest.fail(f"control failed: nothing listens on 127.0.0.1:5432 here ({host.error})")


@pytest.mark.parametrize(
    "target",
    [
        "/tmp/../tether-sandbox-escape.txt",
        str(REPO / "tether-sandbox-escape.txt"),
        str(Path.home() / "tether-sandbox-escape.txt"),
    ],
)
async def test_a_sandboxed_tool_cannot_write_outside_its_workdir(target: str) -> None:
    result = await sandboxed("write_file", path=target, text="escaped")
    assert result.outcome == "error"
    assert "Read-only file system" in (result.error or "") or "Permission" in (result.error or "")
    assert not exists(target)


async def test_a_sandboxed_tool_can_write_in_its_workdir() -> None:
    result = await sandboxed("write_file", path="inside.txt", text="fine")
    assert result.outcome == "ok", result.error


async def test_a_sandboxed_tool_sees_only_its_own_processes() -> None:
    result = await sandboxed("visible_pids")
    assert result.outcome == "ok", result.error
    pids = result.value
    assert os.getpid() not in pids, "the sandbox sees the test's own process"
    assert 1 in pids and len(pids) <= 5, f"the sandbox sees {len(pids)} processes: {pids}"


def test_the_sandbox_explains_how_to_install_bubblewrap() -> None:
    with pytest.raises(ConfigError, match="apt-get install bubblewrap"):
        SandboxExecutor(bwrap="tether-no-such-bwrap")
    assert "bubblewrap" in INSTALL_HINT


def test_get_executor_builds_each_name_and_refuses_unknown_ones() -> None:
    assert set(EXECUTOR_NAMES) == {"inprocess", "subprocess", "sandbox", "container"}
    for name in EXECUTOR_NAMES:
        assert get_executor(name).name == name
    mine = InProcessExecutor()
    assert get_executor(mine) is mine
    with pytest.raises(ConfigError, match="inprocess, subprocess, sandbox, container"):
        get_executor("docker-swarm")
    with pytest.raises(ConfigError):
        get_executor(object())  # type: ignore[arg-type]


async def test_inprocess_passes_the_key_only_to_tools_that_declare_it() -> None:
    seen: dict[str, object] = {}

    def plain(x: int) -> int:
        return x

    def keyed(x: int, idempotency_key: str) -> str:
        seen["key"] = idempotency_key
        return idempotency_key

    req = ExecRequest(tool="t", target="", args={"x": 1}, idempotency_key="key-9")
    assert (await InProcessExecutor().run(req, plain)).value == 1
    assert (await InProcessExecutor().run(req, keyed)).value == "key-9"


async def test_inprocess_reports_a_tool_raising_timeout_error_as_an_error() -> None:
    def raises() -> None:
        raise TimeoutError("the tool's own timeout")

    req = ExecRequest(tool="t", target="", args={}, timeout_s=30)
    result = await InProcessExecutor().run(req, raises)
    assert result.outcome == "error" and "the tool's own timeout" in (result.error or "")


def test_toolbox_is_importable_by_the_tests() -> None:
    assert toolbox.echo(3) == 3
