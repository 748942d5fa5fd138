"""The inspector's raise form on a run parked on its `budget` suspension, in Chromium: it says what the run needs,
and submitting a raise resolves the suspension and resumes the run here, its stopped agent continuing from its
checkpoint (the fake provider's request log shows no turn sent twice)."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest
from browser_kit import TIMEOUT_MS, WIDE, watch_errors
from playwright.sync_api import Browser, expect
from server_kit import uvicorn_thread

from crashkit import APP_DIR
from tether.server import create_app

sys.path.insert(0, str(APP_DIR))
import raise_app  # the app lives beside the budget tests


@pytest.fixture
def parked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Run `p` until its ceiling parks it on `budget:1` (before the browser's loop starts); its request log."""
    monkeypatch.setenv("RAISE_STORE", f"sqlite:///{tmp_path}/t.db")
    monkeypatch.setenv("RAISE_LOG", str(tmp_path / "requests.log"))

    async def park() -> str:
        engine = raise_app.make_engine()
        try:
            out = await engine.run(raise_app.stopping, run_id="p", budget_usd=raise_app.CEILING_USD,
                                   on_exhausted="suspend")
            return out.status
        finally:
            await engine.close()

    assert asyncio.run(park()) == "suspended"
    assert raise_app.sent_turns(tmp_path / "requests.log") == [0, 1]
    return tmp_path / "requests.log"


def test_the_inspector_raises_a_parked_runs_ceiling_and_the_run_continues(parked: Path, browser: Browser) -> None:
    with uvicorn_thread(create_app(raise_app.make_engine(), owns_engine=True)) as base:
        page = browser.new_page(viewport=WIDE)
        errors = watch_errors(page)
        page.goto(base + "/#/runs/p")
        form = page.locator("[data-testid=suspension][data-key='budget:1']")
        expect(form).to_be_visible(timeout=TIMEOUT_MS)
        expect(form.locator("[data-testid=budget-need]")).to_contain_text("$0.005 ceiling stopped agent #1")
        expect(form.locator("[data-testid=budget-need]")).to_contain_text("output-floor")
        expect(form.locator("[data-testid=raise-usd]")).to_have_value("0.01")  # the suggested raise
        form.locator("[data-testid=raise-usd]").fill("1")
        form.locator("[data-testid=raise-reason]").fill("approved in the inspector")
        form.locator("[data-testid=raise]").click()
        expect(page.locator("[data-testid=run-status]")).to_have_attribute("data-status", "ok", timeout=TIMEOUT_MS)
        assert errors == []
    assert raise_app.sent_turns(parked) == [0, 1, 2, 3]  # 0 turns paid again
