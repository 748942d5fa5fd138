"""The batch decoder reads exactly what the entry-by-entry decoder reads, and defers to it on any doubt."""

from __future__ import annotations

import gc
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tether.contracts.entries import FIELDS, JournalEntry
from tether.contracts.errors import JournalCorruptError
from tether.contracts.usage import Usage
from tether.stores.codec import EntryDecoder, checksum, decode_batch, decode_rows, entry_json

json_leaf = st.none() | st.booleans() | st.integers(-(10**9), 10**9) | st.text(max_size=8)
json_value = st.recursive(json_leaf, lambda v: st.lists(v, max_size=3) | st.dictionaries(st.text(max_size=5), v,
                                                                                       max_size=3), max_leaves=8)
entries = st.builds(
    JournalEntry,
    kind=st.sampled_from(["agent", "step", "decision", "tree", "rand"]),
    status=st.none() | st.sampled_from(["running", "ok", "error"]),
    scope=st.text(max_size=6),
    key=st.text(alphabet="0123456789abcdef", max_size=64),
    ordinal=st.integers(0, 5),
    label=st.none() | st.text(max_size=6),
    value=json_value,
    usage=st.none() | st.builds(Usage, input_tokens=st.integers(0, 10**6), output_tokens=st.integers(0, 10**6)),
    cost_usd=st.none() | st.floats(0, 10, allow_nan=False),
    agent_id=st.none() | st.integers(1, 100),
)


# What a terminal or a draw carries for the cost folds, and a member a newer version might write.
members = st.fixed_dictionaries({}, optional={
    "costs": st.dictionaries(st.text(max_size=5), st.floats(0, 10, allow_nan=False), max_size=2),
    "through": st.integers(0, 50),
    "future_field": json_leaf,
})


def encoded(batch: list[JournalEntry], extras: list[dict[str, Any]]) -> list[bytes]:
    rows = []
    for seq, (entry, extra) in enumerate(zip(batch, extras, strict=True), start=1):
        unknown = {k: v for k, v in extra.items() if k == "future_field"}
        known = {k: v for k, v in extra.items() if k != "future_field"}
        rows.append(entry_json(entry.model_copy(update={**known, "unknown": unknown or None}), seq).encode())
    return rows


@settings(max_examples=150, deadline=None)
@given(st.lists(entries, min_size=1, max_size=6), st.lists(members, min_size=6, max_size=6))
def test_batch_decoding_equals_entry_by_entry_decoding(batch: list[JournalEntry], extras: list[dict[str, Any]]) -> None:
    rows = encoded(batch, extras[: len(batch)])
    fast = decode_rows("r", list(enumerate(rows, start=1)), "here")
    decoder = EntryDecoder("r")
    slow = [decoder.at(raw, seq, f"seq {seq}") for seq, raw in enumerate(rows, start=1)]
    assert [e.model_dump() for e in fast] == [e.model_dump() for e in slow]
    assert [e.unknown for e in fast] == [e.unknown for e in slow]
    if not any("future_field" in x for x in extras[: len(batch)]):
        assert decode_batch(rows) == slow  # nothing unknown: the whole journal in one validation


def test_a_flipped_byte_or_a_stripped_checksum_sends_the_batch_to_the_checked_path() -> None:
    rows = [entry_json(JournalEntry(kind="step", key="k", value=i), i + 1).encode() for i in range(3)]
    assert decode_batch(rows) is not None
    flipped = rows[1].replace(b'"value":1', b'"value":3')
    assert decode_batch([rows[0], flipped, rows[2]]) is None
    stripped = rows[1][: rows[1].rindex(b',"checksum"')] + b"}"
    assert decode_batch([rows[0], stripped, rows[2]]) is None
    assert decode_batch([rows[1], rows[0], rows[2]]) is None  # out of seq order
    assert len(decode_rows("r", list(enumerate(rows, start=1)), "here")) == 3


def _entry_by_entry(rows: list[bytes]) -> list[JournalEntry]:
    decoder = EntryDecoder("r")
    return [decoder.at(raw, seq, f"seq {seq}") for seq, raw in enumerate(rows, start=1)]


def _same_models(fast: list[JournalEntry], slow: list[JournalEntry]) -> None:
    for a, b in zip(fast, slow, strict=True):
        assert a == b and a.unknown == b.unknown
        assert {n: type(getattr(a, n)) for n in FIELDS} == {n: type(getattr(b, n)) for n in FIELDS}


@settings(max_examples=150, deadline=None)
@given(st.lists(entries, min_size=1, max_size=6), st.lists(members, min_size=6, max_size=6))
def test_an_entry_serializes_to_the_bytes_it_was_read_from(
    batch: list[JournalEntry], extras: list[dict[str, Any]]
) -> None:
    rows = encoded(batch, extras[: len(batch)])
    loaded = decode_rows("r", list(enumerate(rows, start=1)), "here")
    _same_models(loaded, _entry_by_entry(rows))
    assert [entry_json(e, e.seq or 0).encode() for e in loaded] == rows  # unknown members written back as read


def test_members_the_adapter_coerces_or_refuses_are_decoded_as_the_checked_path_does() -> None:
    def row(seq: int, body: str) -> bytes:
        return entry_json(JournalEntry.model_validate_json(body), seq).encode()

    plain = row(1, '{"kind":"step","key":"k","status":"running","started_at":1.5}')
    # an int where a float belongs (read as 7.0), a nested Usage (its own model validates it)
    coerced = entry_json(JournalEntry(kind="step", ref=1, status="ok", value=2), 2).replace(
        '"value":2', '"value":2,"started_at":7').encode()
    coerced = coerced[: coerced.rindex(b',"checksum"')] + b"}"
    coerced = coerced[:-1] + f',"checksum":"{checksum(coerced)}"}}'.encode()
    nested = row(3, '{"kind":"agent","status":"ok","ref":1,"usage":{"input_tokens":3},"costs":{"m":0.5}}')
    rows = [plain, coerced, nested]
    fast = decode_batch(rows)
    assert fast is not None
    _same_models(fast, _entry_by_entry(rows))
    assert fast[1].started_at == 7.0 and type(fast[1].started_at) is float
    assert fast[2].usage == Usage(input_tokens=3)
    # a literal outside the contract, with a valid checksum: refused, so the checked path names it
    bad = b'{"seq":1,"kind":"bogus"}'
    bad = bad[:-1] + f',"checksum":"{checksum(bad)}"}}'.encode()
    assert decode_batch([bad]) is None


def _checksummed(body: bytes) -> bytes:
    return body[:-1] + f',"checksum":"{checksum(body)}"}}'.encode()


def test_members_named_like_the_unknown_slot_stay_unknown_members_and_are_written_back() -> None:
    rows = [_checksummed(b'{"seq":1,"kind":"step","unknown":{"a":1}}'),
            _checksummed(b'{"seq":2,"kind":"step","~unknown members~":{"b":2}}')]
    loaded = decode_rows("r", list(enumerate(rows, start=1)), "here")
    assert [e.unknown for e in loaded] == [{"unknown": {"a": 1}}, {"~unknown members~": {"b": 2}}]
    assert decode_batch(rows) is None  # the one-call decode defers both to the per-entry path
    assert [entry_json(e, e.seq or 0).encode() for e in loaded] == [
        _checksummed(b'{"seq":1,"scope":"","key":"","ordinal":0,"kind":"step","hash_version":1,"unknown":{"a":1}}'),
        _checksummed(b'{"seq":2,"scope":"","key":"","ordinal":0,"kind":"step","hash_version":1,'
                     b'"~unknown members~":{"b":2}}'),
    ]


def test_a_loaded_journal_leaves_nothing_for_the_cycle_collector_to_track() -> None:
    rows = [entry_json(JournalEntry(kind="step", key="k", value={"i": i}), i + 1).encode() for i in range(3)]
    loaded = decode_batch(rows)
    assert loaded is not None and [e.value for e in loaded] == [{"i": 0}, {"i": 1}, {"i": 2}]
    assert not any(gc.is_tracked(e) for e in loaded)  # entries hold no cycle: the collector never walks them


def test_values_the_one_call_decoder_refuses_load_as_the_checked_path_reads_them() -> None:
    # A number past a float's range: msgspec's parser refuses it, the stdlib's reads it (inf); a load gives
    # what the entry-by-entry decoder gives. A lone surrogate both refuse: a typed corruption error naming the entry.
    bodies = [b'{"seq":1,"kind":"step","value":1e400}',
              b'{"seq":2,"kind":"step","value":123456789012345678901234567890}']
    rows = [_checksummed(body) for body in bodies]
    assert decode_batch(rows) is None
    loaded = decode_rows("r", list(enumerate(rows, start=1)), "here")
    _same_models(loaded, _entry_by_entry(rows))
    assert loaded[0].value == float("inf") and loaded[1].value == 123456789012345678901234567890
    torn = [*rows, _checksummed(b'{"seq":3,"kind":"step","value":"\\ud800"}')]
    with pytest.raises(JournalCorruptError, match="seq 3 of run 'r'"):
        decode_rows("r", list(enumerate(torn, start=1)), "here")


def test_encoding_an_entry_never_changes_it() -> None:
    # An int where a float belongs, no seq yet: the bytes carry the seq and the float, the entry keeps neither.
    built = JournalEntry(kind="step", key="k", status="ok", cost_usd=2, started_at=5, ended_at=6, value={"a": [1]})
    before = (built.seq, type(built.cost_usd), type(built.started_at), type(built.ended_at))
    text = entry_json(built, 7)
    assert (built.seq, type(built.cost_usd), type(built.started_at), type(built.ended_at)) == (None, int, int, int)
    assert before == (None, int, int, int)
    floats = JournalEntry(kind="step", key="k", status="ok", cost_usd=2.0, started_at=5.0, ended_at=6.0,
                          value={"a": [1]})
    assert text == entry_json(floats, 7)  # the same entry dumps to the same bytes however it was built
    assert '"seq":7' in text and '"cost_usd":2.0' in text
    loaded = EntryDecoder("r").at(text, 7, "seq 7")
    assert loaded.seq == 7 and type(loaded.cost_usd) is float
