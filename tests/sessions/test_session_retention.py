"""Retention inside a session: an archived turn keeps its place in the line, and what archive removed reads as such
in the history later turns send (never a silent gap that changes what the model is told happened)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from session_app import build, requests

from tether.engine import redaction


async def test_a_turn_archived_keeps_its_place_in_the_history_of_later_turns(store_url: str, tmp_path: Path) -> None:
    log = str(tmp_path / "requests.jsonl")
    engine, support = build(store_url, log)
    try:
        session = engine.session("kept")
        for prompt in ("hello", "second"):
            assert (await session.send(prompt, workflow=support)).status == "ok"
        report = await redaction.archive(engine, "kept.1", why="customer asked")
        assert report.entries["kept.1"]  # the answer's payload went
        third = await session.send("third", workflow=support)
        assert third.status == "ok"
    finally:
        await engine.close()
    sent = requests(log)[-1]["messages"]
    assert [m[0] for m in sent] == ["user", "assistant", "user", "assistant", "user"]
    assert sent[1] == ["assistant", "[turn 1 was archived]"]  # its place kept, its removed answer named
    assert sent[2:] == [["user", "second"], ["assistant", "re: second"], ["user", "third"]]


async def test_a_redacted_user_message_is_gone_from_the_store_and_later_turns_say_so(
    store_url: str, tmp_path: Path
) -> None:
    log = str(tmp_path / "requests.jsonl")
    engine, support = build(store_url, log)
    try:
        session = engine.session("private")
        for prompt in ("hello", "my card is 4111-1111", "thanks"):
            assert (await session.send(prompt, workflow=support)).status == "ok"
        report = await redaction.redact(engine, "private.2", match="4111-1111", why="PII request")
        assert report.entries["private.2"] and report.metas == ["private.2"]
        assert (await session.send("bye", workflow=support)).status == "ok"
        store = await engine.store()
        for run_id in ("private.1", "private.2", "private.3", "private.4"):
            entries = await store.load(run_id)
            meta = await store.get_meta(run_id)
            assert "4111-1111" not in repr([e.value for e in entries]) + repr(meta)
    finally:
        await engine.close()
    if store_url.startswith("sqlite"):
        db = Path(store_url.removeprefix("sqlite:///"))
        with sqlite3.connect(db) as c:
            c.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        assert not [p.name for p in db.parent.iterdir() if p.name.startswith(db.name) and b"4111-1111" in p.read_bytes()]
    sent = requests(log)[-1]["messages"]
    assert sent == [["user", "hello"], ["assistant", "re: hello"],
                    ["user", "[turn 2 was redacted]"], ["assistant", "[turn 2 was redacted]"],
                    ["user", "thanks"], ["assistant", "re: thanks"], ["user", "bye"]]
