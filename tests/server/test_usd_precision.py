"""USD printed to its precision (issue 40, item 8): a 0.001 ceiling prints 0.001 in `run`, `resume`, `runs` and the
inspector, never 0.00; 0.005 never 0.01. And the inspector of a fork and of a crashed run reads the cost report."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from browser_kit import CHROMIUM, CHROMIUM_ARGS, TIMEOUT_MS, WIDE, watch_errors
from playwright.sync_api import expect, sync_playwright
from server_kit import uvicorn_thread
from test_cost_views import make_forked
from typer.testing import CliRunner

import tether
from tether.cli.main import app
from tether.contracts.money import usd
from tether.server import create_app

APP = '''
import os
import tether
from tether.testing import Reply

fake = tether.models.fake("fake", script=lambda r: Reply(text="hi", input_tokens=10, output_tokens=5),
                          prices={"m": tether.Price(input=1.0, output=2.0)})

@tether.workflow(name="hello")
async def hello(ctx):
    return await ctx.agent("hello")

engine = tether.Engine(models=[fake], routing={"loop": "fake:m"}, store=os.environ["PRECISION_STORE"],
                       workflows=[hello])
'''


@pytest.mark.parametrize(("value", "text"), [(0.001, "0.001"), (0.005, "0.005"), (0.2, "0.20"), (0.03612, "0.03612"),
                                             (0.0361200001, "0.03612"), (0.199992, "0.199992"), (1.5, "1.50"),
                                             (0.0, "0.00"), (12.3456789, "12.3457")])
def test_a_usd_amount_prints_to_its_precision(value: float, text: str) -> None:
    assert usd(value) == text


def test_a_0001_ceiling_prints_0001_in_run_resume_and_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "precision_app.py").write_text(APP)
    monkeypatch.setenv("PRECISION_STORE", f"sqlite:///{tmp_path}/t.db")
    monkeypatch.syspath_prepend(str(tmp_path))
    env = {"COLUMNS": "200"}
    run = CliRunner().invoke(app, ["run", "precision_app:hello", "--app", "precision_app:engine", "--run-id", "p",
                                   "--budget", "0.001", "--no-progress"], env=env)
    assert run.exit_code == 0, run.output
    assert "of 0.001 USD ceiling" in run.output and "0.00 USD ceiling" not in run.output
    resumed = CliRunner().invoke(app, ["resume", "p", "--app", "precision_app:engine", "--no-progress"], env=env)
    assert resumed.exit_code == 0, resumed.output
    assert "of 0.001 USD ceiling" in resumed.output
    runs = CliRunner().invoke(app, ["runs", "--store", f"sqlite:///{tmp_path}/t.db"], env=env)
    (row,) = [line for line in runs.output.splitlines() if "│ p " in line]
    assert "0.001 " in row and "0.00 " not in row.replace("0.001 ", "")

    app_ = create_app(tether.Engine(store=f"sqlite:///{tmp_path}/t.db"), mode="store", owns_engine=True)
    with uvicorn_thread(app_) as base, sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport=WIDE)
        page.goto(base + "/")
        expect(page.locator("tr[data-run-id='p']")).to_contain_text("/ $0.001", timeout=TIMEOUT_MS)
        page.goto(base + "/#/runs/p")
        expect(page.get_by_test_id("spend-chart")).to_contain_text("ceiling $0.001", timeout=TIMEOUT_MS)
        browser.close()


def test_the_inspector_shows_a_forks_figures_from_its_cost_report(tmp_path: Path) -> None:
    made = make_forked(tmp_path)

    async def reports() -> tuple[tether.CostReport, tether.RunDiff]:
        engine = tether.Engine(store=made.url)
        try:
            return await engine.cost("f1"), await engine.diff("src", "f1")
        finally:
            await engine.close()

    report, diff = asyncio.run(reports())
    js = "$" + usd(report.total_usd)
    app_ = create_app(tether.Engine(store=made.url), mode="store", owns_engine=True)
    with uvicorn_thread(app_) as base, sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport=WIDE)
        errors = watch_errors(page)
        page.goto(base + "/#/runs/f1")
        expect(page.locator("[data-testid=stat-spent] .stat-value")).to_have_text(js, timeout=TIMEOUT_MS)
        expect(page.get_by_test_id("lineage-spend")).to_contain_text(
            f"reused ${usd(report.reused_usd)} ({report.reused_calls} calls, paid by the source) · new spend {js}")
        expect(page.get_by_test_id("chart-total")).to_contain_text(f"spent {js}")
        # the chart draws only the fork's own agents: reused money is not spend from 0 ms
        expect(page.locator("[data-testid=spend-chart] svg")).to_have_attribute(
            "data-points", str(report.provider_calls))
        expect(page.get_by_test_id("node-reused")).to_have_count(report.reused_calls)
        journal = page.get_by_test_id("journal")
        expect(journal.locator("tr[data-reuse]").first).to_be_visible()
        assert "+-" not in journal.inner_text()  # copied rows show their source time, not negative offsets
        expect(page.get_by_test_id("source-time").first).to_contain_text("src ")

        page.goto(base + "/#/runs/src/diff/f1")
        expect(page.get_by_test_id("diff-row")).to_have_count(len(diff.calls), timeout=TIMEOUT_MS)
        expect(page.get_by_test_id("diff-b-usd")).to_have_text(f"{js} (+ ${usd(report.reused_usd)} reused)")
        cells = page.locator("tr[data-testid=diff-row] td[data-reused]")
        own = reused = 0.0
        for i in range(cells.count()):
            cell = cells.nth(i)
            if cell.get_attribute("data-reused") is None:
                continue
            value = float(cell.get_attribute("data-usd") or 0)
            if i % 2 == 1:  # the fork's side (each row: the source's cost cell, then the fork's)
                if cell.get_attribute("data-reused") == "true":
                    reused += value
                else:
                    own += value
        assert own == pytest.approx(report.total_usd) and reused == pytest.approx(report.reused_usd)
        assert json.dumps(errors) == "[]"
        browser.close()
