"""The conformance kit of the session and memory seam (`SessionStore`): the promises every store keeps.

Mix `SessionConformance` into a test class beside `StoreConformance`, with the same `store` fixture (a fresh,
empty store). Session ids and workspaces are fixed names, so each test needs an empty store.
"""

from __future__ import annotations

import asyncio
import dataclasses

from tether.contracts.sessions import Note, SessionRecord, SessionStore, TurnRecord


def _turn(index: int, parent: str | None) -> TurnRecord:
    return TurnRecord(session_id="s", index=index, run_id=f"s.{index}", parent=parent, grant_usd=0.5,
                      created_at=float(index))


class SessionConformance:
    """Sessions: create once, compare-and-swap the head, turns of every line; notes: scope, replace, evict."""

    async def test_a_session_is_created_once_and_the_first_record_wins(self, store: SessionStore) -> None:
        assert isinstance(store, SessionStore)
        first = await store.session_create(SessionRecord("s", workspace="w", budget_usd=0.1, created_at=1.0))
        again = await store.session_create(SessionRecord("s", workspace="other", created_at=2.0))
        assert first == again == await store.session_get("s")
        assert again.workspace == "w" and again.budget_usd == 0.1 and again.version == 0
        assert await store.session_get("nope") is None
        await store.session_create(SessionRecord("t", created_at=3.0))
        assert [s.session_id for s in await store.session_list()] == ["t", "s"]
        assert [s.session_id for s in await store.session_list(limit=1)] == ["t"]

    async def test_the_head_moves_only_on_the_version_it_read(self, store: SessionStore) -> None:
        s = await store.session_create(SessionRecord("s", created_at=1.0))
        one = _turn(1, None)
        assert await store.session_swap(dataclasses.replace(s, head=one.run_id), 0, one)
        assert not await store.session_swap(dataclasses.replace(s, head="s.x"), 0, _turn(2, one.run_id))
        held = await store.session_get("s")
        assert held is not None and held.head == "s.1" and held.version == 1
        assert await store.session_turns("s") == [one]
        assert not await store.session_swap(SessionRecord("nope"), 0, None)

    async def test_two_swaps_on_one_version_give_exactly_one_winner(self, store: SessionStore) -> None:
        s = await store.session_create(SessionRecord("s", created_at=1.0))
        a, b = _turn(1, None), dataclasses.replace(_turn(1, None), run_id="s.1b")
        won = await asyncio.gather(store.session_swap(dataclasses.replace(s, head=a.run_id), 0, a),
                                   store.session_swap(dataclasses.replace(s, head=b.run_id), 0, b))
        assert sorted(won) == [False, True]
        turns = await store.session_turns("s")
        held = await store.session_get("s")
        assert len(turns) == 1 and held is not None and held.head == turns[0].run_id

    async def test_a_branch_keeps_every_line_readable(self, store: SessionStore) -> None:
        await store.session_create(SessionRecord("s", created_at=1.0))
        for i in (1, 2, 3):
            cur = await store.session_get("s")
            assert cur is not None
            assert await store.session_swap(dataclasses.replace(cur, head=f"s.{i}"), cur.version,
                                            _turn(i, f"s.{i - 1}" if i > 1 else None))
        cur = await store.session_get("s")
        assert cur is not None
        assert await store.session_swap(dataclasses.replace(cur, head="s.1", budget_usd=2.0), cur.version)
        cur = await store.session_get("s")
        assert cur is not None and cur.head == "s.1" and cur.budget_usd == 2.0 and cur.version == 4
        assert await store.session_swap(dataclasses.replace(cur, head="s.4"), cur.version, _turn(4, "s.1"))
        assert [(t.index, t.parent) for t in await store.session_turns("s")] == [
            (1, None), (2, "s.1"), (3, "s.2"), (4, "s.1")]

    async def test_notes_are_scoped_to_a_workspace_and_replaced_by_key(self, store: SessionStore) -> None:
        await store.note_put(Note("w", "plan", "gold", run_id="r1", session="s", turn=1, written_at=1.0))
        await store.note_put(Note("w", "plan", "platinum", run_id="r2", written_at=2.0))
        await store.note_put(Note("other", "plan", "free", written_at=3.0))
        (note,) = await store.note_list("w")
        assert (note.value, note.run_id, note.session, note.turn) == ("platinum", "r2", None, None)
        assert [n.value for n in await store.note_list("other")] == ["free"]
        assert await store.note_delete("w", "plan") and not await store.note_delete("w", "plan")
        assert await store.note_list("w") == []

    async def test_past_the_cap_the_oldest_unpinned_notes_go_and_pinned_never(self, store: SessionStore) -> None:
        await store.note_put(Note("w", "pin", "keep", pinned=True, written_at=0.0), cap=3)
        for i in range(1, 6):
            await store.note_put(Note("w", f"k{i}", str(i), written_at=float(i)), cap=3)
        assert [n.key for n in await store.note_list("w")] == ["pin", "k4", "k5"]
        gone = await store.note_put(Note("w", "k6", "6", written_at=6.0), cap=3)
        assert gone == ["k4"]
