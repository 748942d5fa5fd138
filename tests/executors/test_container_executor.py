"""The container executor: its command line (no engine needed) and, where an engine runs, live."""

from __future__ import annotations

import os
import sys

import pytest

from tether.contracts.errors import ConfigError
from tether.contracts.protocols import ExecRequest
from tether.testing.executor_kit import ExecutorConformance
from tether.tools.executors.container import ContainerExecutor, host_python_paths
from tether.tools.executors.subprocess import runner_source


def request(**update: object) -> ExecRequest:
    base = ExecRequest(
        tool="echo",
        target="toolbox:echo",
        args={"value": "top-secret-arg"},
        timeout_s=5,
        idempotency_key="k",
        attempt_id="01ATTEMPT",
    )
    return base.model_copy(update=update)


def flag_values(argv: list[str], flag: str) -> list[str]:
    return [argv[i + 1] for i, a in enumerate(argv[:-1]) if a == flag]


def test_the_command_isolates_the_container() -> None:
    argv = ContainerExecutor(runtime="docker").build_command(request(), "/tmp/wd-1")
    assert argv[:3] == ["docker", "run", "--rm"]
    assert flag_values(argv, "--name") == ["tether-01ATTEMPT"]
    assert flag_values(argv, "--network") == ["none"]
    assert "--read-only" in argv and "-i" in argv
    assert "/tmp/wd-1:/work" in flag_values(argv, "-v")
    assert flag_values(argv, "-w") == ["/work"]
    assert argv[-4:] == ["python:3.11-slim", "python", "-c", runner_source()]


def test_the_command_never_carries_args_or_secret_values(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GITHUB_TOKEN", "ghp-do-not-leak")
    executor = ContainerExecutor(runtime="docker", env_passthrough=["GITHUB_TOKEN"])
    argv = executor.build_command(request(env={"MY_SECRET": "s3cr3t"}), "/tmp/wd")
    joined = " ".join(argv)
    assert "top-secret-arg" not in joined  # args travel on stdin
    assert "ghp-do-not-leak" not in joined and "s3cr3t" not in joined
    assert {"GITHUB_TOKEN", "MY_SECRET"} <= set(flag_values(argv, "-e"))
    assert "ANTHROPIC_API_KEY" not in joined


def test_declared_read_paths_are_mounted_read_only_at_their_own_paths() -> None:
    argv = ContainerExecutor(runtime="docker").build_command(request(read_paths=("/data/in",)), "/tmp/wd")
    assert "/data/in:/data/in:ro" in flag_values(argv, "-v")


def test_a_cwd_is_mounted_and_becomes_the_working_directory() -> None:
    executor = ContainerExecutor(runtime="podman", image="python:3.12-slim")
    req = executor.prepare(request(cwd="/src/repo-wt"))
    assert req.work_mount == "/workspace" and req.workdir
    argv = executor.build_command(req, "/tmp/wd-2")
    os.rmdir(req.workdir or "")
    assert argv[0] == "podman" and "--userns=keep-id" in argv
    assert "/src/repo-wt:/workspace" in flag_values(argv, "-v")
    assert flag_values(argv, "-w") == ["/workspace"]
    assert "python:3.12-slim" in argv


def test_the_python_path_is_mounted_read_only_without_the_standard_library() -> None:
    argv = ContainerExecutor(runtime="docker").build_command(request(), "/tmp/wd")
    mounts = flag_values(argv, "-v")
    paths = host_python_paths()
    assert paths and all(f"{p}:{p}:ro" in mounts for p in paths)
    assert not any(m.startswith(f"{sys.base_prefix}/lib/python3.11:") for m in mounts)
    pythonpath = next(e for e in flag_values(argv, "-e") if e.startswith("PYTHONPATH="))
    assert pythonpath == "PYTHONPATH=" + os.pathsep.join(paths)
    bare = ContainerExecutor(runtime="docker", mount_python_path=False)
    assert not any(
        m.endswith(":ro") for m in flag_values(bare.build_command(request(), "/w"), "-v")
    )


async def test_running_without_an_engine_is_a_config_error_naming_the_fix() -> None:
    executor = ContainerExecutor(runtime="tether-no-such-runtime")
    assert executor.available() is False
    with pytest.raises(ConfigError, match="no working container engine"):
        await executor.run(request())


def _engine_or_skip() -> ContainerExecutor:
    executor = ContainerExecutor()
    if not executor.available():
        reason = "no container engine answers `docker info` or `podman info` on this host"
        print(f"SKIP live container tests: {reason}")
        pytest.skip(reason)
    return executor


class TestContainerExecutorLive(ExecutorConformance):
    isolated_process = True
    timeout_probe_s = 15.0
    call_timeout_s = 300.0

    @pytest.fixture
    def executor(self) -> ContainerExecutor:
        return _engine_or_skip()
