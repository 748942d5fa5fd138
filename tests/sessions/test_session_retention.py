"""Retention inside a session: an archived turn keeps its place in the line, and what archive removed reads as such
in the history later turns send (never a silent gap that changes what the model is told happened)."""

from __future__ import annotations

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
