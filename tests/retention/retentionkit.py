"""What the retention tests share: a three-level workflow tree with agents and a tool, and a count of every row a
store holds for some runs, table by table (every table of the schema is either counted or named as not a run's)."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlparse

import tether
from tether.contracts.messages import ChatRequest
from tether.testing import Reply, ToolCall

PRICES = {"m": tether.Price(input=1.0, output=2.0)}

NOT_A_RUNS_ROWS = {
    "epochs": "a run's lease epoch outlives it, so a run id used again never reuses an epoch (SPEC: leases)",
    "budget_windows": "a budget scope's spend per window, not a run's",
    "schedules": "a schedule's definition; its last_run only names the run it queued",
    "version": "the schema's version",
    "sessions": "a session's record: it outlives the runs of its turns (docs/sessions.md, Storage)",
    "turns": "a session's turn tree: a deleted turn's record stays, and a line through it cannot be rebuilt",
    "notes": "a workspace's notes outlive the runs that wrote them (they name the run, not own it)",
}
"""Tables whose rows a delete leaves, and why. A table neither here nor holding a run_id or blob key fails."""


def answer(request: ChatRequest) -> Reply:
    """Call the `note` tool once when it is offered, else answer with the prompt echoed back."""
    offered = any(t.name == "note" for t in request.tools)
    if offered and not any(m.role == "tool" for m in request.messages):
        return Reply(tool_calls=[ToolCall("note", {"text": "remember"})])
    return Reply(text="answer to " + request.messages[0].text_content[:60])


@tether.tool
def note(text: str) -> str:
    """Write a note down."""
    return f"noted {text}"


def make_engine(url: str) -> tuple[tether.Engine, tether.models.FakeModel]:
    fake = tether.models.fake("fake", script=answer, prices=PRICES)
    return tether.Engine(models=[fake], routing={"loop": "fake:m"}, store=url), fake


@tether.workflow(name="leaf")
async def leaf(ctx: tether.Ctx, topic: str) -> str:
    return await ctx.agent(f"leaf on {topic}", label="leaf")


@tether.workflow(name="mid")
async def mid(ctx: tether.Ctx, topic: str) -> str:
    first = await ctx.agent(f"mid on {topic}", label="mid")
    return first + await ctx.workflow(leaf, {"topic": topic})


@tether.workflow(name="tree")
async def tree(ctx: tether.Ctx, topic: str) -> str:
    top = await ctx.agent(f"root on {topic}", label="root", tools=[note])
    return top + await ctx.workflow(mid, {"topic": topic})


@tether.workflow(name="gated")
async def gated(ctx: tether.Ctx) -> str:
    said = await ctx.agent("gated asks", label="ask")
    return said + str(await ctx.await_external("approve"))


def rows_of(url: str, run_ids: set[str]) -> dict[str, int]:
    """Rows (files, for JSONL) the store holds for `run_ids`, by table; blobs by the run their key names."""
    if url.startswith("sqlite"):
        with sqlite3.connect(url.removeprefix("sqlite:///")) as c:
            tables = [r[0] for r in c.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
                      if not r[0].startswith("sqlite_")]
            columns = {t: [r[1] for r in c.execute(f'PRAGMA table_info("{t}")')] for t in tables}
            return _count(tables, columns, lambda sql, p: c.execute(sql, p).fetchall(), "?", run_ids)
    if url.startswith("jsonl"):
        root = Path(url.removeprefix("jsonl://"))
        out: dict[str, int] = {}
        for path in root.iterdir():
            for r in run_ids:
                if path.is_file() and path.name.startswith(r + "."):
                    kind = path.name[len(r):]
                    out[kind] = out.get(kind, 0) + 1
        out["blobs"] = sum(unquote(p.name).partition("/")[0] in run_ids for p in (root / "blobs").iterdir())
        return out
    import psycopg

    schema = parse_qs(urlparse(url).query)["schema"][0]
    with psycopg.connect(url.split("?")[0]) as c:
        tables = [r[0] for r in c.execute("SELECT table_name FROM information_schema.tables WHERE table_schema = %s",
                                          (schema,))]
        columns = {t: [r[0] for r in c.execute("SELECT column_name FROM information_schema.columns WHERE "
                                               "table_schema = %s AND table_name = %s", (schema, t))] for t in tables}
        return _count([f'"{schema}"."{t}"' for t in tables],
                      {f'"{schema}"."{t}"': cols for t, cols in columns.items()},
                      lambda sql, p: c.execute(sql, p).fetchall(), "%s", run_ids)


def _count(tables: list[str], columns: dict[str, list[str]], query: Any, mark: str, run_ids: set[str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for t in tables:
        name = t.rsplit(".", 1)[-1].strip('"')
        if name in NOT_A_RUNS_ROWS:
            if "run_id" in columns[t]:
                out[name] = sum(query(f"SELECT count(*) FROM {t} WHERE run_id = {mark}", (r,))[0][0] for r in run_ids)
            continue
        if "run_id" in columns[t]:
            out[name] = sum(query(f"SELECT count(*) FROM {t} WHERE run_id = {mark}", (r,))[0][0] for r in run_ids)
        elif "key" in columns[t] and name == "blobs":
            out[name] = sum(k.partition("/")[0] in run_ids for (k,) in query(f"SELECT key FROM {t}", ()))
        else:
            raise AssertionError(f"table {name} holds neither a run_id nor a blob key and is not named in "
                                 f"NOT_A_RUNS_ROWS: say whether a delete must empty it")
    return out


def blob_keys(url: str, owner: str) -> set[str]:
    """The blob keys the store holds under `owner`'s prefix."""
    if url.startswith("sqlite"):
        with sqlite3.connect(url.removeprefix("sqlite:///")) as c:
            return {k for (k,) in c.execute("SELECT key FROM blobs") if k.partition("/")[0] == owner}
    if url.startswith("jsonl"):
        root = Path(url.removeprefix("jsonl://"))
        return {unquote(p.name) for p in (root / "blobs").iterdir() if unquote(p.name).partition("/")[0] == owner}
    import psycopg

    schema = parse_qs(urlparse(url).query)["schema"][0]
    with psycopg.connect(url.split("?")[0]) as c:
        return {k for (k,) in c.execute(f'SELECT key FROM "{schema}".blobs') if k.partition("/")[0] == owner}
