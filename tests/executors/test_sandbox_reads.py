"""What a sandboxed tool can read and see, through the engine: an allow-list, never home or the store."""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import toolbox

import tether
from tether.contracts.messages import ChatRequest
from tether.testing import Reply, ToolCall

ENV_NAMES = ["PGPASSWORD", "DATABASE_URL", "GITHUB_PAT", "PATH", "LANG", "HOME", "DECLARED_SETTING"]


@pytest.fixture
def outside_tmp() -> Iterator[Path]:
    """A directory outside /tmp (which the sandbox always replaces), so only the allow-list hides it."""
    path = Path(tempfile.mkdtemp(prefix="tether-sandbox-test-", dir="/var/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def probing(paths: list[str]) -> Any:
    def reply(request: ChatRequest) -> Reply:
        last = request.messages[-1]
        if last.role == "tool":
            return Reply(text=last.parts[0].content)  # type: ignore[union-attr]
        return Reply(tool_calls=[ToolCall("probe", {"paths": paths, "names": ENV_NAMES})])

    return reply


async def run_probe(store: str, paths: list[str], tool: tether.Tool) -> dict[str, Any]:
    engine = tether.Engine(models=[tether.models.fake("fake", script=probing(paths))], routing={"loop": "fake:m"},
                           store=store)

    @tether.workflow
    async def sandboxed(ctx: tether.Ctx) -> Any:
        return await ctx.agent("probe", tools=[tool])

    try:
        out = await engine.run(sandboxed, run_id="probe")
        assert out.status == "ok", out.error
        return dict(json.loads(out.value))
    finally:
        await engine.close()


async def test_a_sandboxed_tool_reads_only_what_it_may_and_sees_an_allow_listed_env(
    outside_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = outside_tmp / "home"
    home.mkdir()
    (home / "secret.txt").write_text("home secret")
    store_dir = outside_tmp / "store"
    store_dir.mkdir()
    data = outside_tmp / "data"
    data.mkdir()
    (data / "input.txt").write_text("declared input")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("PGPASSWORD", "pg-secret")
    monkeypatch.setenv("DATABASE_URL", "postgresql://u:p@db/x")
    monkeypatch.setenv("GITHUB_PAT", "ghp-secret")
    tool = tether.tool(executor="sandbox", read_paths=[str(data)], env={"DECLARED_SETTING": "given"})(toolbox.probe)
    store_file = store_dir / "t.db"
    paths = [str(home / "secret.txt"), str(store_file), str(data / "input.txt")]
    seen = await run_probe(f"sqlite:///{store_file}", paths, tool)

    assert seen["read"][str(home / "secret.txt")].startswith("error:"), "the engine's home is readable"
    assert seen["read"][str(store_file)].startswith("error:"), "the run's store file is readable"
    assert seen["read"][str(data / "input.txt")] == "ok:declared input"
    env = seen["env"]
    assert (env["PGPASSWORD"], env["DATABASE_URL"], env["GITHUB_PAT"]) == (None, None, None)
    assert env["DECLARED_SETTING"] == "given" and env["PATH"]
    assert env["HOME"] == seen["cwd"] != str(home)  # HOME is the dispatch's workdir
    assert seen["python"] == "42"  # a fresh interpreter starts inside the sandbox


async def test_the_store_stays_hidden_even_inside_a_declared_read_path(outside_tmp: Path) -> None:
    (outside_tmp / "notes.txt").write_text("readable notes")
    store_file = outside_tmp / "t.db"
    tool = tether.tool(executor="sandbox", read_paths=[str(outside_tmp)])(toolbox.probe)
    paths = [str(outside_tmp / "notes.txt"), str(store_file), str(outside_tmp / "t.db-wal")]
    seen = await run_probe(f"sqlite:///{store_file}", paths, tool)
    assert seen["read"][str(outside_tmp / "notes.txt")] == "ok:readable notes"
    assert store_file.read_bytes().startswith(b"SQLite format 3")  # the store is really there, and busy
    assert seen["read"][str(store_file)].startswith("error:"), "the store shows through a declared read path"
    assert not seen["read"][str(outside_tmp / "t.db-wal")].startswith("ok:")
