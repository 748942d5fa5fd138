"""The inspector's spend chart labels its USD axis in full, and a source run's page lists its forks (issue 44, item 7):
the `GET /api/runs/{id}/forks` route, then Chromium."""

from __future__ import annotations

import asyncio
import re

import pytest
from browser_kit import TIMEOUT_MS, WIDE, watch_errors
from playwright.sync_api import Browser, Page, expect
from server_kit import uvicorn_thread
from starlette.testclient import TestClient

import tether
from tether.server import create_app
from tether.testing import Reply

USD_LABEL = re.compile(r"^\$\d+\.\d{2,}$")


def engine_on(url: str, price: tether.Price) -> tether.Engine:
    fake = tether.models.fake("fake", script=lambda r: Reply(text=f"re: {r.messages[-1].text_content}",
                                                             input_tokens=10, output_tokens=5), prices={"m": price})
    return tether.Engine(models=[fake], routing={"loop": "fake:m"}, store=url)


def trio(tag: str = "") -> object:
    @tether.workflow(name="trio")
    async def run(ctx: tether.Ctx) -> list[str]:
        return [await ctx.agent(f"part {i}{tag}", label=f"p{i}") for i in range(3)]

    return run


async def record(url: str) -> None:
    """`cheap` (micro-dollar calls, no ceiling) with two forks, `free` (a free model, nothing spent) and `lone`."""
    engine = engine_on(url, tether.Price(input=1.0, output=2.0))
    try:
        assert (await engine.run(trio(), run_id="cheap")).status == "ok"
        assert (await engine.run(trio(), run_id="lone")).status == "ok"
        assert (await engine.fork("cheap", "cheap-b", trio(" (edited)"))).status == "ok"
        assert (await engine.fork("cheap", "cheap-c", trio(), at=4)).status == "ok"
        assert (await engine.fork("cheap-b", "cheap-b2", trio(" (again)"))).status == "ok"  # a fork of a fork
    finally:
        await engine.close()
    free = engine_on(url, tether.Price.free())
    try:
        assert (await free.run(trio(), run_id="free")).status == "ok"
    finally:
        await free.close()


@pytest.fixture
def recorded(store_url: str) -> str:
    asyncio.run(record(store_url))
    return store_url


def test_the_forks_route_lists_a_runs_forks_oldest_first(recorded: str) -> None:
    app = create_app(tether.Engine(store=recorded), mode="store", owns_engine=True)
    with TestClient(app, base_url="http://localhost") as client:
        body = client.get("/api/runs/cheap/forks").json()
        assert body["run_id"] == "cheap"
        assert [(f["run_id"], f["status"], f["at"]) for f in body["forks"]] == [("cheap-b", "ok", None),
                                                                               ("cheap-c", "ok", 4)]
        assert [f["run_id"] for f in client.get("/api/runs/cheap-b/forks").json()["forks"]] == ["cheap-b2"]
        assert client.get("/api/runs/lone/forks").json()["forks"] == []
        missing = client.get("/api/runs/nope/forks")
        assert missing.status_code == 404 and missing.json()["error"]["code"] == "run-not-found"
        op = client.get("/api/openapi.json").json()["paths"]["/api/runs/{run_id}/forks"]["get"]
        assert op["responses"]["200"]["content"]["application/json"]["schema"] == {
            "$ref": "#/components/schemas/ForkList"}


def y_labels(page: Page, run_id: str, base: str) -> list[str]:
    """The chart's y-axis labels, each checked to sit wholly inside the chart (none cut at its left edge)."""
    page.goto(f"{base}/#/runs/{run_id}")
    labels = page.locator("[data-testid=spend-chart] [data-testid=y-label]")
    expect(labels.first).to_be_visible(timeout=TIMEOUT_MS)
    svg = page.locator("[data-testid=spend-chart] svg").bounding_box()
    assert svg is not None
    texts = []
    for i in range(labels.count()):
        box = labels.nth(i).bounding_box()
        assert box is not None and box["x"] >= svg["x"], (labels.nth(i).text_content(), box, svg)
        texts.append(labels.nth(i).text_content() or "")
    expect(page.get_by_test_id("y-axis-title")).to_have_text("USD")
    return texts


def test_the_spend_chart_labels_its_usd_axis_in_full(recorded: str, browser: Browser) -> None:
    app = create_app(tether.Engine(store=recorded), mode="store", owns_engine=True)
    with uvicorn_thread(app) as base:
        page = browser.new_page(viewport=WIDE)
        errors = watch_errors(page)
        cheap = y_labels(page, "cheap", base)  # three calls of 0.00002 USD: micro-dollar ticks
        assert len(cheap) >= 3 and all(USD_LABEL.match(t) for t in cheap), cheap
        assert cheap[0] == "$0.00" and "$0.00002" in cheap and cheap == sorted(cheap, key=lambda t: float(t[1:]))
        free = y_labels(page, "free", base)  # nothing spent, no ceiling: a scale of cents
        assert free == ["$0.00", "$0.005", "$0.01"], free
        assert errors == []


def test_a_source_runs_page_lists_its_forks_and_links_to_them(recorded: str, browser: Browser) -> None:
    app = create_app(tether.Engine(store=recorded), mode="store", owns_engine=True)
    with uvicorn_thread(app) as base:
        page = browser.new_page(viewport=WIDE)
        errors = watch_errors(page)
        page.goto(base + "/#/runs/cheap")
        forks = page.get_by_test_id("forks")
        expect(forks).to_contain_text("2 forks", timeout=TIMEOUT_MS)
        links = forks.get_by_test_id("fork-link")
        expect(links).to_have_text(["cheap-b", "cheap-c"])
        expect(forks).to_contain_text("at seq 4")
        links.first.click()
        expect(page).to_have_url(base + "/#/runs/cheap-b")
        expect(page.locator(".run-id")).to_have_text("cheap-b", timeout=TIMEOUT_MS)
        expect(page.get_by_test_id("lineage")).to_contain_text("forked from cheap")
        expect(page.get_by_test_id("forks").get_by_test_id("fork-link")).to_have_text(["cheap-b2"])

        page.goto(base + "/#/runs/cheap")
        page.get_by_test_id("forks").get_by_test_id("fork-diff").nth(1).click()
        expect(page).to_have_url(base + "/#/runs/cheap/diff/cheap-c")
        expect(page.get_by_test_id("diff-row")).to_have_count(3, timeout=TIMEOUT_MS)

        page.goto(base + "/#/runs/lone")
        expect(page.locator(".run-id")).to_have_text("lone", timeout=TIMEOUT_MS)
        expect(page.get_by_test_id("stat-spent")).to_be_visible()
        expect(page.get_by_test_id("forks")).to_have_count(0)  # a run nobody forked lists none
        assert errors == []
