"""The inspector marks an archived or redacted run: the journal's hint names the decision, and each entry whose
payload was removed carries an `archived` or `redacted` mark (Chromium)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from browser_kit import TIMEOUT_MS, WIDE, watch_errors
from playwright.sync_api import Browser, expect
from server_kit import uvicorn_thread

import tether
from tether.contracts.messages import ChatRequest
from tether.engine import redaction
from tether.server import create_app
from tether.testing import Reply

PRICES = {"m": tether.Price(input=1.0, output=2.0)}


def answer(request: ChatRequest) -> Reply:
    return Reply(text="answer to " + request.messages[0].text_content)


def engine_on(url: str) -> tether.Engine:
    return tether.Engine(models=[tether.models.fake("fake", script=answer, prices=PRICES)],
                         routing={"loop": "fake:m"}, store=url)


@tether.workflow(name="two")
async def two(ctx: tether.Ctx, topic: str) -> str:
    first = await ctx.agent(f"first on {topic}", label="first")
    return first + await ctx.agent(f"second on {topic}", label="second")


async def _record(url: str) -> tuple[list[int], list[int]]:
    engine = engine_on(url)
    try:
        await engine.run(two, {"topic": "tides"}, run_id="kept")
        await engine.run(two, {"topic": "sand"}, run_id="old")
        redacted = await redaction.redact(engine, "kept", match="tides", why="request 3")
        archived = await redaction.archive(engine, "old", why="a year old")
        return redacted.entries["kept"], archived.entries["old"]
    finally:
        await engine.close()


@pytest.fixture
def recorded(tmp_path: Path) -> tuple[str, list[int], list[int]]:
    url = f"sqlite:///{tmp_path}/t.db"
    return url, *asyncio.run(_record(url))


def test_the_journal_marks_entries_without_payload_and_names_the_decision(
    recorded: tuple[str, list[int], list[int]], browser: Browser,
) -> None:
    url, redacted, archived = recorded
    app = create_app(engine_on(url), mode="store", owns_engine=True)
    with uvicorn_thread(app) as base:
        page = browser.new_page(viewport=WIDE)
        errors = watch_errors(page)
        page.goto(base + "/#/runs/kept")
        journal = page.get_by_test_id("journal")
        expect(journal.locator("tr[data-redacted]")).to_have_count(len(redacted), timeout=TIMEOUT_MS)
        expect(journal.get_by_test_id("no-payload").first).to_have_text("redacted")
        expect(page.get_by_test_id("retention-mark")).to_have_text("redacted")
        assert page.get_by_test_id("retention-mark").get_attribute("title").find("request 3") > 0  # type: ignore[union-attr]
        assert "tides" not in journal.inner_text()

        page.goto(base + "/#/runs/old")
        expect(page.locator(".run-id")).to_have_text("old", timeout=TIMEOUT_MS)
        journal = page.get_by_test_id("journal")
        expect(journal.locator("tr[data-redacted]")).to_have_count(len(archived), timeout=TIMEOUT_MS)
        expect(journal.get_by_test_id("no-payload").first).to_have_text("archived")
        expect(page.get_by_test_id("retention-mark")).to_have_text("archived")
        page.locator("[data-testid=agent-node]").first.locator("[data-testid=transcript-link]").click()
        drawer = page.locator("#drawer")
        expect(drawer.get_by_test_id("transcript-redacted")).to_be_visible(timeout=TIMEOUT_MS)
        assert "sand" not in drawer.inner_text()
        assert errors == []
