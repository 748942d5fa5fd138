"""The batch decoder reads exactly what the entry-by-entry decoder reads, and defers to it on any doubt."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from tether.contracts.entries import JournalEntry
from tether.contracts.usage import Usage
from tether.stores.codec import EntryDecoder, decode_batch, decode_rows, entry_json

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


def encoded(batch: list[JournalEntry], extras: list[dict[str, Any]]) -> list[bytes]:
    rows = []
    for seq, (entry, extra) in enumerate(zip(batch, extras, strict=True), start=1):
        rows.append(entry_json(entry.model_copy(update=extra), seq).encode())
    return rows


@settings(max_examples=150, deadline=None)
@given(st.lists(entries, min_size=1, max_size=6),
       st.lists(st.dictionaries(st.sampled_from(["costs", "through", "future_field"]), json_leaf, max_size=2),
                min_size=6, max_size=6))
def test_batch_decoding_equals_entry_by_entry_decoding(batch: list[JournalEntry], extras: list[dict[str, Any]]) -> None:
    rows = encoded(batch, extras[: len(batch)])
    fast = decode_batch(rows)
    decoder = EntryDecoder("r")
    slow = [decoder.at(raw, seq, f"seq {seq}") for seq, raw in enumerate(rows, start=1)]
    assert fast is not None
    assert [e.model_dump() for e in fast] == [e.model_dump() for e in slow]
    assert [e.model_extra for e in fast] == [e.model_extra for e in slow]


def test_a_flipped_byte_or_a_stripped_checksum_sends_the_batch_to_the_checked_path() -> None:
    rows = [entry_json(JournalEntry(kind="step", key="k", value=i), i + 1).encode() for i in range(3)]
    assert decode_batch(rows) is not None
    flipped = rows[1].replace(b'"value":1', b'"value":3')
    assert decode_batch([rows[0], flipped, rows[2]]) is None
    stripped = rows[1][: rows[1].rindex(b',"checksum"')] + b"}"
    assert decode_batch([rows[0], stripped, rows[2]]) is None
    assert decode_batch([rows[1], rows[0], rows[2]]) is None  # out of seq order
    assert len(decode_rows("r", list(enumerate(rows, start=1)), "here")) == 3
