"""The CLI over a real store: listing, inspecting, resolving, and one-line errors."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from typer.testing import CliRunner

import tether
from tether.cli.main import app

runner = CliRunner()


@tether.workflow(name="wait")
async def wait_flow(ctx: tether.Ctx) -> object:
    await ctx.step("s", lambda: 1)
    return await ctx.await_external("go")


def make_run(url: str) -> None:
    async def go() -> None:
        engine = tether.Engine(store=url)
        await engine.run(wait_flow, run_id="cli-run")
        await engine.close()

    asyncio.run(go())


def test_runs_inspect_resolve_and_cost(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/t.db"
    make_run(url)
    listed = runner.invoke(app, ["runs", "--store", url, "--json"])
    assert listed.exit_code == 0 and json.loads(listed.stdout)[0]["status"] == "suspended"
    shown = runner.invoke(app, ["inspect", "cli-run", "--store", url, "--json"])
    kinds = [e["kind"] for e in json.loads(shown.stdout)]
    assert kinds[:3] == ["decision", "step", "step"] and "external" in kinds
    table = runner.invoke(app, ["inspect", "cli-run", "--store", url])
    assert "journal of cli-run" in table.stdout
    resolved = runner.invoke(app, ["resolve", "cli-run", "go", '{"ok": true}', "--store", url])
    assert resolved.exit_code == 0 and "resolved" in resolved.stdout
    again = runner.invoke(app, ["resolve", "cli-run", "go", "2", "--store", url])
    assert "already closed" in again.stdout
    cost = runner.invoke(app, ["cost", "cli-run", "--store", url, "--json"])
    assert json.loads(cost.stdout)["total_usd"] == 0.0


def test_errors_print_one_line_and_exit_non_zero(tmp_path: Path) -> None:
    bad = runner.invoke(app, ["runs", "--store", "redis://nowhere"])
    assert bad.exit_code == 1
    assert "unknown store URL" in bad.stdout and "Traceback" not in bad.stdout
    missing = runner.invoke(app, ["inspect", "nope", "--store", f"sqlite:///{tmp_path}/x.db"])
    assert missing.exit_code == 1 and "no run 'nope'" in missing.stdout
