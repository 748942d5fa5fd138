"""One cost report for every view and every run kind (issue 40): every total, spent, orphaned and reused figure
that `tether cost` (text and --json), `tree`, `inspect`, `runs`, `fork` (and `--preview`), `diff`, the HTTP API,
the journal-derived event stream and the run's OpenTelemetry span show is the cost report's, for a matrix of run
kinds. The inspector's cards, chart, tree and diff page are read through Chromium for a fork, a fork of a crashed
run and a crashed run.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from starlette.testclient import TestClient
from typer.testing import CliRunner

import tether
from crashkit import APP_DIR, crash_with_two_calls_in_flight, env_for, provider
from tether.cli.main import app as cli_app
from tether.contracts.messages import ChatRequest
from tether.contracts.money import usd
from tether.server import create_app
from tether.server.events import JournalFollower
from tether.testing import Reply, ToolCall

PRICES = {"m": tether.Price(input=1.0, output=2.0)}


def answer(request: ChatRequest) -> Reply:
    digest = hashlib.sha256(request.messages[-1].text_content.encode()).hexdigest()
    return Reply(text=(digest * 4)[:200])


def chain(changed: int | None = None) -> tether.Workflow:
    @tether.workflow(name="chain")
    async def run(ctx: tether.Ctx, topic: str) -> str:
        last = topic
        for i in range(1, 7):
            last = await ctx.agent(f"step {i}{' (edited)' if i == changed else ''}: go on from {last[:40]}",
                                   label=f"c{i}")
        return last

    return run


def fake_engine(url: str, **options: Any) -> tether.Engine:
    return tether.Engine(models=[tether.models.fake("fake", script=answer, prices=PRICES)],
                         routing={"loop": "fake:m"}, store=url, **options)


def tracing() -> tuple[TracerProvider, InMemorySpanExporter]:
    spans = InMemorySpanExporter()
    provider_ = TracerProvider()
    provider_.add_span_processor(SimpleSpanProcessor(spans))
    return provider_, spans


@dataclass
class Made:
    """A run of some kind, the store it is in, and what only its making could see."""

    url: str
    run_id: str
    span: dict[str, Any] | None = None
    """The run span's attributes of its last segment (None: no segment settled in this process)."""
    source: str | None = None
    fork_outcome: tether.RunOutcome | None = None
    preview: Any = None
    cli_fork: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def run_span(spans: InMemorySpanExporter) -> dict[str, Any]:
    ended = [s for s in spans.get_finished_spans() if s.name.startswith("workflow ")]
    return dict(ended[-1].attributes or {})


def cli(*args: str) -> str:
    result = CliRunner().invoke(cli_app, list(args), env={"COLUMNS": "250"})
    assert result.exit_code in (0, 3, 4), result.output
    return " ".join(result.output.split())


# -- the run kinds ------------------------------------------------------------------------------------------

def make_clean(tmp: Path) -> Made:
    url = f"sqlite:///{tmp}/t.db"
    tp, spans = tracing()

    async def go() -> None:
        engine = fake_engine(url, tracer_provider=tp)
        try:
            assert (await engine.run(chain(), {"topic": "tides"}, run_id="src", budget_usd=1.0)).status == "ok"
        finally:
            await engine.close()

    asyncio.run(go())
    return Made(url, "src", run_span(spans))


def make_forked(tmp: Path) -> Made:
    made = make_clean(tmp)
    tp, spans = tracing()

    async def go() -> tuple[tether.RunOutcome, Any]:
        engine = fake_engine(made.url, tracer_provider=tp)
        try:
            preview = await engine.fork("src", "f1", chain(changed=4), preview=True)
            return await engine.fork("src", "f1", chain(changed=4)), preview
        finally:
            await engine.close()

    outcome, preview = asyncio.run(go())
    assert outcome.status == "ok" and outcome.cost.reused_calls == 3
    return Made(made.url, "f1", run_span(spans), source="src", fork_outcome=outcome, preview=preview)


def _orphan_engine(monkeypatch: pytest.MonkeyPatch, url: str, base_url: str, **options: Any) -> tether.Engine:
    monkeypatch.setenv("ORPHAN_STORE", url)
    monkeypatch.setenv("ORPHAN_BASE_URL", base_url)
    monkeypatch.syspath_prepend(str(APP_DIR))
    import orphan_app

    return orphan_app.make_engine(**options)


@pytest.fixture
def crashed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[], tuple[str, str]]]:
    """Crash run `r` (two calls in flight, SIGKILLed in a child process); yields a maker of (store URL, base URL)."""
    with provider() as base_url:
        url = f"sqlite:///{tmp_path}/t.db"

        def make() -> tuple[str, str]:
            crash_with_two_calls_in_flight("r", env_for(url, base_url))
            return url, base_url

        yield make


def drive(engine: tether.Engine, coro: Callable[[tether.Engine], Any]) -> Any:
    async def go() -> Any:
        try:
            return await coro(engine)
        finally:
            await engine.close()

    return asyncio.run(go())


# -- the views -----------------------------------------------------------------------------------------------

def figures_of(made: Made) -> tuple[tether.CostReport, dict[str, tuple[float, float, float, float]]]:
    """The report, and (total, spent, orphaned, reused) as every view shows them."""
    url, run_id = made.url, made.run_id
    report: tether.CostReport = drive(tether.Engine(store=url), lambda e: e.cost(run_id))
    want = (report.total_usd, report.spent_usd, report.orphaned_usd, report.reused_usd)
    seen: dict[str, tuple[float, float, float, float]] = {}

    doc = json.loads(CliRunner().invoke(cli_app, ["cost", run_id, "--store", url, "--json"]).output)
    seen["cost --json"] = (doc["total_usd"], doc["spent_usd"], doc["orphaned_usd"], doc["reused_usd"])

    text = cli("cost", run_id, "--store", url)
    assert f"total {usd(report.total_usd)} USD" in text and f"spent {usd(report.spent_usd)} USD" in text
    assert (f"orphaned {usd(report.orphaned_usd)} USD" in text) or (not report.orphaned_usd and "orphaned 0.00 USD"
                                                                      in text)
    assert (f"reused {usd(report.reused_usd)} USD" in text) == bool(report.reused_calls)
    seen["cost"] = want

    tree = json.loads(CliRunner().invoke(cli_app, ["tree", run_id, "--store", url, "--json"]).output)
    nodes = tree["agents"]
    seen["tree --json"] = (tree["cost"]["total_usd"], tree["cost"]["spent_usd"], tree["cost"]["orphaned_usd"],
                           tree["cost"]["reused_usd"])
    seen["tree --json nodes"] = tuple(round(sum(n[k] for n in nodes), 8) for k in (
        "cost_usd", "spent_usd", "orphaned_usd", "reused_usd"))  # type: ignore[assignment]
    tree_text = cli("tree", run_id, "--store", url)
    assert f"(workflow) {usd(report.total_usd)} USD" in tree_text
    assert (f"+ {usd(report.reused_usd)} reused" in tree_text) == bool(report.reused_calls)
    seen["tree"] = want

    inspect = cli("inspect", run_id, "--store", url, "--wide")
    assert f"total {usd(report.total_usd)} USD" in inspect
    assert (f"reused {usd(report.reused_usd)} USD" in inspect) == bool(report.reused_calls)
    assert "+-" not in inspect
    seen["inspect"] = want

    (row,) = [r for r in json.loads(CliRunner().invoke(cli_app, ["runs", "--store", url, "--json"]).output)
              if r["run_id"] == run_id]
    seen["runs --json"] = (row["total_usd"], row["spent_usd"], row["orphaned_usd"], row["reused_usd"])
    runs_text = cli("runs", "--store", url, "--wide")
    assert re.search(rf"{re.escape(run_id)} .*{re.escape(usd(report.spent_usd))}", runs_text)

    client = TestClient(create_app(tether.Engine(store=url), mode="store", owns_engine=True),
                        base_url="http://localhost")
    with client:
        detail = client.get(f"/api/runs/{run_id}").json()
        seen["api detail"] = (detail["spent_usd"], detail["cost"]["spent_usd"], detail["orphaned_usd"],
                              detail["reused_usd"])
        if detail["spend"]:
            chart = detail["spend"][-1]["total_usd"]
            assert chart == pytest.approx(report.total_usd)
            assert sum(p["usd"] for p in detail["spend"]) == pytest.approx(report.total_usd)
        cost = client.get(f"/api/runs/{run_id}/cost").json()
        seen["api cost"] = (cost["total_usd"], cost["spent_usd"], cost["orphaned_usd"], cost["reused_usd"])
        api_tree = client.get(f"/api/runs/{run_id}/tree").json()["agents"]
        seen["api tree nodes"] = tuple(round(sum(n[k] for n in api_tree), 8) for k in (  # type: ignore[assignment]
            "cost_usd", "spent_usd", "orphaned_usd", "reused_usd"))
        if detail["lineage"] is not None:
            lineage = detail["lineage"]
            seen["api lineage"] = (lineage["new_usd"], report.spent_usd, report.orphaned_usd, lineage["reused_usd"])
            diff = client.get(f"/api/runs/{made.source}/diff/{run_id}").json()
            own = sum(c["b"]["usd"] for c in diff["calls"] if c["b"] and not c["reused"])
            reused = sum(c["b"]["usd"] for c in diff["calls"] if c["b"] and c["reused"])
            seen["api diff"] = (diff["b_usd"], report.spent_usd, report.orphaned_usd, diff["b_reused_usd"])
            seen["api diff rows"] = (round(own, 8), report.spent_usd, report.orphaned_usd, round(reused, 8))
            source = drive(tether.Engine(store=url), lambda e: e.cost(made.source))
            assert sum(c["a"]["usd"] for c in diff["calls"] if c["a"]) == pytest.approx(source.total_usd)
            diff_text = cli("diff", made.source or "", run_id, "--store", url)
            assert f"{usd(report.total_usd)} USD new" in diff_text
            assert (f"+ {usd(report.reused_usd)} reused" in diff_text) == bool(report.reused_usd)

    entries = drive(tether.Engine(store=url), lambda e: e.inspect(run_id))
    ends = [ev for ev in JournalFollower(run_id).feed(entries) if ev.type == "run:end"]
    if ends:
        end = ends[-1]
        seen["event stream"] = (end.cost_usd, round(end.cost_usd - end.orphaned_usd, 10), end.orphaned_usd,
                                end.reused_usd)
    if made.span is not None:
        s = made.span
        seen["otel span"] = (s["tether.cost_usd"], s["tether.spent_usd"], s["tether.orphaned_usd"],
                             s["tether.reused_usd"])
    if made.fork_outcome is not None:
        c = made.fork_outcome.cost
        seen["fork outcome"] = (c.total_usd, c.spent_usd, c.orphaned_usd, c.reused_usd)
    if made.preview is not None:
        seen["fork --preview"] = (*want[:3], made.preview.reused_usd)
    if made.cli_fork is not None:
        assert f"reused {usd(report.reused_usd)} USD" in made.cli_fork
        assert f"cost {usd(report.total_usd)} USD" in made.cli_fork
    return report, seen


def agree(made: Made) -> tether.CostReport:
    report, seen = figures_of(made)
    want = (report.total_usd, report.spent_usd, report.orphaned_usd, report.reused_usd)
    for view, got in seen.items():
        assert got == pytest.approx(want, abs=1e-9), f"{view} shows {got}, the cost report {want}"
    return report


# -- the matrix ------------------------------------------------------------------------------------------------

def test_a_clean_run(tmp_path: Path) -> None:
    report = agree(make_clean(tmp_path))
    assert report.total_usd > 0 and report.orphaned_usd == 0 and report.reused_usd == 0


def test_a_fork_and_its_preview(tmp_path: Path) -> None:
    made = make_forked(tmp_path)
    report = agree(made)
    source = drive(tether.Engine(store=made.url), lambda e: e.cost("src"))
    assert 0 < report.reused_usd < source.total_usd and report.reused_calls == 3


def test_a_crashed_run_with_orphans(crashed: Callable[[], tuple[str, str]]) -> None:
    url, _ = crashed()
    report = agree(Made(url, "r"))
    assert report.orphaned_calls == 2 and [lost.charged for lost in report.lost] == ["worst-case"] * 2


def test_a_crashed_run_whose_orphans_were_settled(crashed: Callable[[], tuple[str, str]],
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    url, base = crashed()
    drive(_orphan_engine(monkeypatch, url, base), lambda e: e.settle_orphans("r", 0.0008, "usage export"))
    tp, spans = tracing()
    drive(_orphan_engine(monkeypatch, url, base, tracer_provider=tp), lambda e: e.resume("r"))
    report = agree(Made(url, "r", run_span(spans)))
    assert report.orphaned_usd == pytest.approx(0.0008) and {lost.charged for lost in report.lost} == {"settled"}
    assert sum(lost.usd for lost in report.lost) == pytest.approx(0.0008)


def test_a_crashed_run_resumed_under_a_raised_ceiling(crashed: Callable[[], tuple[str, str]],
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    url, base = crashed()
    tp, spans = tracing()
    out = drive(_orphan_engine(monkeypatch, url, base, tracer_provider=tp),
                lambda e: e.resume("r", raise_budget_usd=0.5, raise_reason="more"))
    assert out.status == "ok"
    report = agree(Made(url, "r", run_span(spans)))
    assert report.ceiling_usd == 0.5 and report.orphaned_calls == 2


def test_a_fork_of_a_crashed_run_never_counts_the_sources_orphans(crashed: Callable[[], tuple[str, str]],
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    url, base = crashed()
    drive(_orphan_engine(monkeypatch, url, base), lambda e: e.resume("r"))  # exhausted: the orphans leave too little
    source = drive(tether.Engine(store=url), lambda e: e.cost("r"))
    tp, spans = tracing()

    async def fork(e: tether.Engine) -> tuple[tether.RunOutcome, Any]:
        preview = await e.fork("r", "rf", preview=True, budget_usd=1.0)
        return await e.fork("r", "rf", budget_usd=1.0), preview

    outcome, preview = drive(_orphan_engine(monkeypatch, url, base, tracer_provider=tp), fork)
    report = agree(Made(url, "rf", run_span(spans), source="r", fork_outcome=outcome, preview=preview))
    assert report.orphaned_usd == 0 and report.reused_calls >= 1
    assert report.reused_usd <= source.spent_usd  # what the source paid, never its orphans
    tree = drive(tether.Engine(store=url), lambda e: e.agent_tree("rf"))
    assert sum(n.reused for n in tree.agents) == report.reused_calls  # a copy not reached is left out
    assert sum(n.orphaned_usd for n in tree.agents) == 0  # the source's orphans are not the fork's


def test_a_run_parked_on_an_approval(tmp_path: Path) -> None:
    @tether.tool(needs_approval=True)
    def publish(text: str) -> str:
        """Publish a text."""
        return "published"

    def script(request: Any) -> Reply:
        if not request.tools:
            return Reply(text="quick", input_tokens=100, output_tokens=20)
        return Reply(tool_calls=[ToolCall("publish", {"text": "y"})], input_tokens=120, output_tokens=30)

    @tether.workflow(name="two")
    async def two(ctx: tether.Ctx) -> Any:
        return await ctx.parallel([lambda: ctx.agent("quick", label="quick"),
                                   lambda: ctx.agent("writer", tools=[publish], label="writer")])

    url = f"sqlite:///{tmp_path}/t.db"
    tp, spans = tracing()
    engine = tether.Engine(models=[tether.models.fake("fake", script=script, prices=PRICES)],
                           routing={"loop": "fake:m"}, store=url, tracer_provider=tp)
    out = drive(engine, lambda e: e.run(two, run_id="p", budget_usd=1.0))
    assert out.status == "suspended"
    report = agree(Made(url, "p", run_span(spans)))
    assert report.provider_calls == 2 and report.total_usd > 0


def test_a_pydantic_ai_bridged_run(tmp_path: Path) -> None:
    from pydantic_ai import Agent

    from tether.integrations import pydantic_ai as tpai

    agent: Agent[None, str] = Agent(None, name="helper", instructions="Answer.")

    @agent.tool_plain
    def lookup(name: str) -> str:
        """Look a name up."""
        return name.upper()

    def script(request: ChatRequest) -> Reply:
        if any(m.role == "tool" for m in request.messages):
            return Reply(text="done", input_tokens=100, output_tokens=25)
        return Reply(tool_calls=[ToolCall("lookup", {"name": "x"})], input_tokens=100, output_tokens=25)

    @tether.workflow(name="bridged")
    async def bridged(ctx: tether.Ctx) -> str:
        return str((await tpai.run(ctx, agent, "Who?")).output)

    url = f"sqlite:///{tmp_path}/t.db"
    tp, spans = tracing()
    engine = tether.Engine(models=[tether.models.fake("fake", script=script, prices=PRICES)],
                           routing={"loop": "fake:m"}, store=url, tracer_provider=tp)
    assert drive(engine, lambda e: e.run(bridged, run_id="b", budget_usd=1.0)).status == "ok"
    report = agree(Made(url, "b", run_span(spans)))
    assert report.provider_calls == 2 and report.total_usd > 0


def test_a_tenant_budgeted_run_on_postgresql(pg_dsn: str, pg_schema: str) -> None:
    url = f"{pg_dsn}?schema={pg_schema}"
    tp, spans = tracing()
    budget = tether.Budget(usd=1.0, window="day", scope="tenant:acme")
    out = drive(fake_engine(url, tracer_provider=tp),
                lambda e: e.run(chain(), {"topic": "t"}, run_id="t1", budgets=[budget], budget_usd=0.5))
    assert out.status == "ok"
    report = agree(Made(url, "t1", run_span(spans)))
    assert report.total_usd > 0


def test_the_cli_fork_and_its_preview_print_the_reports_figures(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                                                 ) -> None:
    made = make_clean(tmp_path)
    (tmp_path / "chain_app.py").write_text(APP)
    monkeypatch.setenv("COST_VIEWS_STORE", made.url)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.syspath_prepend(str(Path(__file__).parent))
    preview = cli("fork", "src", "--new-id", "f2", "--app", "chain_app:engine", "--preview")
    forked = cli("fork", "src", "--new-id", "f2", "--app", "chain_app:engine")
    report = agree(Made(made.url, "f2", source="src", cli_fork=forked))
    assert f"{usd(report.reused_usd)} USD the source paid" in preview
    assert os.environ["COST_VIEWS_STORE"] == made.url


APP = '''
import os
import hashlib
import tether
from tether.testing import Reply


def answer(request):
    digest = hashlib.sha256(request.messages[-1].text_content.encode()).hexdigest()
    return Reply(text=(digest * 4)[:200])


@tether.workflow(name="chain")
async def chain(ctx, topic):
    last = topic
    for i in range(1, 7):
        last = await ctx.agent(f"step {i}{' (edited)' if i == 4 else ''}: go on from {last[:40]}", label=f"c{i}")
    return last

engine = tether.Engine(models=[tether.models.fake("fake", script=answer, prices={"m": tether.Price(input=1.0, output=2.0)})],
                       routing={"loop": "fake:m"}, store=os.environ["COST_VIEWS_STORE"], workflows=[chain])
'''
