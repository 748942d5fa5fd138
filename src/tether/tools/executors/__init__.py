"""Tool executors: where a tool call runs (this process, a subprocess, a sandbox, a container)."""

from __future__ import annotations

from tether.contracts.errors import ConfigError
from tether.contracts.protocols import Executor
from tether.tools.executors.container import ContainerExecutor
from tether.tools.executors.inprocess import InProcessExecutor
from tether.tools.executors.sandbox import SandboxExecutor
from tether.tools.executors.subprocess import SubprocessExecutor
from tether.tools.executors.worktree import Worktree

EXECUTOR_NAMES = ("inprocess", "subprocess", "sandbox", "container")


def get_executor(name_or_obj: str | Executor) -> Executor:
    """An executor by name (built with its defaults), or the executor object itself."""
    if not isinstance(name_or_obj, str):
        if isinstance(name_or_obj, Executor):
            return name_or_obj
        raise ConfigError(
            f"{name_or_obj!r} is not an executor (it needs a `name` and an async `run`)",
            executor=repr(name_or_obj),
        )
    if name_or_obj == "inprocess":
        return InProcessExecutor()
    if name_or_obj == "subprocess":
        return SubprocessExecutor()
    if name_or_obj == "sandbox":
        return SandboxExecutor()
    if name_or_obj == "container":
        return ContainerExecutor()
    raise ConfigError(
        f"unknown executor {name_or_obj!r}; pick one of {', '.join(EXECUTOR_NAMES)} "
        "or pass an executor object",
        executor=name_or_obj,
        known=list(EXECUTOR_NAMES),
    )


__all__ = [
    "EXECUTOR_NAMES",
    "ContainerExecutor",
    "InProcessExecutor",
    "SandboxExecutor",
    "SubprocessExecutor",
    "Worktree",
    "get_executor",
]
