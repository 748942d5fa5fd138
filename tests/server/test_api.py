"""The HTTP API through Starlette's test client: every route, the token gate, 404s, paging, and live runs."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from openapi_spec_validator import validate
from server_apps import RESEARCH_BUDGET, make_engine, stepping_clock
from server_kit import run_status, sse_events, wait_for
from starlette.testclient import TestClient

import tether
from tether.contracts.events import EVENT_ADAPTER, AgentEnd, LogLine
from tether.server import operations

Serve = Callable[..., TestClient]
RUN = "research-1"


def concrete(path: str) -> str:
    return path.replace("{run_id}", RUN).replace("{agent_id}", "1").replace("{other}", RUN).replace("{session_id}", "s")


# -- the token gate ------------------------------------------------------------------------------

def test_with_a_token_every_route_but_healthz_answers_401_json_without_it(recorded: str, serve: Serve) -> None:
    client = serve(token="s3cret")
    assert client.get("/healthz").status_code == 200
    routes = [(op.method, concrete(op.path)) for op in operations() if op.path != "/healthz"]
    routes += [("GET", "/api/openapi.json"), ("GET", "/"), ("GET", "/static/app.js")]
    assert len(routes) >= 14
    for method, path in routes:
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "Basic s3cret"}):
            r = client.request(method, path, headers=headers, json={} if method == "POST" else None)
            assert r.status_code == 401, (method, path, headers)
            assert r.headers["content-type"].startswith("application/json")
            assert r.json()["error"]["code"] == "unauthorized"
            assert r.headers["www-authenticate"] == "Bearer"
    good = {"Authorization": "Bearer s3cret"}
    assert client.post("/api/sessions", json={"session_id": "s"}, headers=good).status_code == 201
    for method, path in routes:
        if method == "GET" and not path.endswith("/events"):
            assert client.get(path, headers=good).status_code == 200, path
    # the inspector trades the token for a session cookie; a browser without one gets a page asking for it
    assert client.post("/api/session", json={"token": "wrong"}).status_code == 401
    assert client.post("/api/session", json={"token": "s3cret"}).status_code == 204
    assert client.get("/api/runs").status_code == 200
    (name,) = client.cookies.keys()
    client.cookies.clear()
    client.cookies.set(name, "0" * 64)
    assert client.get("/api/runs").status_code == 401
    client.cookies.clear()
    page = client.get("/", headers={"Accept": "text/html"})
    assert page.status_code == 401 and "needs its token" in page.text


def test_without_a_token_the_api_is_open_on_loopback_and_refuses_other_hosts() -> None:
    from tether.server import check_bind

    check_bind("127.0.0.1", None)
    check_bind("::1", None)
    check_bind("localhost", None)
    check_bind("0.0.0.0", "t")
    for host in ("0.0.0.0", "192.168.1.4", "::", "example.org"):
        try:
            check_bind(host, None)
        except tether.ConfigError as exc:
            assert "--token" in exc.message
        else:
            raise AssertionError(f"{host} was allowed without a token")


# -- 404s and errors -----------------------------------------------------------------------------

def test_an_unknown_run_is_a_404_json_error_on_every_run_route(serve: Serve) -> None:
    client = serve()
    for op in operations():
        if "{run_id}" not in op.path:
            continue
        path = op.path.replace("{run_id}", "no-such-run").replace("{agent_id}", "1")
        body = {"key": "k", "value": 1} if op.name == "resolve" else {"usd": 1.0} if op.name == "raise_budget" else {}
        r = client.request(op.method, path, json=body if op.method == "POST" else None)
        assert r.status_code == 404, op.name
        assert r.json()["error"] == {"code": "run-not-found", "message": r.json()["error"]["message"],
                                     "data": {"run_id": "no-such-run"}}
        assert "no run 'no-such-run'" in r.json()["error"]["message"]


def test_unknown_paths_and_wrong_methods_answer_json(serve: Serve) -> None:
    client = serve()
    missing = client.get("/api/nope")
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "not-found"
    wrong = client.delete("/api/runs")
    assert wrong.status_code == 405 and wrong.json()["error"]["code"] == "method-not-allowed"
    assert set(wrong.headers["allow"].replace(" ", "").split(",")) >= {"GET", "POST"}


# -- the read side -------------------------------------------------------------------------------

def test_a_recorded_run_serves_its_detail_journal_tree_cost_and_ledger(recorded: str, serve: Serve) -> None:
    client = serve()
    engine = tether.Engine(store=recorded)

    async def truth() -> tuple[Any, ...]:
        try:
            return (await engine.inspect(RUN), await engine.cost(RUN), await engine.agent_tree(RUN),
                    await engine.effect_ledger(RUN))
        finally:
            await engine.close()

    entries, cost, tree, ledger = asyncio.run(truth())
    detail = client.get(f"/api/runs/{RUN}").json()
    assert detail["status"] == "ok" and detail["workflow"] == "research"
    assert detail["ceilings"]["budget_usd"] == RESEARCH_BUDGET and detail["ceilings"]["max_agents"] == 5
    assert detail["spent_usd"] == cost.total_usd > 0 and detail["cost"] == cost.model_dump(mode="json")
    assert detail["outcome"]["status"] == "ok" and detail["outcome"]["value"]["plan"].startswith("Plan:")
    assert detail["entries"] == len(entries) and detail["suspensions"] == []
    assert detail["can_start"] is True and detail["driven_here"] is False

    got = client.get(f"/api/runs/{RUN}/tree").json()
    assert [a["agent_id"] for a in got["agents"]] == [n.agent_id for n in tree.agents] == [1, 2, 3, 4, 5]
    planner = next(a for a in got["agents"] if a["label"] == "planner")
    assert planner["refusals"] == ["agents"] and planner["depth"] == 1
    assert {a["depth"] for a in got["agents"] if a["parent_agent_id"] == planner["agent_id"]} == {2}
    assert [e["kind"] for e in got["events"]] == [e.kind for e in tree.events]
    assert "spawn_refused" in [e["kind"] for e in got["events"]] and got["queued"] == []
    assert all(a["transcript"] == f"/api/runs/{RUN}/agents/{a['agent_id']}/transcript" for a in got["agents"])

    assert client.get(f"/api/runs/{RUN}/cost").json() == cost.model_dump(mode="json")
    records = client.get(f"/api/runs/{RUN}/ledger").json()["records"]
    assert records == [r.model_dump(mode="json") for r in ledger]
    # every tool call is ledgered, in-process ones (the orchestrator's spawns) included
    assert sorted(r["tool"] for r in records if r["executor"] != "inprocess") == ["measure", "measure"]
    assert all(r["outcome"] == "ok" for r in records)


def test_the_journal_pages_by_seq_cursor_and_covers_every_entry_once(recorded: str, serve: Serve) -> None:
    client = serve()
    seen: list[dict[str, Any]] = []
    cursor: str | None = None
    pages = 0
    while True:
        params: dict[str, Any] = {"limit": 5} | ({"cursor": cursor} if cursor else {})
        page = client.get(f"/api/runs/{RUN}/journal", params=params).json()
        seen.extend(page["entries"])
        pages += 1
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert pages == -(-page["total"] // 5) and len(seen) == page["total"] > 10
    assert [e["seq"] for e in seen] == list(range(1, page["total"] + 1))
    whole = client.get(f"/api/runs/{RUN}/journal").json()
    assert whole["entries"] == seen and whole["next_cursor"] is None
    assert client.get(f"/api/runs/{RUN}/journal", params={"cursor": "x"}).status_code == 422
    assert client.get(f"/api/runs/{RUN}/journal", params={"limit": 0}).status_code == 422


def test_the_run_list_filters_by_status_and_pages_by_cursor(store_url: str, serve: Serve) -> None:
    async def make_runs() -> None:
        engine = make_engine(store_url, clock=stepping_clock(1.0))  # distinct, increasing created_at
        try:
            for i in range(7):
                if i % 3 == 0:
                    await engine.run("wait", run_id=f"run-{i}")  # settles suspended
                else:
                    await engine.run("echo", {"i": i}, run_id=f"run-{i}")
        finally:
            await engine.close()

    asyncio.run(make_runs())
    client = serve()
    everything = client.get("/api/runs").json()
    newest_first = [f"run-{i}" for i in reversed(range(7))]
    assert [r["run_id"] for r in everything["runs"]] == newest_first and everything["next_cursor"] is None
    assert {r["run_id"]: r["pending"] for r in everything["runs"]}["run-3"] == 1

    def pages(**query: Any) -> list[list[str]]:
        out, cursor = [], None
        while True:
            got = client.get("/api/runs", params={**query, **({"cursor": cursor} if cursor else {})}).json()
            out.append([r["run_id"] for r in got["runs"]])
            cursor = got["next_cursor"]
            if cursor is None:
                return out

    assert pages(limit=3) == [newest_first[:3], newest_first[3:6], newest_first[6:]]
    assert pages(limit=2, status="suspended") == [["run-6", "run-3"], ["run-0"]]
    assert pages(limit=10, status="ok") == [["run-5", "run-4", "run-2", "run-1"]]
    assert client.get("/api/runs", params={"status": "error"}).json()["runs"] == []
    assert client.get("/api/runs", params={"status": "bogus"}).status_code == 422
    assert client.get("/api/runs", params={"limit": 0}).status_code == 422
    assert client.get("/api/runs", params={"cursor": "not-a-cursor"}).status_code == 422


def test_a_transcript_is_the_agents_checkpoint_and_its_output(recorded: str, serve: Serve) -> None:
    client = serve()
    planner = client.get(f"/api/runs/{RUN}/agents/3/transcript").json()
    assert planner["checkpointed"] is True and planner["status"] == "ok" and planner["turns"] == 2
    calls = [p for m in planner["messages"] for p in m["parts"] if p["type"] == "tool_call"]
    assert [c["name"] for c in calls] == ["spawn_agent"] * 3
    assert planner["output"].startswith("Plan:") and planner["messages"][0]["role"] == "user"
    critic = client.get(f"/api/runs/{RUN}/agents/1/transcript").json()
    assert critic["checkpointed"] is False and critic["messages"] == []  # answered in its first turn
    assert critic["output"].startswith("done: Critique")
    missing = client.get(f"/api/runs/{RUN}/agents/99/transcript")
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "agent-not-found"
    assert client.get(f"/api/runs/{RUN}/agents/x/transcript").status_code == 422


def test_a_settled_runs_event_stream_is_its_history_then_it_ends(recorded: str, serve: Serve) -> None:
    client = serve()
    r = client.get(f"/api/runs/{RUN}/events")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    frames = sse_events(r.text)
    types = [t for t, _ in frames]
    assert types[0] == "run:start" and types[-2] == "run:end" and types[-1] == "end"
    assert types.count("agent:start") == 5 and types.count("agent:end") == 5 and types.count("spawn:refused") == 1
    events = [json.loads(d) for t, d in frames if t != "end"]
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    assert all(EVENT_ADAPTER.validate_python(e).run_id == RUN for e in events)  # each one its typed model
    spend = [e["spent_usd"] for e in events if e["type"] == "budget:update"]
    assert spend == sorted(spend) and spend[-1] == client.get(f"/api/runs/{RUN}/cost").json()["total_usd"]
    assert json.loads(frames[-1][1]) == {"run_id": RUN, "status": "ok"}
    # a reconnecting client skips what it saw (Last-Event-ID)
    again = sse_events(client.get(f"/api/runs/{RUN}/events", headers={"Last-Event-ID": "10"}).text)
    assert [json.loads(d)["seq"] for t, d in again if t != "end"] == list(range(11, len(events) + 1))


def test_a_run_driven_by_another_engine_is_followed_through_the_store_until_it_settles(
    store_url: str, tmp_path: Path, serve: Serve
) -> None:
    gates = tmp_path / "gates"
    gates.mkdir()
    far = make_engine(store_url)  # another driver: its own engine, event loop and thread

    async def drive() -> str:
        try:
            out = await far.run("live_panel", {"question": "q", "gates": str(gates)}, run_id="far-1",
                                containment=tether.Containment(max_agents=8, max_concurrent=1, max_depth=1))
            return out.status
        finally:
            await far.close()

    result: dict[str, str] = {}
    driver = threading.Thread(target=lambda: result.update(status=asyncio.run(drive())))
    driver.start()
    client = serve(mode="store")
    wait_for(lambda: client.get("/api/runs/far-1/tree").json().get("agents"), what="the far run's first agent")
    assert client.get("/api/runs/far-1").json()["driven_here"] is False

    chunks: list[str] = []
    connected = threading.Event()

    def read() -> None:
        with client.stream("GET", "/api/runs/far-1/events") as response:
            for chunk in response.iter_text():
                chunks.append(chunk)
                connected.set()

    reader = threading.Thread(target=read)
    reader.start()
    assert connected.wait(30)
    wait_for(lambda: "event: agent:start" in "".join(chunks), what="the history to arrive")
    history = [t for t, _ in sse_events("".join(chunks))]
    assert history[:2] == ["run:start", "agent:start"] and "agent:end" not in history
    assert reader.is_alive()  # still following: the run has not settled
    for angle in ("practical", "skeptical", "optimistic"):
        (gates / angle).write_text("open")
    driver.join(60)
    reader.join(60)
    assert result["status"] == "suspended" and not reader.is_alive()
    frames = sse_events("".join(chunks))
    types = [t for t, _ in frames]
    assert types.count("agent:start") == 3 and types.count("agent:end") == 3
    assert types[-3:] == ["external:waiting", "run:end", "end"]
    assert json.loads(frames[-1][1]) == {"run_id": "far-1", "status": "suspended"}
    ended = [EVENT_ADAPTER.validate_json(d) for t, d in frames if t == "agent:end"]
    assert all(isinstance(e, AgentEnd) and e.agent_id is not None for e in ended)
    assert [e.ts for e in ended] == sorted(e.ts for e in ended)  # in journal order


# -- resolve, cancel, start ----------------------------------------------------------------------

def test_a_resolve_wakes_a_live_run_and_it_finishes(tmp_path: Path, serve: Serve) -> None:
    client = serve()
    gate = tmp_path / "gate"
    started = client.post("/api/runs", json={"workflow": "wait_with_work", "args": {"gate": str(gate)},
                                              "run_id": "live-1"})
    assert started.status_code == 201 and started.json()["url"] == "/api/runs/live-1"
    detail = wait_for(lambda: (d := client.get("/api/runs/live-1").json())["suspensions"] and d,
                      what="the run to park its `go` branch")
    assert detail["status"] == "running" and detail["driven_here"] is True
    assert [s["key"] for s in detail["suspensions"]] == ["go"]

    chunks: list[str] = []
    connected = threading.Event()

    def read() -> None:
        with client.stream("GET", "/api/runs/live-1/events") as response:
            for chunk in response.iter_text():
                chunks.append(chunk)
                connected.set()

    reader = threading.Thread(target=read)
    reader.start()
    assert connected.wait(30)  # the stream is open while the run is live
    r = client.post("/api/runs/live-1/resolve", json={"key": "go", "value": {"approved": True}})
    assert r.status_code == 200
    assert r.json() == {"run_id": "live-1", "key": "go", "woke_live_run": True, "resumed": False,
                        "status": "running"}
    assert run_status(client, "live-1") == "running"  # the other branch still works
    gate.write_text("open")
    wait_for(lambda: run_status(client, "live-1") == "ok", what="the woken run to finish")
    outcome = client.get("/api/runs/live-1").json()["outcome"]
    assert outcome["value"] == {"got": {"approved": True}, "worked": "worked"}
    assert client.get("/api/runs/live-1").json()["segments"] == 1  # woken in place, not resumed
    reader.join(30)
    assert not reader.is_alive()
    types = [t for t, _ in sse_events("".join(chunks))]
    # live events straight from the run's handle: `log` is telemetry the journal never holds
    assert "log" in types and "external:waiting" in types and types[-2:] == ["run:end", "end"]


def test_resolving_a_settled_suspended_run_resumes_it_here_until_it_finishes(serve: Serve) -> None:
    client = serve()
    assert client.post("/api/runs", json={"workflow": "wait", "run_id": "w-1"}).status_code == 201
    wait_for(lambda: run_status(client, "w-1") == "suspended", what="the run to settle suspended")
    assert client.get("/api/runs/w-1").json()["driven_here"] is False
    r = client.post("/api/runs/w-1/resolve", json={"key": "approve", "value": "yes"})
    assert r.status_code == 200 and r.json()["resumed"] is True and r.json()["woke_live_run"] is False
    wait_for(lambda: run_status(client, "w-1") == "ok", what="the resumed run to finish")
    detail = client.get("/api/runs/w-1").json()
    assert detail["outcome"]["value"] == "yes" and detail["segments"] == 2 and detail["suspensions"] == []
    again = client.post("/api/runs/w-1/resolve", json={"key": "approve", "value": "no"})
    assert again.status_code == 409 and again.json()["error"]["code"] == "already-resolved"


def test_a_tool_approval_is_listed_with_its_tool_and_args_and_an_allow_resumes_the_run(serve: Serve) -> None:
    client = serve()
    client.post("/api/runs", json={"workflow": "ship", "run_id": "ship-1"})
    wait_for(lambda: run_status(client, "ship-1") == "suspended", what="the approval to suspend the run")
    (approval,) = client.get("/api/runs/ship-1").json()["suspensions"]
    assert approval["kind"] == "approval" and approval["tool"] == "deploy" and approval["args"] == {"env": "prod"}
    assert approval["agent_id"] == 1 and approval["key"].startswith("approval:")
    r = client.post("/api/runs/ship-1/resolve", json={"key": approval["key"], "value": "allow"})
    assert r.status_code == 200 and r.json()["resumed"] is True
    wait_for(lambda: run_status(client, "ship-1") == "ok", what="the approved run to finish")
    assert client.get("/api/runs/ship-1").json()["outcome"]["value"] == "deployed to prod"
    transcript = client.get("/api/runs/ship-1/agents/1/transcript").json()
    results = [p["content"] for m in transcript["messages"] for p in m["parts"] if p["type"] == "tool_result"]
    assert results == ["shipped to prod"]


def test_a_resolve_that_violates_the_declared_schema_is_a_422_and_writes_nothing(serve: Serve) -> None:
    client = serve()
    client.post("/api/runs", json={"workflow": "score", "run_id": "s-1"})
    wait_for(lambda: run_status(client, "s-1") == "suspended", what="the run to settle suspended")
    before = client.get("/api/runs/s-1/journal").json()
    bad = client.post("/api/runs/s-1/resolve", json={"key": "score", "value": "high"})
    assert bad.status_code == 422 and bad.json()["error"]["code"] == "invalid-resolution"
    assert client.get("/api/runs/s-1/journal").json() == before  # nothing journaled, still open
    good = client.post("/api/runs/s-1/resolve", json={"key": "score", "value": 7})
    assert good.status_code == 200
    wait_for(lambda: run_status(client, "s-1") == "ok", what="the resolved run to finish")
    assert client.get("/api/runs/s-1").json()["outcome"]["value"] == 7


def test_a_store_server_resolves_durably_without_resuming(store_url: str, serve: Serve) -> None:
    app = serve()
    app.post("/api/runs", json={"workflow": "wait", "run_id": "w-2"})
    wait_for(lambda: run_status(app, "w-2") == "suspended", what="the run to settle suspended")
    reader = serve(mode="store")
    r = reader.post("/api/runs/w-2/resolve", json={"key": "approve", "value": 7})
    assert r.status_code == 200 and r.json()["resumed"] is False and r.json()["status"] == "suspended"
    assert reader.get("/api/runs/w-2").json()["suspensions"] == []
    kinds = [e["kind"] for e in reader.get("/api/runs/w-2/journal").json()["entries"]]
    assert kinds[-1] == "resolution"


def test_resolve_validates_its_body_and_answers_typed_errors(serve: Serve) -> None:
    client = serve()
    client.post("/api/runs", json={"workflow": "wait", "run_id": "w-3"})
    wait_for(lambda: run_status(client, "w-3") == "suspended", what="the run to settle suspended")
    url = "/api/runs/w-3/resolve"
    cases = [
        ({"value": 1}, 422, "invalid-request"),
        ({"key": "", "value": 1}, 422, "invalid-request"),
        ({"key": "approve", "value": 1, "extra": True}, 422, "invalid-request"),
        ({"key": 5, "value": 1}, 422, "invalid-request"),
        ({"key": "nope", "value": 1}, 404, "suspension-not-found"),
    ]
    for body, status, code in cases:
        r = client.post(url, json=body)
        assert (r.status_code, r.json()["error"]["code"]) == (status, code), body
    missing_key = client.post(url, json={"value": 1}).json()["error"]
    assert missing_key["data"]["issues"][0]["loc"] == "key" and "invalid body" in missing_key["message"]
    assert client.post(url, json={"key": "nope"}).json()["error"]["data"]["open"] == ["approve"]
    garbled = client.post(url, content=b"{not json", headers={"Content-Type": "application/json"})
    assert garbled.status_code == 400 and garbled.json()["error"]["code"] == "invalid-json"
    assert run_status(client, "w-3") == "suspended"  # nothing was written


def test_a_run_driven_outside_the_server_maps_engine_errors_to_409(tmp_path: Path, serve: Serve) -> None:
    client = serve()
    state = client.app.state.tether  # type: ignore[attr-defined]
    gate = tmp_path / "gate"

    async def start() -> tether.RunHandle:
        return state.engine.start("wait_with_work", {"gate": str(gate)}, run_id="outside")

    handle = client.portal.call(start)  # type: ignore[union-attr]
    wait_for(lambda: client.get("/api/runs/outside").json()["suspensions"], what="the branch to park")
    # the run's lease belongs to a driver the server does not know: the engine's LeaseHeldError is a 409
    held = client.post("/api/runs/outside/resolve", json={"key": "go", "value": 1})
    assert held.status_code == 409 and held.json()["error"]["code"] == "lease-held"
    assert "lease held" in held.json()["error"]["message"] and held.json()["error"]["data"]["run_id"] == "outside"
    # handed over with app.state.tether.track(handle), the server drives it: the resolve wakes it
    client.portal.call(lambda: state.track(handle))  # type: ignore[union-attr]
    assert client.post("/api/runs/outside/resolve", json={"key": "go", "value": 1}).json()["woke_live_run"]
    gate.write_text("open")
    wait_for(lambda: run_status(client, "outside") == "ok", what="the handed-over run to finish")


def test_cancel_stops_a_run_driven_here_and_refuses_settled_ones(tmp_path: Path, serve: Serve) -> None:
    client = serve()
    client.post("/api/runs", json={"workflow": "live_panel", "run_id": "c-1",
                                   "args": {"question": "q", "gates": str(tmp_path)}})
    wait_for(lambda: client.get("/api/runs/c-1/tree").json()["agents"], what="an agent to start")
    r = client.post("/api/runs/c-1/cancel", json={"reason": "enough"})
    assert r.status_code == 202 and r.json() == {"run_id": "c-1", "cancelled": True, "reason": "enough",
                                                 "status": "running"}
    wait_for(lambda: run_status(client, "c-1") == "cancelled", what="the run to settle cancelled")
    assert client.get("/api/runs/c-1").json()["outcome"]["error"]["message"] == "enough"
    again = client.post("/api/runs/c-1/cancel", json={})
    assert again.status_code == 409 and again.json()["error"]["code"] == "run-settled"
    assert client.post("/api/runs/c-1/cancel", json={"reason": 3}).status_code == 422


def _tether_cli(*argv: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tether.cli.main", *argv], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=120)


def _settle_entry(store: str, run_id: str) -> dict[str, Any]:
    async def go() -> dict[str, Any]:
        engine = tether.Engine(store=store)
        try:
            last = [e for e in await engine.inspect(run_id) if e.label == "settle"][-1]
            assert isinstance(last.value, dict)
            return last.value
        finally:
            await engine.close()

    return asyncio.run(go())


def test_cancelling_a_suspended_run_settles_it_cancelled_as_tether_cancel_does(
    tmp_path: Path, store_url: str, serve: Serve
) -> None:
    async def park() -> None:
        engine = make_engine(store_url)
        try:
            for run_id in ("s-api", "s-cli"):
                assert (await engine.run("wait", run_id=run_id)).status == "suspended"
        finally:
            await engine.close()

    asyncio.run(park())
    client = serve()
    r = client.post("/api/runs/s-api/cancel", json={"reason": "not needed"})
    assert r.status_code == 202 and r.json() == {"run_id": "s-api", "cancelled": True, "reason": "not needed",
                                                 "status": "cancelled"}
    assert run_status(client, "s-api") == "cancelled"
    assert client.get("/api/runs/s-api").json()["outcome"]["error"]["message"] == "not needed"
    cli = _tether_cli("cancel", "s-cli", "--store", store_url, "--reason", "not needed", "--json", cwd=tmp_path)
    assert cli.returncode == 0 and json.loads(cli.stdout) == {"run_id": "s-cli", "result": "cancelled",
                                                              "status": "cancelled"}, cli.stderr
    assert _settle_entry(store_url, "s-api") == _settle_entry(store_url, "s-cli")  # the same settle entry
    assert _settle_entry(store_url, "s-api")["pending"] == ["approve"]
    again = client.post("/api/runs/s-api/cancel", json={})
    assert again.status_code == 409 and again.json()["error"]["code"] == "run-settled"
    assert "already finished 'cancelled'" in again.json()["error"]["message"]


SLOW_APP = '''
import asyncio
import os

import tether


@tether.workflow
async def slow(ctx: tether.Ctx) -> str:
    async def wait() -> str:
        await asyncio.sleep(60)
        return "late"

    return await ctx.step("wait", wait)


engine = tether.Engine(store=os.environ["SLOW_STORE"], workflows=[slow], lease_ttl_s=1.5)
'''


def test_cancelling_a_run_another_process_drives_requests_it_and_that_driver_settles_it(
    tmp_path: Path, store_url: str, serve: Serve
) -> None:
    (tmp_path / "slow_app.py").write_text(SLOW_APP)
    env = {**os.environ, "SLOW_STORE": store_url}
    driver = subprocess.Popen([sys.executable, "-m", "tether.cli.main", "run", "slow_app:slow", "--run-id", "far"],
                              cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        client = serve()
        wait_for(lambda: client.get("/api/runs/far").status_code == 200 and run_status(client, "far") == "running",
                 timeout=60, what="the other process to start the run")
        r = client.post("/api/runs/far/cancel", json={"reason": "stop it"})
        assert r.status_code == 202 and r.json() == {"run_id": "far", "cancelled": False, "reason": "stop it",
                                                     "status": "running"}
        out, err = driver.communicate(timeout=60)  # it reads the request at its next renewal (every 0.5 s)
    finally:
        if driver.poll() is None:
            driver.kill()
    assert driver.returncode == 5, (out, err)
    assert run_status(client, "far") == "cancelled"
    assert client.get("/api/runs/far").json()["outcome"]["error"]["message"] == "stop it"


def test_a_start_with_a_queue_enqueues_the_run_for_workers(serve: Serve, pg_dsn: str, pg_schema: str) -> None:
    client = serve(url=f"{pg_dsn}?schema={pg_schema}")
    queued = client.post("/api/runs", json={"workflow": "echo", "args": {"a": 1}, "run_id": "q-1", "budget_usd": 0.5,
                                            "queue": "slow", "priority": 3})
    assert queued.status_code == 201 and queued.json() == {"run_id": "q-1", "workflow": "echo", "status": "queued",
                                                           "url": "/api/runs/q-1"}
    detail = client.get("/api/runs/q-1").json()
    assert detail["status"] == "queued" and detail["budget_usd"] == 0.5 and not detail["driven_here"]
    assert [r["run_id"] for r in client.get("/api/runs?status=queued").json()["runs"]] == ["q-1"]


def test_a_start_with_a_queue_on_a_store_without_one_is_a_typed_409(serve: Serve) -> None:
    r = serve().post("/api/runs", json={"workflow": "echo", "queue": "default"})
    assert r.status_code == 409 and r.json()["error"]["code"] == "no-queue" and "postgresql://" in r.json()["error"]["message"]


def test_starting_a_run_needs_the_app_engine_and_a_registered_workflow(serve: Serve) -> None:
    client = serve()
    ok = client.post("/api/runs", json={"workflow": "echo", "args": {"a": 1}, "run_id": "s-1", "budget_usd": 0.5,
                                        "containment": {"max_agents": 2, "max_concurrent": 1, "max_depth": 1}})
    assert ok.status_code == 201 and ok.json() == {"run_id": "s-1", "workflow": "echo", "status": "running",
                                                   "url": "/api/runs/s-1"}
    wait_for(lambda: run_status(client, "s-1") == "ok", what="the run to finish")
    detail = client.get("/api/runs/s-1").json()
    assert detail["outcome"]["value"] == {"a": 1} and detail["ceilings"]["max_agents"] == 2
    assert detail["budget_usd"] == 0.5
    dup = client.post("/api/runs", json={"workflow": "echo", "run_id": "s-1"})
    assert dup.status_code == 409 and dup.json()["error"]["code"] == "run-exists"
    unknown = client.post("/api/runs", json={"workflow": "nope"})
    assert unknown.status_code == 404 and "echo" in unknown.json()["error"]["data"]["known"]
    for bad in ({"workflow": "echo", "budget_usd": -1}, {"workflow": "echo", "budget_usd": False},
                {"workflow": "echo", "containment": {"max_agents": 0, "max_concurrent": 1, "max_depth": 1}},
                {"workflow": "echo", "run_id": "has space"}):
        assert client.post("/api/runs", json=bad).status_code == 422, bad
    generated = client.post("/api/runs", json={"workflow": "echo"}).json()["run_id"]
    assert len(generated) == 26  # a ULID
    reader = serve(mode="store")
    refused = reader.post("/api/runs", json={"workflow": "echo"})
    assert refused.status_code == 409 and refused.json()["error"]["code"] == "no-app-engine"
    assert reader.get("/healthz").json()["mode"] == "store"


def test_a_body_integer_may_be_written_3_0_as_the_schema_allows_but_never_as_a_string(serve: Serve) -> None:
    # JSON Schema's "integer" admits 2.0 (the fuzz test found a redact with {"seq": 718677.0} refused with a 422)
    client = serve()
    ok = client.post("/api/runs", json={"workflow": "echo", "run_id": "f-1",
                                        "containment": {"max_agents": 2.0, "max_concurrent": 1.0, "max_depth": 1}})
    assert ok.status_code == 201, ok.text
    wait_for(lambda: run_status(client, "f-1") == "ok", what="the run to finish")
    assert client.get("/api/runs/f-1").json()["ceilings"]["max_agents"] == 2
    for bad in ({"max_agents": "2", "max_concurrent": 1, "max_depth": 1},
                {"max_agents": 2.5, "max_concurrent": 1, "max_depth": 1},
                {"max_agents": True, "max_concurrent": 1, "max_depth": 1}):
        assert client.post("/api/runs", json={"workflow": "echo", "containment": bad}).status_code == 422, bad
    assert client.post("/api/runs/f-1/redact", json={"seq": 1.5}).status_code == 422
    assert client.post("/api/runs/f-1/redact", json={"seq": 718677.0}).status_code != 422


def test_the_openapi_document_is_valid_and_generated_from_the_routes(serve: Serve) -> None:
    doc = serve().get("/api/openapi.json").json()
    validate(doc)
    assert doc["openapi"].startswith("3.1")
    ops = {(op.method.lower(), op.path) for op in operations()}
    assert {(m, p) for p, item in doc["paths"].items() for m in item} == ops
    start = doc["components"]["schemas"]["StartRequest"]["properties"]["workflow"]
    assert start["enum"] == ["echo", "live_panel", "research", "score", "ship", "triage", "wait", "wait_with_work"]
    assert "security" not in doc
    gated = serve(token="t").get("/api/openapi.json", headers={"Authorization": "Bearer t"}).json()
    validate(gated)
    assert gated["security"] == [{"bearer": []}] and gated["paths"]["/healthz"]["get"]["security"] == []
    assert "401" in gated["paths"]["/api/runs"]["get"]["responses"]


def test_every_streamed_event_is_its_typed_model_as_json() -> None:
    from tether.server import event_json

    event = LogLine(run_id="r", seq=3, ts=1.5, level="info", msg="hello", fields={"n": 1, "tags": ["a"]})
    decoded = EVENT_ADAPTER.validate_json(event_json(event))
    assert decoded == event and isinstance(decoded, LogLine)
