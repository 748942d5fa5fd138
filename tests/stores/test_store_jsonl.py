"""JSONL specifics: a torn tail is ignored and trimmed; other damage is a typed error."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from store_multiproc import assert_interleaved, run_writers

from tether.contracts.entries import JournalEntry
from tether.contracts.errors import ConfigError, JournalCorruptError, StoreUnavailableError
from tether.stores.jsonl import JsonlStore
from tether.testing.store_kit import entry


async def _three(store: JsonlStore) -> Path:
    await store.append_many("r", [entry("a"), entry("b"), entry("c")])
    return store.dir / "r.jsonl"


def _assert_well_formed(path: Path) -> None:
    data = path.read_bytes()
    assert data.endswith(b"\n")
    seqs = [json.loads(line)["seq"] for line in data.splitlines()]
    assert seqs == list(range(1, len(seqs) + 1))


async def test_file_is_one_entry_json_per_line(tmp_path: Path) -> None:
    store = JsonlStore(tmp_path)
    path = await _three(store)
    stored = [json.loads(line) for line in path.read_text().splitlines()]
    assert all(len(row.pop("checksum")) == 32 for row in stored)  # the checksum member rides every line
    assert stored == [e.to_json_dict() for e in await store.load("r")]


@pytest.mark.parametrize("tail", [b'{"seq": 4, "kind": "st', b"\x00\x00\x00\n", b'{"seq": 4\n'])
async def test_a_torn_last_line_is_ignored_then_trimmed_by_the_next_append(
    tmp_path: Path, tail: bytes
) -> None:
    path = await _three(JsonlStore(tmp_path))
    with path.open("ab") as f:
        f.write(tail)
    store = JsonlStore(tmp_path)  # a fresh process after the crash: nothing cached
    assert [e.key for e in await store.load("r")] == ["a", "b", "c"]
    assert await store.append("r", entry("d")) == 4
    _assert_well_formed(path)
    assert [e.key for e in await store.load("r")] == ["a", "b", "c", "d"]


async def test_a_complete_last_line_without_newline_is_not_committed(tmp_path: Path) -> None:
    path = await _three(JsonlStore(tmp_path))
    with path.open("ab") as f:
        f.write(JournalEntry(kind="step", seq=4, key="d").model_dump_json().encode())
    store = JsonlStore(tmp_path)
    assert len(await store.load("r")) == 3
    assert await store.append("r", entry("d2")) == 4
    _assert_well_formed(path)


async def test_garbage_in_the_middle_is_a_corrupt_error_naming_file_and_line(
    tmp_path: Path,
) -> None:
    path = await _three(JsonlStore(tmp_path))
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(lines[0] + b"garbage}\n" + b"".join(lines[1:]))
    store = JsonlStore(tmp_path)
    with pytest.raises(JournalCorruptError) as caught:
        await store.load("r")
    message = str(caught.value)
    assert str(path) in message and "line 2" in message and "restore" in message.lower()
    assert caught.value.data == {"path": str(path), "line": 2}
    await store.append("r", entry("d"))  # an append reads only the tail; the damage stays loud
    with pytest.raises(JournalCorruptError, match="line 2"):
        await store.load("r")


async def test_an_edited_seq_is_a_corrupt_error(tmp_path: Path) -> None:
    path = await _three(JsonlStore(tmp_path))
    path.write_text(path.read_text().replace('"seq":2', '"seq":7'))
    with pytest.raises(JournalCorruptError, match="line 2"):
        await JsonlStore(tmp_path).load("r")


async def test_a_line_that_is_json_but_not_an_entry_is_a_corrupt_error(tmp_path: Path) -> None:
    path = await _three(JsonlStore(tmp_path))
    path.write_text('{"seq": 1, "kind": "no-such-kind"}\n' + path.read_text())
    with pytest.raises(JournalCorruptError, match="line 1"):
        await JsonlStore(tmp_path).load("r")


async def test_a_torn_effect_row_is_ignored_and_trimmed(tmp_path: Path) -> None:
    store = JsonlStore(tmp_path)
    await store.append_effect("r", {"n": 1})
    with (tmp_path / "r.effects.jsonl").open("ab") as f:
        f.write(b'{"n": 2, "outc')
    assert await store.load_effects("r") == [{"n": 1}]
    await store.append_effect("r", {"n": 3})
    assert await store.load_effects("r") == [{"n": 1}, {"n": 3}]


async def test_another_writer_on_the_same_directory_is_seen(tmp_path: Path) -> None:
    one, two = JsonlStore(tmp_path), JsonlStore(tmp_path)
    assert await one.append("r", entry("a")) == 1
    assert await two.append("r", entry("b")) == 2
    assert await one.append("r", entry("c")) == 3  # its cached tail is stale and re-read
    assert [e.key for e in await two.load("r")] == ["a", "b", "c"]


async def test_two_processes_appending_get_one_total_order(tmp_path: Path) -> None:
    run_writers(f"jsonl://{tmp_path}", "shared", ["p", "q"], 150)
    await assert_interleaved(JsonlStore(tmp_path), "shared", ["p", "q"], 150)


@pytest.mark.parametrize("run_id", ["", "../escape", "a/b", ".hidden", "x.effects"])
async def test_run_ids_that_cannot_be_file_names_are_a_config_error(
    tmp_path: Path, run_id: str
) -> None:
    with pytest.raises(ConfigError, match="run id"):
        await JsonlStore(tmp_path).append(run_id, entry("a"))


async def test_odd_blob_keys_stay_inside_the_blob_directory(tmp_path: Path) -> None:
    store = JsonlStore(tmp_path / "j")
    for key in ["../../etc/passwd", "..", ".", "a/b/c", "x" * 500]:
        await store.put_blob(key, key.encode())
        assert await store.get_blob(key) == key.encode()
    assert not (tmp_path / "etc").exists()
    assert all(p.parent == store.dir / "blobs" for p in (store.dir / "blobs").iterdir())


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(cut=st.integers(min_value=0, max_value=10_000))
def test_a_crash_at_any_byte_loses_at_most_the_torn_line(tmp_path: Path, cut: int) -> None:
    import asyncio
    import uuid

    async def scenario() -> None:
        store = JsonlStore(tmp_path / uuid.uuid4().hex)
        keys = [f"k{i}" for i in range(8)]
        for k in keys:
            await store.append("r", entry(k, value={"pad": "x" * 50}))
        path = store.dir / "r.jsonl"
        data = path.read_bytes()
        at = cut % (len(data) + 1)
        path.write_bytes(data[:at])
        complete = data[:at].count(b"\n")
        fresh = JsonlStore(store.dir)
        assert [e.key for e in await fresh.load("r")] == keys[:complete]
        assert await fresh.append("r", entry("next")) == complete + 1
        _assert_well_formed(path)

    asyncio.run(scenario())


def test_a_directory_that_cannot_be_created_is_store_unavailable_naming_it(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    with pytest.raises(StoreUnavailableError, match=r"cannot use .*a-file/journals as a JSONL store"):
        JsonlStore(blocker / "journals")
