"""The chain costs no extra hash: one sha256 per appended entry and one per loaded entry, chained or not.

`bench/journal.py:chain_appends` (`bench/run.py --only chain_appends`) measures the time; this proves
the count on the path every writer takes (`encode_linked`) and the path every load takes (`decode_rows`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tether.contracts.entries import JournalEntry
from tether.journal.chain import GENESIS
from tether.stores.codec import decode_rows, encode_linked

N = 50


@pytest.fixture
def hashes(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[], int]]:
    """A counter of sha256 calls (the codec and the chain call it through the `hashlib` module)."""
    calls = [0]
    real = hashlib.sha256

    def counting(*args: Any, **kwargs: Any) -> Any:
        calls[0] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(hashlib, "sha256", counting)

    def taken() -> int:
        n, calls[0] = calls[0], 0
        return n

    yield taken


def _entries() -> list[JournalEntry]:
    return [JournalEntry(kind="step", status="ok", key=f"k{i}", value={"n": i, "text": "x" * 200}, cost_usd=0.001)
            for i in range(N)]


def _encoded(chain: bool) -> list[tuple[int, str]]:
    rows, link = [], GENESIS
    for seq, entry in enumerate(_entries(), start=1):
        if chain:
            entry.prev = link  # as JournalWriter.stage links each entry it stages
        text, link = encode_linked("r", seq, entry)
        rows.append((seq, text))
    return rows


@pytest.mark.parametrize("chain", [True, False], ids=["chained", "unchained"])
def test_an_append_takes_one_hash_chained_or_not(hashes: Callable[[], int], chain: bool) -> None:
    hashes()
    rows = _encoded(chain)
    assert hashes() == N  # the checksum and the next entry's link are cut from the same digest
    assert all(('"prev":"' in text) == chain for _, text in rows)


@pytest.mark.parametrize("chain", [True, False], ids=["chained", "unchained"])
def test_a_load_takes_one_hash_per_entry_chained_or_not(hashes: Callable[[], int], chain: bool) -> None:
    rows = _encoded(chain)
    hashes()
    loaded = decode_rows("r", [(seq, text.encode()) for seq, text in rows], "test")
    assert len(loaded) == N and (loaded[-1].prev is not None) == chain
    assert hashes() == N  # each checksum check yields the link its successor's prev is compared with
