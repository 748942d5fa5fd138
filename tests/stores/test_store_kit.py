"""The conformance kit proves something: stores that break a promise fail it."""

from __future__ import annotations

import warnings

import pytest

from tether.contracts.entries import JournalEntry, Lease
from tether.stores.memory import MemoryStore
from tether.testing.store_kit import StoreConformance


class _IgnoresLeases(MemoryStore):
    async def append_many(
        self, run_id: str, entries: list[JournalEntry], lease: Lease | None = None
    ) -> list[int]:
        return await super().append_many(run_id, entries, None)


class _OverwritesSeq(MemoryStore):
    async def append_many(
        self, run_id: str, entries: list[JournalEntry], lease: Lease | None = None
    ) -> list[int]:
        return await super().append_many(
            run_id, [e.model_copy(update={"seq": None}) for e in entries], lease
        )


class _NotAtomic(MemoryStore):
    async def append_many(
        self, run_id: str, entries: list[JournalEntry], lease: Lease | None = None
    ) -> list[int]:
        seqs = []
        for e in entries:  # one at a time: a bad entry leaves the earlier ones written
            seqs += await super().append_many(run_id, [e], lease)
        return seqs


class _DropsUnknownFields(MemoryStore):
    async def load(self, run_id: str) -> list[JournalEntry]:
        return [e.model_copy(update={"unknown": None}) for e in await super().load(run_id)]


def _quiet(cls: type[MemoryStore]) -> MemoryStore:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return cls()


@pytest.mark.parametrize(
    ("broken", "test"),
    [
        (_IgnoresLeases, "test_a_stale_writer_is_rejected_and_its_entry_never_visible"),
        (_IgnoresLeases, "test_an_expired_lease_is_rejected"),
        (_OverwritesSeq, "test_explicit_wrong_seq_is_an_order_violation_and_writes_nothing"),
        (_NotAtomic, "test_append_many_is_all_or_nothing"),
        (_DropsUnknownFields, "test_unknown_fields_round_trip_untouched"),
    ],
)
async def test_a_store_breaking_a_promise_fails_the_kit(
    broken: type[MemoryStore], test: str
) -> None:
    kit = StoreConformance()
    await getattr(kit, test)(_quiet(MemoryStore))  # the honest store passes
    with pytest.raises((AssertionError, pytest.fail.Exception)):
        await getattr(kit, test)(_quiet(broken))
