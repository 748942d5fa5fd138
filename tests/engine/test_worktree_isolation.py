"""`isolation="worktree"`: tools work in a disposable git worktree; the patch comes back as an artifact."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

import tether
from tether.contracts.messages import ChatRequest
from tether.testing import Reply, ToolCall


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, text=True).stdout


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    path = tmp_path / "repo"
    path.mkdir()
    git(path, "init", "-q")
    git(path, "config", "user.email", "t@example.com")
    git(path, "config", "user.name", "t")
    (path / "README").write_text("hello\n")
    git(path, "add", "README")
    git(path, "commit", "-qm", "init")
    return path


def script(request: ChatRequest) -> Reply:
    if request.messages[-1].role == "tool":
        return Reply(text="edited")
    return Reply(tool_calls=[ToolCall("write_note", {"name": "NOTES.md", "text": "from the agent\n"})])


@pytest.mark.parametrize("executor", ["inprocess", "subprocess"])
async def test_the_patch_is_returned_and_the_host_checkout_is_untouched(
    tmp_path: Path, repo: Path, executor: str
) -> None:
    import ledger_tools

    tool = tether.tool(executor=executor)(ledger_tools.write_note)
    model = tether.models.fake("fake", script=script)
    engine = tether.Engine(models=[model], routing={"loop": "fake:m"}, store=f"sqlite:///{tmp_path}/t.db")

    @tether.workflow(name="iso")
    async def iso(ctx: tether.Ctx) -> Any:
        result = await ctx.agent("add notes", tools=[tool], isolation="worktree", repo=str(repo), full=True)
        return result.artifacts["patch"]

    out = await engine.run(iso, run_id="r")
    assert out.status == "ok"
    assert "+++ b/NOTES.md" in out.value and "+from the agent" in out.value
    assert not (repo / "NOTES.md").exists()  # the host checkout never saw the edit
    assert git(repo, "worktree", "list").count("\n") == 1  # the worktree was removed
    rows = await engine.effect_ledger("r")
    assert len(rows) == 1 and rows[0].cwd and rows[0].outcome == "ok"
    again = await engine.resume("r", iso)
    assert again.value == out.value and again.replay.misses == 0


async def test_isolation_is_part_of_identity(tmp_path: Path, repo: Path) -> None:
    import ledger_tools

    tool = tether.tool(ledger_tools.write_note)
    target = str(tmp_path / "outside.md")  # an absolute path: the un-isolated run writes there

    def absolute(request: ChatRequest) -> Reply:
        if request.messages[-1].role == "tool":
            return Reply(text="edited")
        return Reply(tool_calls=[ToolCall("write_note", {"name": target, "text": "x"})])

    model = tether.models.fake("fake", script=absolute)
    engine = tether.Engine(models=[model], routing={"loop": "fake:m"}, store=f"sqlite:///{tmp_path}/t.db")

    def flow(isolated: bool) -> tether.Workflow:
        @tether.workflow(name="ident")
        async def ident(ctx: tether.Ctx) -> Any:
            options: dict[str, Any] = {"isolation": "worktree", "repo": str(repo)} if isolated else {}
            return await ctx.agent("add notes", tools=[tool], **options)

        return ident

    await engine.run(flow(True), run_id="r")
    again = await engine.resume("r", flow(False))
    assert again.replay.misses == 1
