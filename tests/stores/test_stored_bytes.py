"""Entries written before journal entries were records (d6fca83, pydantic models) load, and write back to
the very bytes they were read from: the on-disk format and the checksums did not change."""

from __future__ import annotations

from pathlib import Path

from tether.contracts.usage import Usage
from tether.stores.codec import EntryDecoder, decode_batch, decode_rows, entry_json

WRITTEN = Path(__file__).parent.parent / "fixtures" / "journal" / "written_by_d6fca83.jsonl"
"""Five entries `codec.entry_json` wrote at d6fca83: unicode and escapes, nested floats, usage per model,
an error, every kind of member the envelope held then."""


def test_entries_an_older_version_wrote_load_and_write_back_to_the_same_bytes() -> None:
    rows = WRITTEN.read_bytes().splitlines()
    loaded = decode_batch(rows)
    assert loaded is not None  # the one-call decode takes them
    decoder = EntryDecoder("r")
    assert loaded == [decoder.at(raw, seq, f"seq {seq}") for seq, raw in enumerate(rows, start=1)]
    assert [entry_json(e, e.seq or 0).encode() for e in loaded] == rows
    assert decode_rows("r", list(enumerate(rows, start=1)), "here") == loaded
    agent = loaded[3]
    assert agent.usage == Usage(input_tokens=1200, output_tokens=340, cache_read_tokens=5)
    assert agent.usage_by_model == {"fake:m": agent.usage} and agent.cost_usd == 0.0042
    assert loaded[1].label == "s0 \u00e9\u4e2d\U0001f600"
    assert loaded[4].error == {"type": "ValueError", "message": "bad", "data": {"x": [1e-7, 1e16, 123456789.123]}}
