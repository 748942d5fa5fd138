"""The inspector end to end: uvicorn on a free port, Debian's headless Chromium driven by Playwright.

Screenshots land in the test's tmp dir; with TETHER_SCREENSHOTS_DIR set (e.g. docs/img) they are
copied there too, which is how docs/img/inspector*.png are made.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import socket
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import uvicorn
from playwright.sync_api import Browser, Page, expect, sync_playwright
from server_apps import make_engine, record_research

from tether.server import create_app

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
WIDE = {"width": 1280, "height": 800}
NARROW = {"width": 390, "height": 844}
TIMEOUT_MS = 30_000


@pytest.fixture
def server(tmp_path: Path) -> Iterator[str]:
    """The app engine over a sqlite store holding the recorded run, served by uvicorn in a thread."""
    url = f"sqlite:///{tmp_path}/tether.db"
    asyncio.run(record_research(url))
    app = create_app(make_engine(url), owns_engine=True)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    srv = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=srv.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not srv.started:
        assert time.monotonic() < deadline and thread.is_alive(), "uvicorn did not start"
        time.sleep(0.02)
    yield f"http://127.0.0.1:{port}"
    srv.should_exit = True
    thread.join(30)
    sock.close()


@pytest.fixture
def browser() -> Iterator[Browser]:
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield b
        b.close()


def shoot(page: Page, tmp_path: Path, name: str, *, full_page: bool = False) -> Path:
    path = tmp_path / "screens" / name
    path.parent.mkdir(exist_ok=True)
    page.screenshot(path=str(path), full_page=full_page)
    target = os.environ.get("TETHER_SCREENSHOTS_DIR")
    if target:
        Path(target).mkdir(parents=True, exist_ok=True)
        shutil.copy(path, Path(target) / name)
    assert path.stat().st_size > 10_000
    return path


def watch_errors(page: Page) -> list[str]:
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
    return errors


def post(base: str, path: str, body: dict[str, object]) -> dict[str, object]:
    req = urllib.request.Request(base + path, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as resp:
        out: dict[str, object] = json.loads(resp.read())
        return out


def test_a_recorded_run_shows_its_tree_spend_chart_journal_and_ledger(
    server: str, browser: Browser, tmp_path: Path
) -> None:
    page = browser.new_page(viewport=WIDE)
    errors = watch_errors(page)
    page.goto(server + "/")
    row = page.locator("tr[data-run-id='research-1']")
    expect(row).to_have_attribute("data-status", "ok", timeout=TIMEOUT_MS)
    expect(row).to_contain_text("$0.0910")
    expect(row).to_contain_text("/ $0.250")
    page.locator("button[data-filter='suspended']").click()
    expect(page.locator("[data-testid=run-list]")).to_contain_text("No suspended runs.")
    page.locator("button[data-filter='all']").click()
    row.locator("a").click()

    nodes = page.locator("[data-testid=agent-node]")
    expect(nodes).to_have_count(5, timeout=TIMEOUT_MS)
    planner = page.locator("[data-testid=agent-node][data-agent-id='3']")
    expect(planner).to_contain_text("planner")
    expect(planner.locator(".refused")).to_have_text("refused: agents")
    expect(page.locator("[data-testid=agent-node][data-status='ok']")).to_have_count(5)
    expect(nodes.filter(has_text="collect benchmark numbers")).to_contain_text("4,000 tok")
    chart = page.locator("[data-testid=spend-chart] svg")
    expect(chart).to_have_attribute("data-points", "5")
    expect(page.locator("[data-testid=ceiling-line]")).to_have_count(1)
    expect(page.locator("[data-testid=spend-chart]")).to_contain_text("ceiling $0.250")
    with urllib.request.urlopen(server + "/api/runs/research-1/journal?limit=1000", timeout=30) as resp:
        journaled = len(json.loads(resp.read())["entries"])
    with urllib.request.urlopen(server + "/api/runs/research-1/ledger", timeout=30) as resp:
        ledgered = len(json.loads(resp.read())["records"])
    expect(page.locator("[data-testid=journal] tbody tr")).to_have_count(journaled)
    expect(page.locator("[data-testid=ledger] tbody tr")).to_have_count(ledgered)
    expect(page.locator("[data-testid=run-status]")).to_have_attribute("data-status", "ok")
    shoot(page, tmp_path, "inspector-recorded.png")

    planner.locator("[data-testid=transcript-link]").click()
    drawer = page.locator("#drawer")
    expect(drawer).to_be_visible()
    expect(drawer).to_contain_text("spawn_agent")
    expect(drawer).to_contain_text("[spawn refused] agent cap reached")
    shoot(page, tmp_path, "inspector-transcript.png")
    page.keyboard.press("Escape")
    expect(drawer).to_be_hidden()

    narrow = browser.new_page(viewport=NARROW)
    narrow.goto(server + "/#/runs/research-1")
    expect(narrow.locator("[data-testid=agent-node]")).to_have_count(5, timeout=TIMEOUT_MS)
    # usable on a phone-width window: nothing pushes the page sideways (wide tables scroll in place)
    assert narrow.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    assert narrow.locator("[data-testid=spend-chart] svg").bounding_box()["width"] <= NARROW["width"]  # type: ignore[index]
    shoot(narrow, tmp_path, "inspector-narrow.png", full_page=True)
    assert errors == []


def test_a_live_runs_nodes_change_state_and_its_suspension_resolves_from_the_page(
    server: str, browser: Browser, tmp_path: Path
) -> None:
    gates = tmp_path / "gates"
    gates.mkdir()
    post(server, "/api/runs", {
        "workflow": "live_panel", "run_id": "live-1", "budget_usd": 0.12,
        "args": {"question": "ship it?", "gates": str(gates)},
        "containment": {"max_agents": 8, "max_concurrent": 1, "max_depth": 1},
    })
    page = browser.new_page(viewport=WIDE)
    errors = watch_errors(page)
    page.goto(server + "/#/runs/live-1")
    node = lambda label: page.locator("[data-testid=agent-node]", has_text=label)  # noqa: E731
    queued = page.locator("[data-testid=queued-node]")

    # one slot: the first view runs (held on its gate), the other two wait in the queue
    expect(node("practical")).to_have_attribute("data-status", "running", timeout=TIMEOUT_MS)
    expect(queued).to_have_count(2)
    expect(page.locator("#conn")).to_have_attribute("data-state", "live")
    expect(page.locator("[data-testid=run-status]")).to_have_attribute("data-status", "running")
    shoot(page, tmp_path, "inspector-live.png")

    (gates / "practical").write_text("open")
    expect(node("practical")).to_have_attribute("data-status", "ok", timeout=TIMEOUT_MS)
    expect(node("skeptical")).to_have_attribute("data-status", "running", timeout=TIMEOUT_MS)
    expect(queued).to_have_count(1)

    (gates / "skeptical").write_text("open")
    (gates / "optimistic").write_text("open")
    expect(page.locator("[data-testid=run-status]")).to_have_attribute("data-status", "suspended",
                                                                     timeout=TIMEOUT_MS)
    expect(page.locator("[data-testid=agent-node][data-status='ok']")).to_have_count(3)
    expect(queued).to_have_count(0)
    form = page.locator("[data-testid=suspension][data-key='approve']")
    expect(form).to_be_visible()
    form.locator("[data-testid=resolve-value]").fill('{"ship": true}')
    shoot(page, tmp_path, "inspector-suspended.png")
    form.locator("[data-testid=resolve]").click()

    expect(page.locator("[data-testid=run-status]")).to_have_attribute("data-status", "ok", timeout=TIMEOUT_MS)
    expect(node("summary")).to_have_attribute("data-status", "ok", timeout=TIMEOUT_MS)
    expect(page.locator("[data-testid=suspensions]")).to_contain_text("Nothing is waiting.")
    expect(page.locator("[data-testid=agent-node]")).to_have_count(4)
    expect(page.locator(".kv")).to_contain_text('"ship": true')
    shoot(page, tmp_path, "inspector.png")
    assert errors == []
