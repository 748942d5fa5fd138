"""The executor conformance kit, run on every executor this host can run."""

from __future__ import annotations

import pytest

from tether.testing.executor_kit import ExecutorConformance
from tether.tools.executors import InProcessExecutor, SandboxExecutor, SubprocessExecutor


class TestInProcessExecutor(ExecutorConformance):
    @pytest.fixture
    def executor(self) -> InProcessExecutor:
        return InProcessExecutor()


class TestSubprocessExecutor(ExecutorConformance):
    isolated_process = True

    @pytest.fixture
    def executor(self) -> SubprocessExecutor:
        return SubprocessExecutor()


class TestSandboxExecutor(ExecutorConformance):
    isolated_process = True

    @pytest.fixture
    def executor(self) -> SandboxExecutor:
        return SandboxExecutor()
