"""mcp-server-git (PyPI) over stdio on a temporary repository: reads match `git`, allow= hides the writers."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from mcpkit import make_engine, scripted, tool_results

import tether
from tether.contracts.messages import ChatRequest
from tether.testing import Reply, ToolCall

READERS = ["git_status", "git_log", "git_diff*", "git_show", "git_branch"]
WRITERS = {"git_commit", "git_add", "git_reset", "git_create_branch", "git_checkout"}


def git(repo: Path, *args: str) -> str:
    done = subprocess.run(["git", "-c", "user.name=Ada", "-c", "user.email=ada@example.com", *args], cwd=repo,
                          capture_output=True, text=True, check=True)
    return done.stdout


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    path = tmp_path / "repo"
    path.mkdir()
    git(path, "init", "-q", "-b", "main")
    (path / "a.txt").write_text("one\n")
    git(path, "add", "a.txt")
    git(path, "commit", "-q", "-m", "first")
    (path / "a.txt").write_text("two\n")
    git(path, "commit", "-q", "-am", "second")
    (path / "a.txt").write_text("three\n")  # unstaged
    (path / "new.txt").write_text("untracked\n")
    return path


def git_server(repo: Path) -> tether.mcp.McpToolset:
    return tether.mcp.stdio(sys.executable, "-m", "mcp_server_git", "--repository", str(repo), allow=READERS)


async def test_status_and_log_return_what_git_says_and_allow_hides_the_write_tools(tmp_path: Path, repo: Path) -> None:
    def finish(request: ChatRequest) -> Reply:
        return Reply(text="\n=====\n".join(p.content for p in tool_results(request)))

    fake = tether.models.fake("fake", script=scripted(
        Reply(tool_calls=[ToolCall("git_status", {"repo_path": str(repo)}),
                          ToolCall("git_log", {"repo_path": str(repo), "max_count": 5})]),
        finish,
    ))
    engine = make_engine(fake, f"sqlite:///{tmp_path}/t.db")

    @tether.workflow(name="inspect")
    async def inspect(ctx: tether.Ctx) -> str:
        return str(await ctx.agent("What changed in the repository?", tools=[git_server(repo)]))

    out = await engine.run(inspect, run_id="git-1")
    assert out.status == "ok", out.error
    status, log = out.value.split("\n=====\n")
    assert status == "Repository status:\n" + git(repo, "status").rstrip("\n")
    assert "a.txt" in status and "new.txt" in status
    hashes = git(repo, "log", "--format=%H %s").splitlines()
    assert [line.split()[1] for line in log.splitlines() if line.startswith("Commit: ")] == [h.split()[0] for h in hashes]
    assert "Message: second" in log and "Message: first" in log

    offered = {t.name for t in fake.requests[0].tools}
    assert {"git_status", "git_log", "git_diff_unstaged", "git_show"} <= offered
    assert not offered & WRITERS
    assert [r.outcome for r in await engine.effect_ledger("git-1")] == ["ok", "ok"]
    await engine.close()


async def test_a_hidden_write_tool_cannot_be_called(tmp_path: Path, repo: Path) -> None:
    fake = tether.models.fake("fake", script=scripted(
        Reply(tool_calls=[ToolCall("git_commit", {"repo_path": str(repo), "message": "sneaky"})]),
        lambda request: Reply(text=tool_results(request)[-1].content),
    ))
    engine = make_engine(fake, f"sqlite:///{tmp_path}/t.db")
    before = git(repo, "log", "--format=%H")

    @tether.workflow(name="sneak")
    async def sneak(ctx: tether.Ctx) -> str:
        return str(await ctx.agent("Commit everything.", tools=[git_server(repo)]))

    out = await engine.run(sneak, run_id="git-2")
    assert out.status == "ok" and out.value.startswith("unknown tool 'git_commit'")
    assert git(repo, "log", "--format=%H") == before
    assert await engine.effect_ledger("git-2") == []
    await engine.close()
