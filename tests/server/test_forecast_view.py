"""The inspector shows the forecast a `forecast_gate` judged a run by beside its ceiling (in Chromium), and the API's
run detail carries it typed; a run parked on the gate lists its `forecast` suspension."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

import pytest
from browser_kit import TIMEOUT_MS, WIDE, watch_errors
from playwright.sync_api import Browser, expect
from server_kit import uvicorn_thread
from starlette.testclient import TestClient

import tether
from crashkit import APP_DIR
from tether.contracts.money import usd
from tether.server import create_app

sys.path.insert(0, str(APP_DIR))
from forecast_kit import research, stochastic_model  # the workload lives beside the budget tests

ARGS = {"topic": "x"}


def make_engine(url: str) -> tether.Engine:
    return tether.Engine(models=[stochastic_model(21)], routing={"loop": "fake:m"}, workflows=[research], store=url)


@pytest.fixture
def gated(tmp_path: Path) -> tuple[str, Any]:
    """20 runs of history, then `g` parked by `forecast_gate="suspend"` under half its P95; (store URL, forecast)."""
    url = f"sqlite:///{tmp_path}/t.db"

    async def park() -> tuple[tether.Forecast, str]:
        engine = make_engine(url)
        try:
            for i in range(20):
                await engine.run(research, ARGS, run_id=f"h{i}")
            f = await engine.forecast(research, ARGS)
            assert f.p95_usd is not None
            out = await engine.run(research, ARGS, run_id="g", budget_usd=f.p95_usd / 2, forecast_gate="suspend")
            return f, out.status
        finally:
            await engine.close()

    f, status = asyncio.run(park())
    assert status == "suspended"
    return url, f


def test_the_run_detail_carries_the_judged_forecast_beside_the_ceiling(gated: tuple[str, Any]) -> None:
    url, f = gated
    with TestClient(create_app(make_engine(url), owns_engine=True), base_url="http://localhost",
                    headers={"X-Tether-Request": "1"}) as client:
        det = client.get("/api/runs/g").json()
        judged = det["ceilings"]["forecast"]
        assert judged["p95_usd"] == f.p95_usd and judged["p50_usd"] == f.cost_usd.p50 and judged["over"] is True
        assert judged["limit_usd"] == det["ceilings"]["budget_usd"] == pytest.approx(f.p95_usd / 2)
        assert [s["key"] for s in det["suspensions"]] == ["forecast"]
        assert client.get("/api/runs/h0").json()["ceilings"]["forecast"] is None  # no gate, no forecast


def test_the_inspector_shows_the_forecast_beside_the_ceiling(gated: tuple[str, Any], browser: Browser) -> None:
    url, f = gated
    with uvicorn_thread(create_app(make_engine(url), owns_engine=True)) as base:
        page = browser.new_page(viewport=WIDE)
        errors = watch_errors(page)
        page.goto(base + "/#/runs/g")
        shown = page.locator("[data-testid=stat-spent] [data-testid=stat-forecast]")
        expect(shown).to_be_visible(timeout=TIMEOUT_MS)
        expect(shown).to_contain_text(f"forecast P95 ${usd(f.p95_usd)}")
        expect(shown).to_contain_text("(20 runs)")
        expect(shown).to_contain_text("over its limit")
        expect(shown).to_have_attribute("data-over", "true")
        page.goto(base + "/#/runs/h0")
        expect(page.locator("[data-testid=stat-spent]")).to_be_visible(timeout=TIMEOUT_MS)
        expect(page.locator("[data-testid=stat-forecast]")).to_have_count(0)
        assert errors == []
