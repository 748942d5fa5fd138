"""`isolation="worktree"`: the tool edits a disposable checkout; the host gets a patch."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tether.contracts.errors import ConfigError
from tether.contracts.protocols import ExecRequest
from tether.tools.executors import SandboxExecutor, SubprocessExecutor, Worktree


def git(repo: Path, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", *args],
        cwd=repo,
        input=stdin,
        capture_output=True,
        text=True,
        check=False,
    )


def exists(path: str | Path) -> bool:
    return os.path.exists(path)


def read(path: str | Path) -> str:
    return Path(path).read_text()


def make_repo(path: Path) -> Path:
    path.mkdir()
    git(path, "init", "-q")
    (path / "README.md").write_text("hello\n")
    git(path, "add", "README.md")
    assert git(path, "commit", "-q", "-m", "init").returncode == 0
    return path


@pytest.mark.parametrize("executor_cls", [SubprocessExecutor, SandboxExecutor])
async def test_a_tool_edits_a_worktree_and_the_host_gets_the_patch(
    tmp_path: Path, executor_cls: type[SubprocessExecutor]
) -> None:
    repo = make_repo(tmp_path / "repo")
    async with Worktree(repo) as wt:
        assert read(os.path.join(wt.path, "README.md")) == "hello\n"
        req = ExecRequest(
            tool="edit_repo",
            target="toolbox:edit_repo",
            args={"name": "new.txt", "text": "new\n"},
            cwd=wt.path,
            timeout_s=60,
        )
        result = await executor_cls().run(req)
        assert result.outcome == "ok", result.error
        assert result.cwd == wt.path and result.workdir != wt.path
        assert "new.txt" in result.value
        used = wt.path
    assert wt.patch is not None
    assert "+new" in wt.patch and "+edited by a tool" in wt.patch and "new.txt" in wt.patch
    assert not exists(used), "the worktree outlived the call"
    assert read(repo / "README.md") == "hello\n" and not exists(repo / "new.txt")
    assert used not in git(repo, "worktree", "list").stdout
    assert git(repo, "apply", "-", stdin=wt.patch).returncode == 0
    assert read(repo / "new.txt") == "new\n"


async def test_a_worktree_of_a_non_repository_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="git worktree"):
        async with Worktree(tmp_path):
            pass
