"""The inspector end to end: uvicorn on a free port, Debian's headless Chromium driven by Playwright.

Screenshots land in the artifact directory, `$TETHER_ARTIFACTS_DIR/inspector/` (default
`test-artifacts/inspector/` at the repository root, gitignored), where CI keeps them; with
TETHER_SCREENSHOTS_DIR set (e.g. docs/img) they are copied there too, which is how
docs/img/inspector*.png are made.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import shutil
import socket
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from browser_kit import NARROW, TIMEOUT_MS, WIDE, watch_errors
from playwright.sync_api import Browser, Page, expect
from server_apps import make_engine, record_research

from tether.contracts.money import usd
from tether.server import create_app

REPO = Path(__file__).resolve().parents[2]


def artifacts_dir() -> Path:
    """Where screenshots are kept for CI: `$TETHER_ARTIFACTS_DIR/inspector`, else `test-artifacts/inspector`."""
    root = os.environ.get("TETHER_ARTIFACTS_DIR") or str(REPO / "test-artifacts")
    return Path(root) / "inspector"


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


def shoot(page: Page, name: str, *, full_page: bool = False) -> Path:
    path = artifacts_dir() / name
    path.parent.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(path), full_page=full_page)
    target = os.environ.get("TETHER_SCREENSHOTS_DIR")
    if target:
        Path(target).mkdir(parents=True, exist_ok=True)
        shutil.copy(path, Path(target) / name)
    assert path.stat().st_size > 10_000
    return path


def get(base: str, path: str) -> dict[str, object]:
    with urllib.request.urlopen(base + path, timeout=30) as resp:
        out: dict[str, object] = json.loads(resp.read())
        return out


def js_usd(v: float) -> str:
    """The inspector's `usd()` (app.js): the CLI's rule (six significant digits, at least two decimals)."""
    return "$" + usd(v)


def js_dur(sec: float) -> str:
    """The inspector's `dur()` (app.js)."""
    if sec < 1:
        return f"{math.floor(sec * 1000 + 0.5)} ms"
    if sec < 60:
        return f"{sec:.{2 if sec < 10 else 1}f} s"
    return f"{math.floor(sec / 60)}m {math.floor(sec % 60 + 0.5):02d}s"


def post(base: str, path: str, body: dict[str, object]) -> dict[str, object]:
    req = urllib.request.Request(base + path, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json", "X-Tether-Request": "1"})
    with urllib.request.urlopen(req, timeout=30) as resp:
        out: dict[str, object] = json.loads(resp.read())
        return out


def test_a_recorded_run_shows_its_tree_spend_chart_journal_and_ledger(server: str, browser: Browser) -> None:
    page = browser.new_page(viewport=WIDE)
    errors = watch_errors(page)
    page.goto(server + "/")
    row = page.locator("tr[data-run-id='research-1']")
    expect(row).to_have_attribute("data-status", "ok", timeout=TIMEOUT_MS)
    expect(row).to_contain_text("$0.09096")
    expect(row).to_contain_text("/ $0.25")
    (listed,) = get(server, "/api/runs")["runs"]  # type: ignore[misc]
    assert listed["run_id"] == "research-1" and listed["duration_s"] > 1  # the stepping clock spread it
    cells = row.locator("td")
    expect(cells).to_have_count(6)
    expect(cells.nth(4)).to_have_text(js_dur(listed["duration_s"]))  # Duration
    started = cells.nth(3)  # Started: relative to now, the exact time in its title
    before = time.time() - listed["created_at"]
    started_text = started.inner_text()
    after = time.time() - listed["created_at"]
    assert started_text in {f"{math.floor(d / 60 + 0.5)} min ago" for d in (before, after)}, started_text
    exact = page.evaluate("ts => new Date(ts * 1000).toLocaleString()", listed["created_at"])
    assert exact and started.get_attribute("title") == exact
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
    agents = get(server, "/api/runs/research-1/tree")["agents"]
    assert isinstance(agents, list) and len(agents) == 5
    assert len({a["cost_usd"] for a in agents}) == 5 and all(a["cost_usd"] > 0 for a in agents)
    for agent in agents:  # each node shows its own cost (and tokens), not its parent's or the run's
        meta = page.locator(f"[data-testid=agent-node][data-agent-id='{agent['agent_id']}'] > .meta")
        expect(meta.locator("[title=cost]")).to_have_text(js_usd(agent["cost_usd"]))
        expect(meta).to_contain_text(f"{agent['tokens']:,} tok")
    assert sum(a["cost_usd"] for a in agents) == pytest.approx(listed["spent_usd"])
    chart = page.locator("[data-testid=spend-chart] svg")
    expect(chart).to_have_attribute("data-points", "5")
    expect(page.locator("[data-testid=ceiling-line]")).to_have_count(1)
    expect(page.locator("[data-testid=spend-chart]")).to_contain_text("ceiling $0.25")
    with urllib.request.urlopen(server + "/api/runs/research-1/journal?limit=1000", timeout=30) as resp:
        journaled = len(json.loads(resp.read())["entries"])
    with urllib.request.urlopen(server + "/api/runs/research-1/ledger", timeout=30) as resp:
        ledgered = len(json.loads(resp.read())["records"])
    expect(page.locator("[data-testid=journal] tbody tr")).to_have_count(journaled)
    expect(page.locator("[data-testid=ledger] tbody tr")).to_have_count(ledgered)
    expect(page.locator("[data-testid=run-status]")).to_have_attribute("data-status", "ok")
    shoot(page, "inspector-recorded.png")

    planner.locator("[data-testid=transcript-link]").click()
    drawer = page.locator("#drawer")
    expect(drawer).to_be_visible()
    expect(drawer).to_contain_text("spawn_agent")
    expect(drawer).to_contain_text("[spawn refused] agent cap reached")
    shoot(page, "inspector-transcript.png")
    page.keyboard.press("Escape")
    expect(drawer).to_be_hidden()

    narrow = browser.new_page(viewport=NARROW)
    narrow.goto(server + "/#/runs/research-1")
    expect(narrow.locator("[data-testid=agent-node]")).to_have_count(5, timeout=TIMEOUT_MS)
    # usable on a phone-width window: nothing pushes the page sideways (wide tables scroll in place)
    assert narrow.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    assert narrow.locator("[data-testid=spend-chart] svg").bounding_box()["width"] <= NARROW["width"]  # type: ignore[index]
    shoot(narrow, "inspector-narrow.png", full_page=True)
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
    shoot(page, "inspector-live.png")

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
    shoot(page, "inspector-suspended.png")
    form.locator("[data-testid=resolve]").click()

    expect(page.locator("[data-testid=run-status]")).to_have_attribute("data-status", "ok", timeout=TIMEOUT_MS)
    expect(node("summary")).to_have_attribute("data-status", "ok", timeout=TIMEOUT_MS)
    expect(page.locator("[data-testid=suspensions]")).to_contain_text("Nothing is waiting.")
    expect(page.locator("[data-testid=agent-node]")).to_have_count(4)
    expect(page.locator(".kv")).to_contain_text('"ship": true')
    shoot(page, "inspector.png")
    assert errors == []


def test_a_suspensions_form_shows_what_it_accepts_before_anything_is_typed(server: str, browser: Browser) -> None:
    post(server, "/api/runs", {"workflow": "ship", "run_id": "ship-e2e"})
    post(server, "/api/runs", {"workflow": "triage", "run_id": "triage-e2e"})
    page = browser.new_page(viewport=NARROW)
    errors = watch_errors(page)

    page.goto(server + "/#/runs/ship-e2e")
    approval = page.locator("[data-testid=suspension]")
    expect(approval).to_be_visible(timeout=TIMEOUT_MS)
    expect(approval.locator("[data-testid=accepts]")).to_have_text("accepts exactly allow or deny")
    expect(approval.locator("[data-testid=resolve-value]")).to_have_count(0)  # nothing free-form to mistype
    approval.locator("[data-testid=resolve-deny]").click()
    expect(page.locator("[data-testid=run-status]")).to_have_attribute("data-status", "ok", timeout=TIMEOUT_MS)

    page.goto(server + "/#/runs/triage-e2e")
    form = page.locator("[data-testid=suspension][data-key='severity']")
    expect(form).to_be_visible(timeout=TIMEOUT_MS)
    expect(form.locator("[data-testid=accepts]")).to_have_text("accepts exactly low or high")
    choice = form.locator("[data-testid=resolve-choice]")
    expect(choice.locator("option")).to_have_text(["low", "high"])
    choice.select_option(label="high")
    form.scroll_into_view_if_needed()
    shoot(page, "inspector-enum-narrow.png")
    form.locator("[data-testid=resolve]").click()
    expect(page.locator("[data-testid=run-status]")).to_have_attribute("data-status", "ok", timeout=TIMEOUT_MS)
    outcome: Any = get(server, "/api/runs/triage-e2e")["outcome"]
    assert outcome["value"] == "high"
    assert errors == []
