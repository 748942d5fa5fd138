"""The inspector's session page in Chromium: the turn tree with a branch, each turn's status and cost."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest
from playwright.sync_api import Browser, expect
from session_app import build

sys.path.insert(0, str(Path(__file__).parents[1] / "server"))  # the server tests' browser and uvicorn kits
from browser_kit import TIMEOUT_MS, WIDE, browser, watch_errors  # noqa: F401  (browser: the fixture)
from server_kit import uvicorn_thread

from tether.server import create_app


def make_session(url: str, log: str) -> dict[str, float]:
    async def go() -> dict[str, float]:
        engine, support = build(url, log)
        s = engine.session("desk", workspace="acme", budget_usd=1.0)
        await s.send("hello", workflow=support)
        await s.send("where is order 5", workflow=support)
        await s.branch(1)
        await s.send("another question", workflow=support)
        costs = {t.run_id or "": (await engine.cost(t.run_id or "")).total_usd for t in await s.turns()}
        await engine.close()
        return costs

    return asyncio.run(go())


@pytest.fixture
def recorded(tmp_path: Path) -> tuple[str, dict[str, float]]:
    url = f"sqlite:///{tmp_path}/t.db"
    return url, make_session(url, str(tmp_path / "log.jsonl"))


def test_the_session_page_draws_the_turn_tree_with_a_branch_and_per_turn_cost(
    recorded: tuple[str, dict[str, float]], browser: Browser, tmp_path: Path  # noqa: F811  (the imported fixture)
) -> None:
    url, costs = recorded
    engine, _ = build(url, str(tmp_path / "log.jsonl"))
    with uvicorn_thread(create_app(engine, mode="store", owns_engine=True)) as base:
        page = browser.new_page(viewport=WIDE)
        errors = watch_errors(page)
        page.goto(base + "/#/")
        page.get_by_test_id("sessions-link").click()
        page.locator("[data-testid=session-list] a", has_text="desk").click()
        tree = page.get_by_test_id("turn-tree")
        expect(tree).to_be_visible(timeout=TIMEOUT_MS)
        turns = page.get_by_test_id("turn")
        expect(turns).to_have_count(3)
        first = page.locator("li[data-index='1']")
        # the branch: turn 1 has two children, drawn nested under it
        expect(first.locator(":scope > ul > li")).to_have_count(2)
        expect(first.get_by_test_id("branch-point").first).to_have_text("2 lines")
        expect(page.locator("li[data-index='1'] > ul > li[data-index='2']")).to_have_count(1)
        expect(page.locator("li[data-index='1'] > ul > li[data-index='3']")).to_have_count(1)
        expect(page.locator("li[data-head='true']")).to_have_attribute("data-index", "3")
        for run_id, cost in costs.items():
            row = page.locator(f"li[data-run-id='{run_id}']")
            expect(row).to_have_attribute("data-status", "ok")
            assert float(row.get_attribute("data-cost") or "nan") == cost  # the cost report's figure
            expect(row.locator(":scope > .turn-row [data-testid=turn-cost]")).to_have_text(
                "$" + f"{cost:.4f}".rstrip("0"))
        page.locator("li[data-index='2'] > .turn-row a").click()
        expect(page).to_have_url(base + "/#/runs/desk.2")
        assert errors == []
