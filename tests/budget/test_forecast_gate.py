"""`forecast_gate=`: "refuse" raises a typed refusal before anything is written when the forecast's P95 is over the
run's ceiling (the store's rows and bytes are the same after), "suspend" parks the run on a `forecast` suspension
carrying the forecast until an operator approves it through the CLI; `tether estimate` prints the forecast."""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import sys
from pathlib import Path
from typing import Any

import pytest

import tether
from crashkit import APP_DIR, cli

sys.path.insert(0, str(Path(__file__).parent))
from forecast_kit import research, stochastic_model

ARGS = {"topic": "x"}


def store_digest(db: Path) -> str:
    """Every row of every table, and the bytes of the database file (its WAL's header salts change at every open)."""
    h = hashlib.sha256()
    with sqlite3.connect(db) as c:
        for (table,) in c.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name"):
            for row in c.execute(f"SELECT * FROM {table} ORDER BY 1"):
                h.update(repr(row).encode())
    h.update(db.read_bytes())
    return h.hexdigest()


async def _history(engine: tether.Engine, n: int = 20) -> tether.Forecast:
    for i in range(n):
        assert (await engine.run(research, ARGS, run_id=f"h{i}")).status == "ok"
    return await engine.forecast(research, ARGS)


async def test_refuse_raises_before_any_entry_is_written_when_p95_exceeds_the_ceiling(
    engine_for: Any, tmp_path: Path,
) -> None:
    engine = engine_for(stochastic_model(11))
    f = await _history(engine)
    assert f.p95_usd is not None
    await engine.close()
    engine = engine_for(stochastic_model(11))
    await engine.runs()  # opening the store (its schema check) is what the refused run may do, and no more
    await engine.close()
    before = store_digest(tmp_path / "t.db")
    engine = engine_for(stochastic_model(11))
    with pytest.raises(tether.ForecastRefusedError) as refused:
        await engine.run(research, ARGS, run_id="big", budget_usd=f.p95_usd * 0.9, forecast_gate="refuse")
    await engine.close()
    assert store_digest(tmp_path / "t.db") == before
    data = refused.value.data
    assert data["p95_usd"] == f.p95_usd and data["limit_usd"] == pytest.approx(f.p95_usd * 0.9)
    assert refused.value.code == "forecast-refused" and "nothing was written" in refused.value.message

    engine = engine_for(stochastic_model(11))  # under the ceiling: it runs, and the genesis keeps the forecast
    ok = await engine.run(research, ARGS, run_id="fits", budget_usd=f.p95_usd * 1.1, forecast_gate="refuse")
    assert ok.status == "ok"
    judged = (await engine.inspect("fits"))[0].value["forecast"]
    assert judged["over"] is False and judged["cost_usd"]["p95"] == f.p95_usd and judged["gate"] == "refuse"
    await engine.close()


async def test_with_too_little_history_the_gate_lets_the_run_go_and_journals_why(engine_for: Any) -> None:
    engine = engine_for(stochastic_model(12))
    out = await engine.run(research, ARGS, run_id="first", budget_usd=0.0001, forecast_gate="refuse")
    assert out.status == "exhausted"  # the ceiling still binds; only the forecast could not judge it
    judged = (await engine.inspect("first"))[0].value["forecast"]
    assert judged["enough"] is False and judged["over"] is False
    await engine.close()


def test_suspend_parks_the_run_with_its_forecast_and_the_cli_approves_it(engine_for: Any, tmp_path: Path) -> None:
    import asyncio

    url = f"sqlite:///{tmp_path}/t.db"
    env = {**os.environ, "FORECAST_STORE": url, "FORECAST_SEED": "13",
           "PYTHONPATH": os.pathsep.join([str(APP_DIR), os.environ.get("PYTHONPATH", "")])}

    async def first() -> tuple[tether.Forecast, tether.RunOutcome]:
        engine = engine_for(stochastic_model(13))
        f = await _history(engine)
        assert f.p95_usd is not None
        out = await engine.run(research, ARGS, run_id="s", budget_usd=f.p95_usd / 2, forecast_gate="suspend")
        await engine.close()
        return f, out

    f, parked = asyncio.run(first())
    assert parked.status == "suspended" and parked.pending == ["forecast"] and parked.cost.provider_calls == 0

    estimate = cli("estimate", "forecast_kit:research", "--args", json.dumps(ARGS), "--json", env=env)
    assert estimate.returncode == 0, estimate.stdout + estimate.stderr
    assert json.loads(estimate.stdout)["cost_usd"] == f.model_dump(mode="json")["cost_usd"]
    text = cli("estimate", "forecast_kit:research", "--args", json.dumps(ARGS), env=env).stdout
    assert "P95" in text and "from 20 runs" in text

    listed = cli("runs", "--store", url, env={**env, "COLUMNS": "200"}).stdout
    row = next(line for line in listed.splitlines() if line.split()[1:2] == ["s"])
    assert "forecast p95" in listed and f"{f.p95_usd:.6g}"[:5] in row and "over" in row, listed
    runs_json = json.loads(cli("runs", "--json", "--store", url, env=env).stdout)
    judged = next(r for r in runs_json if r["run_id"] == "s")["forecast"]
    assert judged["p95_usd"] == f.p95_usd and judged["over"] is True and judged["gate"] == "suspend"
    inspected = json.loads(cli("inspect", "s", "--json", "--store", url, env=env).stdout)
    waiting = next(e for e in inspected if e["kind"] == "external")
    assert waiting["value"]["forecast"]["cost_usd"]["p95"] == f.p95_usd and waiting["value"]["forecast"]["over"]
    refused = cli("run", "forecast_kit:research", "--args", json.dumps(ARGS), "--budget", "0.001", "--run-id", "r",
                  "--forecast-gate", "refuse", env=env)
    assert refused.returncode == 1 and "error (forecast-refused): forecast refused run 'r'" in refused.stderr
    assert "r" not in [r["run_id"] for r in json.loads(cli("runs", "--json", "--store", url, env=env).stdout)]
    wrong = cli("resolve", "s", "forecast", "yes", "--store", url, env=env)
    assert wrong.returncode == 2, wrong.stdout + wrong.stderr
    approved = cli("resolve", "s", "forecast", "approve", "--store", url, env=env)
    assert approved.returncode == 0, approved.stdout + approved.stderr
    done = cli("resume", "s", "--app", "forecast_kit:engine", "--json", env=env)
    doc = json.loads(done.stdout or "null")
    assert doc is not None, done.stderr
    # approved, the run goes on under its ceiling (approving is not raising it: half its P95 may run out)
    assert doc["status"] in ("ok", "exhausted") and doc["pending"] == [] and doc["cost"]["provider_calls"] >= 1


async def test_forecast_gate_takes_refuse_or_suspend_and_judges_no_queued_run(engine_for: Any) -> None:
    engine = engine_for(stochastic_model(14))
    with pytest.raises(tether.ConfigError, match="forecast_gate must be one of 'refuse', 'suspend'"):
        engine.start(research, ARGS, forecast_gate="park")  # type: ignore[typeddict-item]
    with pytest.raises(tether.ConfigError, match="a queued run is not judged"):
        await engine.enqueue(research, ARGS, forecast_gate="refuse")
    await engine.close()


async def test_abandoning_the_forecast_suspension_cancels_the_run_without_a_call(engine_for: Any) -> None:
    engine = engine_for(stochastic_model(15))
    f = await _history(engine, 6)
    assert f.p95_usd is not None
    parked = await engine.run(research, ARGS, run_id="x", budget_usd=f.p95_usd / 3, forecast_gate="suspend")
    assert parked.status == "suspended" and parked.pending == ["forecast"]
    assert await engine.abandon("x", "forecast", "too dear")
    out = await engine.resume("x", research)
    assert out.status == "cancelled" and out.cost.provider_calls == 0
    await engine.close()


def pg_digest(dsn: str, schema: str) -> str:
    """Every row of every table of the store's schema."""
    import psycopg

    h = hashlib.sha256()
    with psycopg.connect(dsn) as conn:
        tables = [r[0] for r in conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = %s ORDER BY 1", (schema,))]
        for table in tables:
            for row in conn.execute(f'SELECT * FROM "{schema}"."{table}" ORDER BY 1'):
                h.update(repr(row).encode())
    return h.hexdigest()


async def test_on_postgresql_refuse_judges_against_a_scopes_remaining_budget_and_writes_nothing(
    pg_dsn: str, pg_schema: str,
) -> None:
    url = f"{pg_dsn}?schema={pg_schema}"
    engine = tether.Engine(models=[stochastic_model(16)], routing={"loop": "fake:m"}, store=url)
    f = await _history(engine, 8)
    assert f.p95_usd is not None
    scope = tether.Budget(usd=f.p95_usd * 0.8, window="day", scope="tenant:acme")
    before = pg_digest(pg_dsn, pg_schema)
    with pytest.raises(tether.ForecastRefusedError) as refused:  # no ceiling of its own: the scope's left binds
        await engine.run(research, ARGS, run_id="big", forecast_gate="refuse", budgets=[scope])
    assert pg_digest(pg_dsn, pg_schema) == before
    assert refused.value.data["against"] == "what budget scope 'tenant:acme' has left"
    assert refused.value.data["limit_usd"] == pytest.approx(f.p95_usd * 0.8)
    await engine.close()
