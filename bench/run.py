"""`make bench`: every performance figure beside its reference, measured in this one run, as one table.

Each figure runs in a fresh Python process (so peak RSS is that figure's own and no warm cache or
leftover task of one system helps another); the references run in the same way, in the same run, on
the same machine. The table is Markdown, printed and (with `--out FILE`) written, followed by small
tables of how cost grows with steps, turns and concurrency.

    python bench/run.py                # the full table (a few minutes on 2 cores)
    python bench/run.py --quick        # smaller sizes, for a smoke run
    python bench/run.py --only replay  # figures whose name contains "replay"

Benchmarks print figures and ratios; nothing here is a pass/fail test. A peer that is not installed
(`pip install -e '.[bench]'`) is reported as such in its row rather than given a number.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
PACKAGES = ("tether", "pydantic", "pydantic-core", "pydantic-ai-slim", "dbos", "langgraph",
            "langgraph-checkpoint-sqlite", "litellm", "psycopg", "rfc8785")


# -- figures: each one runs alone in a child process ----------------------------------------------------
def _figures(quick: bool) -> dict[str, Callable[[], dict[str, Any]]]:
    sys.path.insert(0, str(HERE))
    import agent_loop
    import journal
    import peers
    import startup
    import store_retention

    big = 2_000 if quick else 10_000
    steps = 2_000 if quick else 10_000
    figs: dict[str, Callable[[], dict[str, Any]]] = {
        "one_turn": lambda: agent_loop.one_turn(n=200 if quick else agent_loop.ONE_TURN_N,
                                                rounds=1 if quick else 5),
        "concurrent_tether_1000": lambda: agent_loop.concurrent_tether(1_000),
        "concurrent_pydantic_ai_1000": lambda: agent_loop.concurrent_pydantic_ai(1_000),
        f"concurrent_tether_{big}": lambda: agent_loop.concurrent_tether(big),
        f"concurrent_pydantic_ai_{big}": lambda: agent_loop.concurrent_pydantic_ai(big),
        f"concurrent_tether_{big}_bounded": lambda: agent_loop.concurrent_tether(big, concurrency=1_000),
        "replay_sqlite": lambda: journal.replay("sqlite", steps=steps),
        "replay_jsonl": lambda: journal.replay("jsonl", steps=steps),
        "repeated_label": lambda: journal.repeated_label(steps),
        "unique_label": lambda: {"cpu_s": journal.replay("sqlite", steps=steps, rounds=1)["resume_cpu_s"]},
        "long_agent_10": lambda: agent_loop.long_agent(10),
        "long_agent_200": lambda: agent_loop.long_agent(50 if quick else 200, rounds=1),
        "sqlite_appends": lambda: journal.sqlite_appends(1_000 if quick else journal.APPENDS),
        "postgres_appends": lambda: journal.postgres_appends(300 if quick else 1_000),
        "retention_delete_sqlite": lambda: store_retention.delete_run("sqlite"),
        "retention_delete_postgres": lambda: store_retention.delete_run("postgres"),
        "retention_sweep_sqlite": lambda: store_retention.sweep_runs("sqlite", 1_000 if quick else 10_000),
        "retention_sweep_postgres": lambda: store_retention.sweep_runs("postgres", 1_000 if quick else 10_000),
        "chain_appends": lambda: journal.chain_appends(1_000 if quick else journal.APPENDS),
        "group_commit": lambda: journal.group_commit(8, 50 if quick else 250),
        "tether_one_step": lambda: peers.tether_one_step(100 if quick else peers.N),
        "dbos_one_step": lambda: peers.dbos_one_step(100 if quick else peers.N),
        "langgraph_one_node": lambda: peers.langgraph_one_node(100 if quick else peers.N),
        "budget_race": _budget_race,
        "import_tether": lambda: startup.import_tether(5 if quick else startup.ROUNDS),
        "cli_version": lambda: startup.cli_version(5 if quick else startup.ROUNDS),
        "run_first_request": lambda: startup.run_first_request(3 if quick else 5),
    }
    if not quick:  # instruction counts under callgrind: a few minutes
        figs["instructions"] = _instructions
    if not quick:  # 100,000 agents in one run, at most HUGE_CONCURRENCY invocations at once (a minute or two)
        figs["concurrent_tether_100000"] = lambda: agent_loop.concurrent_tether(
            100_000, concurrency=agent_loop.HUGE_CONCURRENCY, branches=agent_loop.HUGE_CONCURRENCY)
        for n in (100, 1_000):
            figs[f"scale_concurrency_tether_{n}"] = lambda n=n: agent_loop.concurrent_tether(n)
            figs[f"scale_concurrency_pydantic_ai_{n}"] = lambda n=n: agent_loop.concurrent_pydantic_ai(n)
        for s in (1_000, 5_000, 20_000):
            figs[f"scale_steps_{s}"] = lambda s=s: journal.replay("sqlite", steps=s, rounds=1)
            figs[f"scale_steps_repeated_{s}"] = lambda s=s: journal.repeated_label(s)
        for t in (50,):
            figs[f"scale_turns_{t}"] = lambda t=t: agent_loop.long_agent(t)
        for t in (10, 50, 200):
            figs[f"checkpoint_read_{t}"] = lambda t=t: agent_loop.checkpoint_read(t)
    return figs


def _instructions() -> dict[str, Any]:
    """Instructions per one-turn agent (SQLite, memory), per pydantic-ai TestModel run and per replayed step."""
    import shutil

    import instructions

    if shutil.which("valgrind") is None:
        return {"error": "valgrind not installed (apt install valgrind)"}
    return {"tether_sqlite": instructions.per_agent("sqlite"), "tether_memory": instructions.per_agent("memory"),
            "pydantic_ai_test": instructions.per_peer_run(), "replayed_step": instructions.per_replayed_step()}


def _budget_race() -> dict[str, Any]:
    import asyncio

    import budget_race

    out: dict[str, Any] = {}
    for name, runner in budget_race.RUNNERS:
        r = asyncio.run(budget_race.timed(runner, name))
        out[name] = {"spend": r.spend_usd, "calls": r.model_calls, "stopped": r.stopped_itself, "how": r.how,
                     "error": r.error, "seconds": r.seconds, "crash_usd": r.crash_usd}
    return out


def run_one(name: str, quick: bool) -> None:
    """Child mode: run one figure and print it as one JSON line (with this process's peak RSS)."""
    import warnings

    warnings.simplefilter("ignore")
    try:
        result = _figures(quick)[name]()
    except ImportError as exc:
        result = {"error": f"not installed: {exc}"}
    result["rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print("FIGURE " + json.dumps(result))


def measure(name: str, quick: bool) -> dict[str, Any]:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--figure", name, *(["--quick"] if quick else [])]
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    started = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=1800)
    took = time.perf_counter() - started
    for line in proc.stdout.splitlines():
        if line.startswith("FIGURE "):
            result: dict[str, Any] = json.loads(line[len("FIGURE "):])
            result["took_s"] = took
            return result
    tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
    return {"error": f"failed (exit {proc.returncode}): {tail[0][:160]}", "took_s": took}


# -- the table ----------------------------------------------------------------------------------------
@dataclass
class Row:
    figure: str
    tether: str
    reference: str
    ratio: str
    target: str


def _f(x: float | None, unit: str = "", digits: int = 0) -> str:
    if x is None:
        return "n/a"
    return f"{x:,.{digits}f}{unit}"


def _ratio(a: float | None, b: float | None) -> str:
    if not a or not b:
        return "n/a"
    return f"{a / b:.2f}x"


def _err(r: dict[str, Any]) -> str | None:
    e = r.get("error")
    return None if e is None else str(e)


def _huge_rows(h: dict[str, Any], t: dict[str, Any]) -> list[Row]:
    """The 100,000-agent rows: wall per agent beside the 10,000-agent run's (cost linear in agents), peak RSS."""
    label = "100,000 one-turn agents in one run (10 ms), at most 10,000 at once"
    if _err(h) or _err(t):
        return [Row(label, _err(h) or "", _err(t) or "", "n/a", "<= 1.2x")]
    per, per10 = h["wall_s"] / 100_000 * 1e6, t["wall_s"] / 10_000 * 1e6
    return [Row(f"{label}, wall per agent (total)", f"{_f(per, ' us')} ({_f(h['wall_s'], ' s', 1)})",
                f"10,000 at once, per agent: {_f(per10, ' us')}", _ratio(per, per10), "<= 1.2x"),
            *([Row(f"{label}, CPU per agent (the process's CPU seconds; a loaded box moves them less)",
                   _f(h["cpu_s"] / 100_000 * 1e6, " us"), f"10,000 at once: {_f(t['cpu_s'] / 10_000 * 1e6, ' us')}",
                   _ratio(h["cpu_s"], t["cpu_s"] * 10), "(info)")] if "cpu_s" in h and "cpu_s" in t else []),
            Row(f"{label}, peak RSS", _f(h.get("rss_mb"), " MB"), "", "", "<= 1,500 MB")]


def _instruction_rows(i: dict[str, Any]) -> list[Row]:
    """Instruction counts (callgrind): the one-turn agent's figure that does not move with the box's load."""
    if not i:
        return []
    if _err(i):
        return [Row("instructions per one-turn agent (callgrind)", _err(i) or "", "", "n/a", "<= 0.15x")]
    ref = f"pydantic-ai Agent.run + TestModel: {_f(i['pydantic_ai_test'] / 1000, 'k')}"
    return [Row("instructions per one-turn agent, SQLite journal (callgrind)", _f(i["tether_sqlite"] / 1000, "k"),
                ref, _ratio(i["tether_sqlite"], i["pydantic_ai_test"]), "<= 0.15x"),
            Row("instructions per one-turn agent, memory journal (callgrind)", _f(i["tether_memory"] / 1000, "k"),
                ref, _ratio(i["tether_memory"], i["pydantic_ai_test"]), "(info)"),
            Row("instructions per replayed step, resume on SQLite (callgrind)",
                _f(i["replayed_step"] / 1000, "k", 1), "", "", "(info)")]


def rows(res: dict[str, dict[str, Any]], quick: bool) -> list[Row]:
    out: list[Row] = []
    big = 2_000 if quick else 10_000

    o = res.get("one_turn", {})
    if "one_turn" not in res:
        pass
    elif _err(o):
        out.append(Row("one-turn agent, us/invocation", "error", _err(o) or "", "", "<= 0.15x"))
    else:
        t = o.get("tether_sqlite_us")
        out.append(Row("one-turn agent (SQLite journal), us/invocation", _f(t, " us"),
                       f"pydantic-ai Agent + TestModel: {_f(o.get('pydantic_ai_test_us'), ' us')}",
                       _ratio(t, o.get("pydantic_ai_test_us")), "<= 0.15x"))
        out.append(Row("one-turn agent (SQLite journal), us/invocation", _f(t, " us"),
                       f"pydantic-ai Agent + FunctionModel: {_f(o.get('pydantic_ai_function_us'), ' us')}",
                       _ratio(t, o.get("pydantic_ai_function_us")), "<= 0.15x"))
        median = o.get("median_ratio_test")
        if median is not None:
            out.append(Row("one-turn agent (SQLite journal), median ratio of the rounds to TestModel", "", "",
                           f"{median:.2f}x", "<= 0.15x"))
        long = o.get("tether_sqlite_long_us")
        if long is not None:
            out.append(Row(f"one-turn agent (SQLite journal), {o.get('long_runs', 0):.0f} runs of them on one file "
                           "(WAL checkpoints amortized), us/invocation", _f(long, " us"),
                           f"pydantic-ai Agent + TestModel: {_f(o.get('pydantic_ai_test_us'), ' us')}",
                           _ratio(long, o.get("pydantic_ai_test_us")), "(info)"))
        out.append(Row("one-turn agent (memory journal), us/invocation", _f(o.get("tether_memory_us"), " us"),
                       f"pydantic-ai Agent + TestModel: {_f(o.get('pydantic_ai_test_us'), ' us')}",
                       _ratio(o.get("tether_memory_us"), o.get("pydantic_ai_test_us")), "(info)"))
    out += _instruction_rows(res.get("instructions", {}))
    for n in (1_000, big):
        t, p = res.get(f"concurrent_tether_{n}", {}), res.get(f"concurrent_pydantic_ai_{n}", {})
        if not (t or p):
            continue
        label = f"{n:,} concurrent one-turn agents (10 ms), wall"
        if _err(t) or _err(p):
            out.append(Row(label, _err(t) or "", _err(p) or "", "n/a", "<= 0.10x"))
            continue
        ref = f"pydantic-ai FunctionModel: {_f(p.get('wall_s'), ' s', 2)}"
        out.append(Row(label, _f(t.get("wall_s"), " s", 2), ref,
                       _ratio(t.get("wall_s"), p.get("wall_s")), "<= 0.10x"))
        if n == big:
            out.append(Row(f"{n:,} concurrent one-turn agents, peak RSS", _f(t.get("rss_mb"), " MB"),
                           f"pydantic-ai: {_f(p.get('rss_mb'), ' MB')}", _ratio(t.get("rss_mb"), p.get("rss_mb")),
                           "<= 200 MB"))
            b = res.get(f"concurrent_tether_{n}_bounded", {})
            if b and not _err(b):
                out.append(Row(f"{n:,} one-turn agents, at most 1,000 at once (engine concurrency), wall",
                               _f(b.get("wall_s"), " s", 2), ref, _ratio(b.get("wall_s"), p.get("wall_s")), "(info)"))
                out.append(Row(f"{n:,} one-turn agents, at most 1,000 at once, peak RSS", _f(b.get("rss_mb"), " MB"),
                               f"pydantic-ai (all at once): {_f(p.get('rss_mb'), ' MB')}",
                               _ratio(b.get("rss_mb"), p.get("rss_mb")), "(info)"))
            h = res.get("concurrent_tether_100000", {})
            if h:
                out += _huge_rows(h, t)
    for kind, raw in (("sqlite", "SELECT + json.loads"), ("jsonl", "read file + json.loads per line")):
        r = res.get(f"replay_{kind}", {})
        if not r:
            continue
        label = f"replay of a {r.get('entries', 0):,.0f}-entry run ({kind}), entries/s"
        if _err(r):
            out.append(Row(label, _err(r) or "", "", "n/a", ">= 0.90x"))
            continue
        out.append(Row(label, _f(r.get("tether_per_s")), f"raw {raw}: {_f(r.get('raw_per_s'))}",
                       _ratio(r.get("tether_per_s"), r.get("raw_per_s")), ">= 0.90x"))
        if r.get("load_per_s"):
            out.append(Row(f"store read of that run ({kind}: read, verify checksums, decode), entries/s",
                           _f(r.get("load_per_s")), f"raw {raw}: {_f(r.get('raw_per_s'))}",
                           _ratio(r.get("load_per_s"), r.get("raw_per_s")), ">= 0.90x"))
    rep, uni = res.get("repeated_label", {}), res.get("unique_label", {})
    if rep and uni and not (_err(rep) or _err(uni)):
        extra = f" ({rep['examined']:,.0f} candidates examined)" if "examined" in rep else ""
        out.append(Row(f"resume CPU, {big:,} steps sharing one label", _f(rep.get("cpu_s"), " s", 2) + extra,
                       f"same steps, unique labels: {_f(uni.get('cpu_s'), ' s', 2)}",
                       _ratio(rep.get("cpu_s"), uni.get("cpu_s")), "~1x (linear)"))
    l10, l200 = res.get("long_agent_10", {}), res.get("long_agent_200", {})
    if l10 and l200 and not (_err(l10) or _err(l200)):
        turns = 50 if quick else 200
        out.append(Row(f"long agent, ms/turn at {turns} turns", _f(l200.get("ms_per_turn"), " ms", 2),
                       f"ms/turn at 10 turns: {_f(l10.get('ms_per_turn'), ' ms', 2)}",
                       _ratio(l200.get("ms_per_turn"), l10.get("ms_per_turn")), "~1x (flat)"))
    a = res.get("sqlite_appends", {})
    if not a:
        pass
    elif _err(a):
        out.append(Row("SQLite appends, appends/s", "n/a", _err(a) or "", "n/a", ">= 0.90x"))
    else:
        median = a.get("median_ratio")
        out.append(Row("SQLite appends (one per transaction, leased), appends/s, best round",
                       _f(a.get("tether_per_s")), f"raw sqlite3 insert+commit: {_f(a.get('raw_per_s'))}",
                       _ratio(a.get("tether_per_s"), a.get("raw_per_s")), ">= 0.90x"))
        if median is not None:
            out.append(Row("SQLite appends, median ratio of the paired rounds", "", "", f"{median:.2f}x",
                           ">= 0.90x"))
    ch = res.get("chain_appends", {})
    if ch and _err(ch):
        out.append(Row("hash chain, appends/s", "n/a", _err(ch) or "", "n/a", "(info)"))
    elif ch:
        out.append(Row("hash chain: SQLite appends of chained entries, appends/s, best round (sha256 per append)",
                       f"{_f(ch.get('chained_per_s'))} ({ch.get('hashes_per_append_chained', 0):.2f})",
                       f"same entries unchained: {_f(ch.get('unchained_per_s'))} "
                       f"({ch.get('hashes_per_append_unchained', 0):.2f})",
                       f"{ch.get('median_ratio', 0):.2f}x", "one hash per append"))
        out.append(Row("hash chain: load of the chained journal, entries/s (sha256 per entry)",
                       f"{_f(ch.get('chained_load_per_s'))} ({ch.get('hashes_per_loaded_entry_chained', 0):.2f})",
                       f"unchained: {_f(ch.get('unchained_load_per_s'))} "
                       f"({ch.get('hashes_per_loaded_entry_unchained', 0):.2f})",
                       f"{ch.get('median_load_ratio', 0):.2f}x", "(info)"))
        out.append(Row("payloads sealed by digest: SQLite appends of chained, sealed entries, appends/s (sha256 per "
                       "append)", f"{_f(ch.get('sealed_per_s'))} ({ch.get('hashes_per_append_sealed', 0):.2f})",
                       f"chained, unsealed: {_f(ch.get('chained_per_s'))}", f"{ch.get('sealed_ratio', 0):.2f}x",
                       "payload digest + link"))
        out.append(Row("payloads sealed by digest: load of the sealed journal, entries/s (sha256 per entry)",
                       f"{_f(ch.get('sealed_load_per_s'))} ({ch.get('hashes_per_loaded_entry_sealed', 0):.2f})",
                       f"chained, unsealed: {_f(ch.get('chained_load_per_s'))}",
                       f"{ch.get('sealed_load_ratio', 0):.2f}x", "(info)"))
    pg = res.get("postgres_appends", {})
    if not pg:
        pass
    elif _err(pg):
        out.append(Row("PostgreSQL appends, appends/s", "n/a", _err(pg) or "", "n/a", "(info)"))
    else:
        out.append(Row("PostgreSQL appends (one per transaction, leased), appends/s", _f(pg.get("tether_per_s")),
                       f"raw psycopg insert+commit: {_f(pg.get('raw_per_s'))}",
                       _ratio(pg.get("tether_per_s"), pg.get("raw_per_s")), "(info)"))
        floor = f"raw psycopg autocommit insert (the floor): {_f(pg.get('floor_per_s'))}"
        for label, key in (("leased", "tether_per_s"), ("no lease", "unleased_per_s")):
            out.append(Row(f"PostgreSQL appends (one per transaction, {label}) vs the floor, appends/s",
                           _f(pg.get(key)), floor, _ratio(pg.get(key), pg.get("floor_per_s")), ">= 0.70x"))
    for store in ("sqlite", "postgres"):
        d, w = res.get(f"retention_delete_{store}", {}), res.get(f"retention_sweep_{store}", {})
        if d:
            out.append(Row(f"delete of a {d.get('steps', 0):,.0f}-step run ({store}), ms", _err(d) or
                           _f(d.get("tether_s", 0) * 1e3, " ms", 2), f"raw DELETE of its rows in one transaction: "
                           f"{_f(d.get('raw_s', 0) * 1e3, ' ms', 2)}", _ratio(d.get("tether_s"), d.get("raw_s")),
                           "(info)"))
        if w:
            out.append(Row(f"sweep of {w.get('runs', 0):,.0f} runs ({store}), us/run", _err(w) or
                           _f(w.get("per_run_us"), " us"), f"total {_f(w.get('total_s'), ' s', 2)}", "", "(info)"))
    g = res.get("group_commit", {})
    if g and not _err(g):
        out.append(Row(f"8 parallel branches, {g.get('steps', 0):,.0f} steps, steps/s (store writes)",
                       f"{_f(g.get('parallel_steps_per_s'))} ({_f(g.get('parallel_writes'))} writes)",
                       f"same steps sequentially: {_f(g.get('sequential_steps_per_s'))} "
                       f"({_f(g.get('sequential_writes'))} writes)",
                       _ratio(g.get("parallel_steps_per_s"), g.get("sequential_steps_per_s")), "(info)"))
    t1 = res.get("tether_one_step", {})
    for key, peer in (("dbos_one_step", "DBOS one-step workflow (SQLite)"),
                      ("langgraph_one_node", "LangGraph one node + SqliteSaver")):
        p = res.get(key, {})
        if not (t1 or p):
            continue
        label = "one-step durable workflow on SQLite, us/run"
        if _err(t1) or _err(p):
            out.append(Row(label, _err(t1) or _f(t1.get("us"), " us"), f"{peer}: {_err(p) or ''}", "n/a", "(info)"))
            continue
        out.append(Row(label, _f(t1.get("us"), " us"), f"{peer} {p.get('version', '')}: {_f(p.get('us'), ' us')}",
                       _ratio(t1.get("us"), p.get("us")), "(info)"))
    race = res.get("budget_race", {})
    if not race:
        pass
    elif _err(race):
        out.append(Row("budget race", _err(race) or "", "", "", ""))
    else:
        t = race.get("tether", {})
        b = race.get("tether (bounded)", {})
        if t and b and not (t.get("error") or b.get("error")):
            out.append(Row("budget race, hard vs bounded: wall s (calls completed)",
                           f"{_f(t.get('seconds'), ' s', 2)} ({t.get('calls')} calls)",
                           f"bounded: {_f(b.get('seconds'), ' s', 2)} ({b.get('calls')} calls)",
                           _ratio(t.get("seconds"), b.get("seconds")), "(info)"))
            out.append(Row("budget race: worst cost a crash could leave",
                           f"{_f(t.get('crash_usd'), ' USD', 4)}", f"bounded: {_f(b.get('crash_usd'), ' USD', 4)}",
                           _ratio(t.get("crash_usd"), b.get("crash_usd")), "hard <= 1.00 USD"))
        for peer in ("pydantic-ai", "litellm"):
            p = race.get(peer, {})
            how = "UsageLimits(cost_limit=1.00)" if peer == "pydantic-ai" else "BudgetManager"
            ref = f"{peer} {how}: " + (p["error"] if p.get("error") else
                                       f"{_f(p.get('spend'), ' USD', 2)}, {p.get('calls')} calls")
            out.append(Row("budget race, 200 agents on 1.00 USD: spend (calls)",
                           f"{_f(t.get('spend'), ' USD', 2)} ({t.get('calls')} calls)" if not t.get("error")
                           else str(t["error"]), ref, _ratio(t.get("spend"), p.get("spend")), "spend <= 1.00 USD"))
    out += startup_rows(res)
    return out


def startup_rows(res: dict[str, dict[str, Any]]) -> list[Row]:
    """Start-up of a fresh process: `import tether`, `tether --version` / `--help`, `tether run`'s first request."""
    out: list[Row] = []
    imp, cli, run = res.get("import_tether", {}), res.get("cli_version", {}), res.get("run_first_request", {})
    if imp:
        if _err(imp):
            out.append(Row("`import tether`, wall", _err(imp) or "", "", "n/a", "(info)"))
        else:
            ref = f"`python -c pass`: {_f(imp.get('python_s'), ' s', 3)}"
            out.append(Row("`import tether` in a fresh process, wall (best of N)", _f(imp.get("import_s"), " s", 3),
                           ref, _ratio(imp.get("import_s"), imp.get("python_s")), "(info)"))
            out.append(Row("`import tether` and every name of `tether.__all__`, wall (best of N)",
                           _f(imp.get("all_names_s"), " s", 3), ref,
                           _ratio(imp.get("all_names_s"), imp.get("python_s")), "(info)"))
    if cli:
        if _err(cli):
            out.append(Row("`tether --version`, wall", _err(cli) or "", "", "n/a", "< 0.3 s"))
        else:
            ref = f"`python -c pass`: {_f(cli.get('python_s'), ' s', 3)}"
            out.append(Row("`tether --version`, wall (best of N)", _f(cli.get("version_s"), " s", 3), ref,
                           _ratio(cli.get("version_s"), cli.get("python_s")), "< 0.3 s"))
            out.append(Row("`tether --help`, wall (best of N)", _f(cli.get("help_s"), " s", 3), ref,
                           _ratio(cli.get("help_s"), cli.get("python_s")), "(info)"))
    if run:
        label = "`tether run` to its first model request (openai-compatible adapter on loopback), best of N"
        if _err(run):
            out.append(Row(label, _err(run) or "", "", "n/a", "< 1 s"))
        else:
            out.append(Row(label, _f(run.get("first_request_s"), " s", 3),
                           f"whole command, to exit: {_f(run.get('exit_s'), ' s', 3)}", "", "< 1 s"))
    return out


def scaling(res: dict[str, dict[str, Any]]) -> list[str]:
    lines: list[str] = []
    sizes = (1_000, 5_000, 10_000, 20_000)
    steps = [(s, res.get(f"scale_steps_{s}"), res.get(f"scale_steps_repeated_{s}")) for s in sizes]
    steps[2] = (10_000, res.get("replay_sqlite"), res.get("repeated_label"))
    if any(r for _, r, _ in steps):
        lines += ["", "Steps (SQLite): resume time per step, unique labels and one repeated label", "",
                  "| steps | resume, unique labels | per step | resume CPU, one repeated label | per step |",
                  "|---:|---:|---:|---:|---:|"]
        for s, r, rep in steps:
            if not r or _err(r):
                continue
            cpu = rep.get("cpu_s") if rep and not _err(rep) else None
            lines.append(f"| {s:,} | {_f(r.get('resume_s'), ' s', 3)} | {_f(r['resume_s'] / s * 1e6, ' us', 1)} | "
                         f"{_f(cpu, ' s', 3)} | {_f(cpu / s * 1e6 if cpu else None, ' us', 1)} |")
    turns = [(t, res.get(k)) for t, k in ((10, "long_agent_10"), (50, "scale_turns_50"), (200, "long_agent_200"))]
    if any(r for _, r in turns):
        lines += ["", "Turns (SQLite): one agent calling a tool every turn; a resume's checkpoint read", "",
                  "| turns | ms/turn | whole agent | checkpoint read back |", "|---:|---:|---:|---:|"]
        for t, r in turns:
            if r and not _err(r):
                ck = res.get(f"checkpoint_read_{t}") or {}
                read = "n/a" if not ck or _err(ck) else _f(ck["ms"], " ms", 2)
                lines.append(f"| {t} | {_f(r['ms_per_turn'], ' ms', 2)} | {_f(r['ms_per_turn'] * t / 1e3, ' s', 2)} "
                             f"| {read} |")
    conc = []
    for n in (100, 1_000, 10_000):
        t = res.get(f"scale_concurrency_tether_{n}") or res.get(f"concurrent_tether_{n}")
        p = res.get(f"scale_concurrency_pydantic_ai_{n}") or res.get(f"concurrent_pydantic_ai_{n}")
        if t and p and not (_err(t) or _err(p)):
            conc.append((n, t, p))
    if conc:
        lines += ["", "Concurrency: one-turn agents at once, 10 ms fake latency", "",
                  "| agents | tether wall | tether RSS | pydantic-ai wall | pydantic-ai RSS | wall ratio |",
                  "|---:|---:|---:|---:|---:|---:|"]
        for n, t, p in conc:
            lines.append(f"| {n:,} | {_f(t['wall_s'], ' s', 2)} | {_f(t['rss_mb'], ' MB')} | "
                         f"{_f(p['wall_s'], ' s', 2)} | {_f(p['rss_mb'], ' MB')} | "
                         f"{_ratio(t['wall_s'], p['wall_s'])} |")
    return lines


def compare(before: dict[str, dict[str, Any]], after: dict[str, dict[str, Any]]) -> list[str]:
    """An A/B table: each row of the table for BEFORE's figures beside the same row for AFTER's, by figure name."""
    old = {(r.figure, r.reference.split(":")[0]): r for r in rows(before, quick=False)}
    lines = ["| figure | reference | before: tether (ratio) | after: tether (ratio) | target |",
             "|---|---|---:|---:|---|"]
    for r in rows(after, quick=False):
        key = (r.figure, r.reference.split(":")[0])
        b = old.get(key)
        was = f"{b.tether} ({b.ratio})" if b else "n/a"
        lines.append(f"| {r.figure} | {key[1]} | {was} | {r.tether} ({r.ratio}) | {r.target} |")
    return lines


def machine() -> list[str]:
    cpu = "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    versions = []
    for name in PACKAGES:
        try:
            versions.append(f"{name} {version(name)}")
        except PackageNotFoundError:
            versions.append(f"{name} (not installed)")
    load = os.getloadavg() if hasattr(os, "getloadavg") else (0.0, 0.0, 0.0)
    return [
        f"- machine: {platform.platform()}, {cpu}, {os.cpu_count()} cores; load average at start "
        f"{load[0]:.2f} / {load[1]:.2f} / {load[2]:.2f}",
        f"- Python {platform.python_version()} ({platform.python_implementation()}), SQLite {sqlite3.sqlite_version}",
        f"- packages: {', '.join(versions)}",
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description="tether's performance table")
    parser.add_argument("--figure", help=argparse.SUPPRESS)
    parser.add_argument("--quick", action="store_true", help="smaller sizes (a smoke run)")
    parser.add_argument("--only", default="", help="run only figures whose name contains this")
    parser.add_argument("--out", help="also write the table (Markdown) to this file")
    parser.add_argument("--json", help="also write the raw figures (JSON) to this file")
    parser.add_argument("--compare", nargs=2, metavar=("BEFORE", "AFTER"),
                        help="print an A/B table of two --json files (each figure of BEFORE beside AFTER's)")
    args = parser.parse_args()
    if args.compare:
        print("\n".join(compare(*(json.loads(Path(f).read_text()) for f in args.compare))))
        return 0
    if args.figure:
        run_one(args.figure, args.quick)
        return 0
    header = ["# tether benchmark", "", *machine(), ""]
    print("\n".join(header), flush=True)
    res: dict[str, dict[str, Any]] = {}
    for name in _figures(args.quick):
        if args.only and args.only not in name:
            continue
        res[name] = measure(name, args.quick)
        print(f"  measured {name} in {res[name]['took_s']:.1f} s", file=sys.stderr, flush=True)
    table = ["| figure | tether | reference (same run) | ratio | target |", "|---|---:|---|---:|---|"]
    table += [f"| {r.figure} | {r.tether} | {r.reference} | {r.ratio} | {r.target} |" for r in rows(res, args.quick)]
    text = "\n".join([*header, *table, *scaling(res), ""])
    print("\n".join(table + scaling(res)))
    if args.out:
        Path(args.out).write_text(text)
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
