"""The inspector's fork views: a fork's lineage and reused entries, and the diff of two runs (API and Chromium).

The source is a ten-call chain on the fake provider; the fork edits its 7th prompt, so it reuses 6 calls
and pays for 4.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Callable, Iterator

import pytest
from browser_kit import TIMEOUT_MS, WIDE, watch_errors
from playwright.sync_api import Browser, expect
from server_kit import uvicorn_thread
from starlette.testclient import TestClient

import tether
from tether.contracts.messages import ChatRequest
from tether.server import create_app
from tether.testing import Reply

PRICES = {"m": tether.Price(input=1.0, output=2.0)}
ARGS = {"topic": "tides"}


def answer(request: ChatRequest) -> Reply:
    """A deterministic answer per prompt (so an edited prompt changes every answer after it)."""
    digest = hashlib.sha256(request.messages[-1].text_content.encode()).hexdigest()
    return Reply(text=(digest * 4)[:200])


def engine_on(url: str) -> tether.Engine:
    return tether.Engine(models=[tether.models.fake("fake", script=answer, prices=PRICES)],
                         routing={"loop": "fake:m"}, store=url)


def chain(changed: int | None = None) -> Callable[..., object]:
    """Ten agent calls, each prompt built from the previous answer; `changed` edits that call's prompt."""

    @tether.workflow(name="chain")
    async def run(ctx: tether.Ctx, topic: str) -> str:
        last = topic
        for i in range(1, 11):
            last = await ctx.agent(f"step {i}{' (edited)' if i == changed else ''}: go on from {last[:40]}",
                                   label=f"c{i}")
        return last

    return run


async def record_fork(url: str) -> tuple[tether.CostReport, tether.CostReport]:
    """Run `src`, then fork it as `fork-1` with the 7th prompt edited; their cost reports."""
    engine = engine_on(url)
    try:
        assert (await engine.run(chain(), ARGS, run_id="src", budget_usd=1.0)).status == "ok"
        assert (await engine.fork("src", "fork-1", chain(changed=7))).status == "ok"
        return await engine.cost("src"), await engine.cost("fork-1")
    finally:
        await engine.close()


@pytest.fixture
def forked(store_url: str) -> tuple[str, tether.CostReport, tether.CostReport]:
    src, fork = asyncio.run(record_fork(store_url))
    return store_url, src, fork


@pytest.fixture
def client(forked: tuple[str, tether.CostReport, tether.CostReport]) -> Iterator[TestClient]:
    app = create_app(engine_on(forked[0]), mode="store", owns_engine=True)
    with TestClient(app, base_url="http://localhost") as c:
        yield c


def test_a_forks_detail_carries_its_lineage_and_the_cost_reports_reused_and_new_spend(
    client: TestClient, forked: tuple[str, tether.CostReport, tether.CostReport]
) -> None:
    _, _, fork_cost = forked
    lineage = client.get("/api/runs/fork-1").json()["lineage"]
    assert lineage["forked_from"] == "src" and lineage["at"] is None
    assert lineage["reused_calls"] == 6 == fork_cost.reused_calls
    assert lineage["reused_usd"] == pytest.approx(fork_cost.reused_usd) and lineage["reused_usd"] > 0
    assert lineage["new_usd"] == pytest.approx(fork_cost.total_usd) and lineage["new_usd"] > 0
    assert lineage["diff"] == "/api/runs/src/diff/fork-1"


def test_a_run_that_is_not_a_fork_has_no_lineage_and_no_reuse_marks(client: TestClient) -> None:
    assert client.get("/api/runs/src").json()["lineage"] is None
    assert client.get("/api/runs/src/journal").json()["reuse"] == []


def test_the_forks_journal_marks_its_copied_entries_with_their_source_seqs(client: TestClient) -> None:
    page = client.get("/api/runs/fork-1/journal").json()
    reused_through = client.get("/api/runs/fork-1").json()["lineage"]["reused_through"]
    marks = {m["seq"]: m for m in page["reuse"]}
    assert sorted(marks) == list(range(2, reused_through + 1))  # every copy but the fork's own genesis
    source = {e["seq"]: e for e in client.get("/api/runs/src/journal").json()["entries"]}
    entries = {e["seq"]: e for e in page["entries"]}
    for seq, mark in marks.items():
        assert (source[mark["source_seq"]]["kind"], source[mark["source_seq"]]["label"]) == (
            entries[seq]["kind"], entries[seq]["label"])
    reused_labels = {entries[s]["label"] for s, m in marks.items() if m["reused"] and entries[s]["kind"] == "agent"}
    assert reused_labels == {f"c{i}" for i in range(1, 7)}
    lost = [entries[s] for s, m in marks.items() if not m["reused"]]
    lost_calls = {e["agent_id"]: e["label"] for e in lost if e["kind"] == "agent"}
    assert set(lost_calls.values()) == {f"c{i}" for i in range(7, 11)}  # copied, never reached by the edited code
    assert {e["agent_id"] for e in lost} == set(lost_calls)  # their draws and dispatches with them


def test_a_fork_at_a_seq_names_it_and_marks_only_entries_before_it(
    client: TestClient, forked: tuple[str, tether.CostReport, tether.CostReport]
) -> None:
    source = client.get("/api/runs/src/journal").json()["entries"]
    at = next(e["seq"] for e in source if e["kind"] == "agent" and e["label"] == "c5" and e["ref"] is None)

    async def fork_at() -> None:
        engine = engine_on(forked[0])
        try:
            assert (await engine.fork("src", "fork-at", chain(), at=at)).status == "ok"
        finally:
            await engine.close()

    asyncio.run(fork_at())
    lineage = client.get("/api/runs/fork-at").json()["lineage"]
    assert (lineage["forked_from"], lineage["at"], lineage["reused_calls"]) == ("src", at, 4)
    marks = client.get("/api/runs/fork-at/journal").json()["reuse"]
    assert marks and all(m["reused"] and m["source_seq"] < at for m in marks)


def test_a_journal_page_marks_only_its_own_copied_entries(client: TestClient) -> None:
    page = client.get("/api/runs/fork-1/journal", params={"limit": 3, "cursor": "1"}).json()
    assert [m["seq"] for m in page["reuse"]] == [e["seq"] for e in page["entries"]] == [2, 3, 4]


def test_the_diff_route_answers_what_engine_diff_returns(
    client: TestClient, forked: tuple[str, tether.CostReport, tether.CostReport]
) -> None:
    async def expected() -> tether.RunDiff:
        engine = engine_on(forked[0])
        try:
            return await engine.diff("src", "fork-1")
        finally:
            await engine.close()

    got = client.get("/api/runs/src/diff/fork-1")
    assert got.status_code == 200
    body = got.json()
    assert body == expected_json(asyncio.run(expected()))
    assert [c["label"] for c in body["calls"]] == [f"c{i}" for i in range(1, 11)]
    assert [c["reused"] for c in body["calls"]] == [True] * 6 + [False] * 4
    assert all(c["a"]["output"] != c["b"]["output"] for c in body["calls"][6:])
    assert body["b_reused_usd"] == pytest.approx(forked[2].reused_usd)


def expected_json(diff: tether.RunDiff) -> object:
    return diff.model_dump(mode="json")


@pytest.mark.parametrize("path", ["/api/runs/nope/diff/fork-1", "/api/runs/src/diff/nope"])
def test_a_diff_naming_an_unknown_run_is_404_run_not_found(client: TestClient, path: str) -> None:
    got = client.get(path)
    assert got.status_code == 404
    assert got.json()["error"]["code"] == "run-not-found" and got.json()["error"]["data"]["run_id"] == "nope"


def test_an_unknown_runs_detail_is_404(client: TestClient) -> None:
    got = client.get("/api/runs/nope")
    assert got.status_code == 404 and got.json()["error"]["code"] == "run-not-found"


def test_the_openapi_document_lists_the_diff_route_and_the_lineage_models(client: TestClient) -> None:
    doc = client.get("/api/openapi.json").json()
    op = doc["paths"]["/api/runs/{run_id}/diff/{other}"]["get"]
    assert op["operationId"] == "get_diff"
    assert op["responses"]["200"]["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/RunDiff"}
    assert "404" in op["responses"]
    schemas = doc["components"]["schemas"]
    assert {"ForkLineage", "ReuseMark", "RunDiff", "CallDiff"} <= set(schemas)
    assert "lineage" in schemas["RunDetail"]["properties"] and "reuse" in schemas["JournalPage"]["properties"]


def test_the_inspector_links_a_fork_to_its_source_and_shows_their_diff(
    forked: tuple[str, tether.CostReport, tether.CostReport], browser: Browser
) -> None:
    app = create_app(engine_on(forked[0]), mode="store", owns_engine=True)
    with uvicorn_thread(app) as base:
        page = browser.new_page(viewport=WIDE)
        errors = watch_errors(page)
        page.goto(base + "/#/runs/fork-1")
        lineage = page.get_by_test_id("lineage")
        expect(lineage).to_contain_text("forked from src", timeout=TIMEOUT_MS)
        expect(page.get_by_test_id("lineage-spend")).to_contain_text("6 calls, paid by the source")
        journal = page.get_by_test_id("journal")
        expect(journal.locator("tr[data-reuse='reused']").first).to_be_visible(timeout=TIMEOUT_MS)
        # c7..c10 were copied but not reached: their running and terminal entries
        expect(journal.locator("tr[data-reuse='unreached']:has(.kind-agent)")).to_have_count(8)
        expect(journal.locator("tr[data-reuse='reused']:has(.kind-agent)")).to_have_count(12)  # c1..c6

        page.get_by_test_id("lineage-source").click()
        expect(page).to_have_url(base + "/#/runs/src")
        expect(page.locator(".run-id")).to_have_text("src", timeout=TIMEOUT_MS)
        expect(page.get_by_test_id("lineage")).to_have_count(0)  # the source is not a fork

        page.go_back()
        page.get_by_test_id("lineage-diff").click()
        expect(page).to_have_url(base + "/#/runs/src/diff/fork-1")
        rows = page.get_by_test_id("diff-row")
        expect(rows).to_have_count(10, timeout=TIMEOUT_MS)
        expect(page.get_by_test_id("diff")).to_contain_text("src")
        expect(page.get_by_test_id("diff")).to_contain_text("fork-1")
        expect(page.locator("tr[data-testid='diff-row'][data-reused='true']")).to_have_count(6)
        expect(page.locator("tr[data-label='c7']")).to_contain_text("changed")
        expect(page.locator("tr[data-label='c7'] td")).to_have_count(7)  # the label and both runs' model, cost, output
        assert errors == []
