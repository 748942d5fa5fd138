"""Raw access to the stored entry texts of a run on each store, as someone with write access to it has."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tether
from tether.journal.chain import chain_part
from tether.stores.codec import checksum

RUN = "audit-1"


@dataclass
class Backend:
    """An engine on one store, and raw access to the stored entry texts of a run."""

    engine: tether.Engine
    url: str
    read: Callable[[], list[str]]
    write: Callable[[list[str]], None]


_PAYLOAD = ("payload_sha256", "value", "error", "redacted")


def rechecksummed(text: str, edit: Callable[[dict[str, Any]], None]) -> str:
    """The stored text with `edit` applied and its checksum recomputed, as the documented format allows."""
    data = json.loads(text)
    data.pop("checksum")
    edit(data)
    if "payload_sha256" in data:  # a sealed entry: its payload (or redaction mark) follows every other member
        data = {**{k: v for k, v in data.items() if k not in _PAYLOAD}, **{k: data[k] for k in _PAYLOAD if k in data}}
    body = json.dumps(data, separators=(",", ":"), ensure_ascii=False).encode()
    return body[:-1].decode() + f',"checksum":"{checksum(chain_part(body)[0])}"}}'  # a sealed entry: its chain form


def sqlite_texts(path: Path) -> tuple[Callable[[], list[str]], Callable[[list[str]], None]]:
    def read() -> list[str]:
        with sqlite3.connect(path) as c:
            return [r[0] for r in c.execute("SELECT json FROM entries WHERE run_id = ? ORDER BY seq", (RUN,))]

    def write(texts: list[str]) -> None:
        with sqlite3.connect(path) as c:
            c.execute("DELETE FROM entries WHERE run_id = ?", (RUN,))
            c.executemany("INSERT INTO entries (run_id, seq, json) VALUES (?, ?, ?)",
                          [(RUN, i, t) for i, t in enumerate(texts, start=1)])

    return read, write


def jsonl_texts(folder: Path) -> tuple[Callable[[], list[str]], Callable[[list[str]], None]]:
    path = folder / f"{RUN}.jsonl"

    def read() -> list[str]:
        return path.read_text().splitlines()

    def write(texts: list[str]) -> None:
        path.write_text("".join(t + "\n" for t in texts))

    return read, write


def postgres_texts(dsn: str, schema: str) -> tuple[Callable[[], list[str]], Callable[[list[str]], None]]:
    import psycopg

    def read() -> list[str]:
        with psycopg.connect(dsn) as c:
            rows = c.execute(f'SELECT json FROM "{schema}".entries WHERE run_id = %s ORDER BY seq', (RUN,))
            return [r[0] for r in rows]

    def write(texts: list[str]) -> None:
        with psycopg.connect(dsn) as c:
            c.execute(f'DELETE FROM "{schema}".entries WHERE run_id = %s', (RUN,))
            for i, t in enumerate(texts, start=1):
                c.execute(f'INSERT INTO "{schema}".entries (run_id, seq, json) VALUES (%s, %s, %s)', (RUN, i, t))

    return read, write


