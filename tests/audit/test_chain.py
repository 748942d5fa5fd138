"""The hash chain: an entry edited and re-checksummed, or entries removed, reordered or inserted, fail load and
verify naming the seq, on every store that holds bytes someone could rewrite."""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest
from audit_kit import RUN, Backend, rechecksummed

from tether.audit import AuditError, verify_store
from tether.contracts.entries import JournalEntry
from tether.journal.chain import GENESIS, JournalChainError, body_of, chain_part, digest, link_after, relinked
from tether.stores.codec import EntryDecoder, decode_batch, entry_json


def _terminal_seq(texts: list[str], label: str) -> int:
    return next(json.loads(t)["seq"] for t in texts if '"status":"ok"' in t and f'"label":"{label}"' in t)


async def _refused(backend: Backend, seq: int) -> AuditError:
    store = await backend.engine.store()
    with pytest.raises(JournalChainError) as loaded:
        await store.load(RUN)
    assert loaded.value.data["seq"] == seq
    with pytest.raises(AuditError) as verified:
        await verify_store(store, RUN)
    assert verified.value.seq == seq and verified.value.why == "chain"
    assert f"seq {seq}" in verified.value.message
    return verified.value


async def test_an_untouched_run_verifies_with_every_entry_chained(backend: Backend) -> None:
    verified = await verify_store(await backend.engine.store(), RUN)
    assert verified.agents == 2 and verified.unchained == 0
    assert verified.cost.total_usd == pytest.approx(0.001215)
    texts = backend.read()
    assert json.loads(texts[0])["prev"] == GENESIS
    assert all(json.loads(b)["prev"] == digest(_body(a)) for a, b in itertools.pairwise(texts))


def _body(text: str) -> bytes:
    """What the chain hashes of a stored text: its bytes without the checksum, a sealed entry's without its payload."""
    data = json.loads(text)
    data.pop("checksum")
    return chain_part(json.dumps(data, separators=(",", ":"), ensure_ascii=False).encode())[0]


async def test_editing_cost_usd_and_recomputing_the_checksum_names_that_seq(backend: Backend) -> None:
    texts = backend.read()
    seq = _terminal_seq(texts, "ask")

    def cheaper(d: dict[str, Any]) -> None:
        d["cost_usd"], d["costs"] = 0.0000001, {"fake:m": 0.0000001}

    texts[seq - 1] = rechecksummed(texts[seq - 1], cheaper)
    backend.write(texts)
    await _refused(backend, seq)


async def test_deleting_an_entry_and_renumbering_names_the_seq_before_the_gap(backend: Backend) -> None:
    texts = backend.read()
    del texts[4]  # seq 5 goes; the later ones are renumbered and re-checksummed
    texts[4:] = [rechecksummed(t, lambda d, s=s: d.update(seq=s)) for s, t in enumerate(texts[4:], start=5)]
    texts = [_fix_refs(t) for t in texts]
    backend.write(texts)
    await _refused(backend, 4)


def _fix_refs(text: str) -> str:
    """Refs past the removed seq 5 shifted down by one, so only the chain can tell."""
    data = json.loads(text)
    if isinstance(data.get("ref"), int) and data["ref"] > 5:
        return rechecksummed(text, lambda d: d.update(ref=d["ref"] - 1))
    return text


async def test_swapping_two_entries_names_the_seq_before_them(backend: Backend) -> None:
    texts = backend.read()
    a, b = texts[4], texts[5]  # seqs 5 and 6: draw facts, no ref between them
    texts[4] = rechecksummed(b, lambda d: d.update(seq=5))
    texts[5] = rechecksummed(a, lambda d: d.update(seq=6))
    backend.write(texts)
    await _refused(backend, 4)


async def test_inserting_a_well_linked_entry_names_the_inserted_seq(backend: Backend) -> None:
    texts = backend.read()
    forged = rechecksummed(texts[4], lambda d: d.update(label="forged", prev=digest(_body(texts[3]))))
    texts.insert(4, forged)
    texts[5:] = [rechecksummed(t, lambda d, s=s: d.update(seq=s, ref=_shift(d.get("ref"))))
                 for s, t in enumerate(texts[5:], start=6)]
    texts[:5] = [rechecksummed(t, lambda d: d.update(ref=_shift(d.get("ref")))) if '"ref"' in t else t
                 for t in texts[:5]]
    backend.write(texts)
    await _refused(backend, 5)


def _shift(ref: Any) -> Any:
    return ref + 1 if isinstance(ref, int) and ref >= 5 else ref


async def test_stripping_every_link_leaves_a_run_verify_refuses_as_unchained(backend: Backend) -> None:
    texts = [rechecksummed(t, lambda d: d.pop("prev")) for t in backend.read()]
    backend.write(texts)
    store = await backend.engine.store()
    assert len(await store.load(RUN)) == len(texts)  # an unchained journal (an old one) still loads
    with pytest.raises(AuditError) as err:
        await verify_store(store, RUN)
    assert err.value.why == "unchained" and err.value.seq == 1
    assert (await verify_store(store, RUN, allow_unchained=True)).unchained == len(texts)


async def test_a_raw_unchained_append_after_chained_entries_loads_but_does_not_verify(backend: Backend) -> None:
    store = await backend.engine.store()
    n = len(backend.read())
    await store.append(RUN, JournalEntry(kind="decision", key="raw", value={"decision": "raw"}))
    assert len(await store.load(RUN)) == n + 1
    with pytest.raises(AuditError) as err:
        await verify_store(store, RUN)
    assert err.value.why == "unchained" and err.value.seq == n + 1


async def test_a_recorded_head_pins_the_newest_entry(backend: Backend) -> None:
    store = await backend.engine.store()
    head = (await verify_store(store, RUN)).head
    await verify_store(store, RUN, head=f"{head.seq}:{head.link}")
    texts = backend.read()
    texts[-1] = rechecksummed(texts[-1], lambda d: d.update(label="edited"))  # the newest: no successor vouches
    backend.write(texts)
    with pytest.raises(AuditError) as err:
        await verify_store(store, RUN, head=head.link)
    assert err.value.why == "head"


def test_links_are_the_hash_the_checksum_is_cut_from() -> None:
    entries = relinked([JournalEntry(seq=i, kind="step", key=f"k{i}", value={"n": i}) for i in (1, 2, 3)])
    texts = [entry_json(e, e.seq or 0) for e in entries]
    assert entries[0].prev == GENESIS and entries[1].prev == digest(body_of(entries[0]))
    assert link_after(entries) == digest(_body(texts[-1]))
    assert json.loads(texts[2])["checksum"] == digest(_body(texts[2]))[:32]
    assert decode_batch(texts) == entries
    swapped = [texts[0], entry_json(entries[1].model_copy(update={"prev": GENESIS}), 2), texts[2]]
    assert decode_batch(swapped) is None  # the fast path refuses; the decoder names the seq
    decoder = EntryDecoder("r")
    decoder.at(swapped[0], 1, "seq 1")
    with pytest.raises(JournalChainError, match="broken at seq 1"):
        decoder.at(swapped[1], 2, "seq 2")


def test_an_old_unchained_journal_loads_and_its_next_entry_links_to_it() -> None:
    old = [JournalEntry(seq=i, kind="step", key=f"k{i}") for i in (1, 2)]
    new = JournalEntry(seq=3, kind="step", key="k3", prev=link_after(old))
    texts = [entry_json(e, e.seq or 0) for e in [*old, new]]
    assert decode_batch(texts) == [*old, new]
