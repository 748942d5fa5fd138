"""`tether verify` names what failed from the codec's typed reason, never from the words of a message: a run whose id
(or an entry's text) says "checksum" still fails as `entry` when the entry itself is what is wrong."""

from __future__ import annotations

import pytest

from tether.audit.verify import AuditError, verify_texts
from tether.contracts.entries import JournalEntry
from tether.stores.codec import checksum, entry_json


def _checksummed(body: bytes) -> bytes:
    return body[:-1] + f',"checksum":"{checksum(body)}"}}'.encode()


def test_an_invalid_entry_is_an_entry_failure_whatever_the_words_around_it() -> None:
    run_id = "checksum-mismatch-42"
    good = entry_json(JournalEntry(kind="step", key="k", value="checksum"), 1).encode()
    bad = _checksummed(b'{"seq":2,"kind":"bogus","label":"checksum"}')  # a kind outside the contract
    with pytest.raises(AuditError) as err:
        verify_texts(run_id, [good, bad], "here")
    assert err.value.why == "entry" and err.value.seq == 2


def test_a_changed_byte_is_a_checksum_failure() -> None:
    rows = [entry_json(JournalEntry(kind="step", key="k", value=i), i + 1).encode() for i in range(2)]
    flipped = rows[1].replace(b'"value":1', b'"value":7')
    with pytest.raises(AuditError) as err:
        verify_texts("r", [rows[0], flipped], "here")
    assert err.value.why == "checksum" and err.value.seq == 2
