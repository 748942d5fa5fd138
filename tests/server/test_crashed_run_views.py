"""Every view of a crashed run tells one set of figures: spent and orphaned apart, the same total everywhere.

The run (tests/budget/orphan_app.py) is SIGKILLed in a child process with two calls in flight, then resumed
here under an OpenTelemetry exporter; `tether cost`, `tether tree`, `tether inspect`, the inspector's cards and
chart (in Chromium) and the run's span are each read and compared with the cost report.
"""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

import pytest
from browser_kit import CHROMIUM, CHROMIUM_ARGS, TIMEOUT_MS, WIDE
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from playwright.sync_api import expect, sync_playwright
from server_kit import uvicorn_thread

import tether
from crashkit import APP_DIR, cli, crash_with_two_calls_in_flight, env_for, provider
from tether.contracts.money import usd as cli_usd
from tether.server import create_app


def usd(v: float) -> str:
    """The inspector's `usd()`: the CLI's rule (`tether.cli.cost_view.usd`) behind a dollar sign."""
    return "$" + cli_usd(v)


def test_cost_tree_inspect_the_inspector_and_the_span_agree_on_a_crashed_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    store = f"sqlite:///{tmp_path}/t.db"
    with provider() as base_url:
        env = {**env_for(store, base_url), "COLUMNS": "220"}
        crash_with_two_calls_in_flight("r", env)
        monkeypatch.setenv("ORPHAN_STORE", store)
        monkeypatch.setenv("ORPHAN_BASE_URL", base_url)
        monkeypatch.syspath_prepend(str(APP_DIR))
        import orphan_app

        spans = InMemorySpanExporter()
        tracing = TracerProvider()
        tracing.add_span_processor(SimpleSpanProcessor(spans))

        async def resume() -> tether.RunOutcome:
            engine = orphan_app.make_engine(tracer_provider=tracing)
            try:
                return await engine.resume("r")
            finally:
                await engine.close()

        outcome = asyncio.run(resume())
    report = outcome.cost
    assert outcome.status == "exhausted" and report.orphaned_calls == 2
    total, spent, orphaned = report.total_usd, report.spent_usd, report.orphaned_usd
    assert orphaned > 0.15 and spent > 0 and total == pytest.approx(spent + orphaned)

    # tether cost: the total split into spent and orphaned, and a line naming the cut calls
    text = " ".join(cli("cost", "r", "--store", store, env=env).stdout.split())
    assert f"total {cli_usd(total)} USD of 0.20 USD ceiling ({cli_usd(spent)} spent + {cli_usd(orphaned)} orphaned)" in text
    assert f"orphaned {cli_usd(orphaned)} USD for 2 calls cut off by a crash, charged at their worst case" in text
    assert json.loads(cli("cost", "r", "--store", store, "--json", env=env).stdout)["total_usd"] == total

    # tether tree: the nodes sum to the total, their orphaned parts to the orphaned figure
    tree = cli("tree", "r", "--store", store, env=env).stdout
    assert f"{cli_usd(total)} USD ({cli_usd(orphaned)} orphaned)" in tree
    nodes = [float(m) for m in re.findall(r"calls\s+(\d+\.\d+) USD", tree)]
    assert sum(nodes) == pytest.approx(total)
    cut = re.findall(r"\+ (\d+\.\d+) orphaned: (\d) cut", tree)
    assert sum(float(u) for u, _ in cut) == pytest.approx(orphaned) and sum(int(n) for _, n in cut) == 2

    # tether runs: spent and orphaned apart, next to the ceiling, from the same fold
    (listed,) = json.loads(cli("runs", "--store", store, "--json", env=env).stdout)
    assert (listed["spent_usd"], listed["orphaned_usd"], listed["total_usd"]) == (spent, orphaned, total)
    assert listed["budget_usd"] == 0.2
    (row,) = [line for line in cli("runs", "--store", store, env=env).stdout.splitlines() if "│ r " in line]
    assert [f"{cli_usd(spent)}", f"{cli_usd(orphaned)}", "0.20"] == re.findall(r"\d+\.\d+", row)

    # tether inspect: the two dispatch records the crash cut off are marked
    inspect = cli("inspect", "r", "--store", store, env=env).stdout
    assert inspect.count("(cut: charged at its worst case)") == 2

    # the run's span: the same three figures
    [run_span] = [s for s in spans.get_finished_spans() if s.name == "workflow pair"]
    attrs = dict(run_span.attributes or {})
    assert attrs["tether.cost_usd"] == total and attrs["tether.orphaned_usd"] == orphaned
    assert attrs["tether.spent_usd"] == pytest.approx(spent) and attrs["tether.orphaned_calls"] == 2

    # the inspector: the Spent card, its split, the chart's line end and the journal's cut rows
    app = create_app(tether.Engine(store=store), mode="store", owns_engine=True)
    with uvicorn_thread(app) as url, sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport=WIDE)
        page.set_default_timeout(TIMEOUT_MS)
        page.goto(f"{url}/#/runs/r")
        expect(page.locator("[data-testid=stat-spent] .stat-value")).to_have_text(usd(total))
        expect(page.locator("[data-testid=stat-orphaned]")).to_contain_text(
            f"{usd(spent)} spent + {usd(orphaned)} orphaned (2 cut calls)")
        expect(page.locator("[data-testid=chart-total]")).to_contain_text(f"spent {usd(total)} ({usd(orphaned)} orphaned)")
        expect(page.locator("[data-testid=cut-dispatch]")).to_have_count(2)
        browser.close()
