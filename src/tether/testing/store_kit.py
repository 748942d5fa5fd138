"""The store conformance kit: the promises every `JournalStore` keeps, as one suite to run.

Subclass `StoreConformance` in a test module and give it a `store` fixture that yields a fresh,
empty store (and closes it afterwards)::

    class TestMyStore(StoreConformance):
        @pytest.fixture
        async def store(self, tmp_path):
            s = MyStore(tmp_path)
            yield s
            await s.close()

The fixture above relies on pytest-asyncio's auto mode; in strict mode decorate it with
`@pytest_asyncio.fixture`. Lease tests skip for stores that are not a `LeasableStore`. Run ids are
fixed names ("r", "a", ...), so each test needs an empty store (a fresh file, schema or directory).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable

import pytest

from tether.contracts.entries import JournalEntry, Lease, LeaseOwner, RunMeta
from tether.contracts.errors import ConfigError, JournalOrderViolation, LeaseHeldError, NonSerializableValueError
from tether.contracts.protocols import JournalStore, LeasableStore
from tether.contracts.usage import Usage
from tether.stores.leases import current_owner, local_host, process_start_time
from tether.stores.run_ids import MAX_RUN_ID_BYTES

NO_SUCH_PID = 2**22 + 1
"""Above Linux's PID_MAX_LIMIT, so no process can have it."""


def entry(key: str = "k", **fields: object) -> JournalEntry:
    """A small valid entry (a finished step) for tests; `fields` override or extend it."""
    return JournalEntry.from_json_dict({"kind": "step", "status": "ok", "key": key, **fields})


def nested(depth: int, leaf: object = "leaf") -> object:
    """`leaf` inside `depth` levels of lists and objects, alternating (`nested(2)` is `[{"k": "leaf"}]`)."""
    value = leaf
    for level in range(depth):
        value = {"k": value} if level % 2 else [value]
    return value


BAD_RUN_IDS = (
    "x" * (MAX_RUN_ID_BYTES + 1), "é" * (MAX_RUN_ID_BYTES // 2 + 1), "", "a/b", "a\\b", "nul\x00", "tab\there",
    ".hidden", "run.effects", "lone\ud800",
)
"""Run ids every store refuses: too long (in characters, or in UTF-8 bytes), empty, path separators,
control characters, a leading dot, the JSONL effect-ledger suffix, invalid Unicode."""
GOOD_RUN_IDS = ("x" * MAX_RUN_ID_BYTES, "é" * (MAX_RUN_ID_BYTES // 2), "01J9ZQ4W6E8Y2V0K3M5N7P9R1T",
                "job:42@team+x=y.z-1_2", "研究 run (2)")
"""Run ids every store accepts: at the limit, in bytes, a ULID, punctuation, non-ASCII and spaces."""


def _writes(store: JournalStore, run_id: str) -> list[Callable[[], Awaitable[object]]]:
    """Every call that writes something for `run_id` (the optional ones when `store` has them)."""
    meta = RunMeta(run_id=run_id, workflow="wf", created_at=1.0, updated_at=1.0)
    writes: list[Callable[[], Awaitable[object]]] = [
        lambda: store.append(run_id, entry("a")),
        lambda: store.append_many(run_id, [entry("a")]),
        lambda: store.put_meta(meta),
        lambda: store.append_effect(run_id, {"a": 1}),
    ]
    if isinstance(store, LeasableStore):
        writes.append(lambda: store.acquire(run_id, owner("w"), 30.0))
    append_rows = getattr(store, "append_rows", None)
    if append_rows is not None:
        from tether.stores.codec import number_entries

        writes.append(lambda: append_rows(run_id, number_entries("ok", 0, [entry("a")])))
    return writes


def leasable(store: JournalStore) -> LeasableStore:
    """`store` as a `LeasableStore`, or skip the test."""
    if not isinstance(store, LeasableStore):
        pytest.skip(f"{type(store).__name__} does not support leases")
    return store


def owner(owner_id: str, *, host: str | None = None, pid: int | None = None) -> LeaseOwner:
    """A lease owner: this process under another id, or a fake on `host` / with `pid`."""
    me = current_owner(owner_id)
    return me.model_copy(update={"host": host or me.host, "pid": me.pid if pid is None else pid})


class StoreConformance:
    """Atomic append, total order, read-your-writes, untouched payloads, monotonic seq, fencing."""

    pytestmark = pytest.mark.asyncio

    # -- seq and order --------------------------------------------------------------------------

    async def test_store_assigns_seq_one_then_last_plus_one(self, store: JournalStore) -> None:
        assert await store.append("r", entry("a")) == 1
        assert await store.append("r", entry("b")) == 2
        assert await store.append_many("r", [entry("c"), entry("d")]) == [3, 4]
        assert [e.seq for e in await store.load("r")] == [1, 2, 3, 4]

    async def test_explicit_next_seq_is_accepted(self, store: JournalStore) -> None:
        assert await store.append("r", entry("a", seq=1)) == 1
        assert await store.append_many("r", [entry("b", seq=2), entry("c", seq=3)]) == [2, 3]

    async def test_explicit_wrong_seq_is_an_order_violation_and_writes_nothing(
        self, store: JournalStore
    ) -> None:
        await store.append("r", entry("a"))
        for wrong in (1, 3, 0):
            with pytest.raises(JournalOrderViolation):
                await store.append("r", entry("x", seq=wrong))
        assert [e.key for e in await store.load("r")] == ["a"]
        assert await store.append("r", entry("b")) == 2

    async def test_append_many_is_all_or_nothing(self, store: JournalStore) -> None:
        await store.append("r", entry("a"))
        batch = [entry("b"), entry("c", seq=3), entry("bad", seq=9), entry("d")]
        with pytest.raises(JournalOrderViolation):
            await store.append_many("r", batch)
        assert [e.key for e in await store.load("r")] == ["a"]
        assert await store.append_many("r", []) == []
        assert await store.append_many("r", [entry("b"), entry("c")]) == [2, 3]

    async def test_pre_encoded_rows_land_whole_and_in_order_or_not_at_all(self, store: JournalStore) -> None:
        """`append_rows` (the group commit's call, optional for a store): rows continue the journal
        exactly, several in one call, a gap or a stale head refused with nothing written."""
        append_rows = getattr(store, "append_rows", None)
        if append_rows is None:
            pytest.skip(f"{type(store).__name__} has no append_rows (the engine then uses append/append_many)")
        from tether.stores.codec import number_entries

        assert await append_rows("r", number_entries("r", 0, [entry("a")])) == [1]
        assert await append_rows("r", number_entries("r", 1, [entry("b"), entry("c"), entry("d")])) == [2, 3, 4]
        gap = number_entries("r", 4, [entry("e"), entry("f")])
        gap[1] = (7, number_entries("r", 6, [entry("f")])[0][1])
        for bad in (gap, number_entries("r", 3, [entry("x"), entry("y")])):  # a gap; a stale head
            with pytest.raises(JournalOrderViolation):
                await append_rows("r", bad)
        assert [e.key for e in await store.load("r")] == ["a", "b", "c", "d"]
        assert await append_rows("r", number_entries("r", 4, [entry("e"), entry("f")])) == [5, 6]
        assert [e.seq for e in await store.load("r")] == [1, 2, 3, 4, 5, 6]
        # `append_rows_now` (optional too: a store whose write never waits, which the engine then calls
        # from the appending task): the same promises, and the head it leaves is the one appends see.
        append_rows_now = getattr(store, "append_rows_now", None)
        if append_rows_now is not None:
            assert append_rows_now("r", number_entries("r", 6, [entry("g"), entry("h")])) == [7, 8]
            with pytest.raises(JournalOrderViolation):
                append_rows_now("r", number_entries("r", 7, [entry("x")]))  # a stale head
            assert await store.append("r", entry("i")) == 9
            assert append_rows_now("r", number_entries("r", 9, [entry("j")])) == [10]
            assert [e.key for e in await store.load("r")][5:] == ["f", "g", "h", "i", "j"]

    async def test_a_ref_to_the_future_is_an_order_violation(self, store: JournalStore) -> None:
        await store.append("r", entry("a", status="running", kind="agent"))
        with pytest.raises(JournalOrderViolation):
            await store.append("r", entry("t", kind="agent", ref=2))
        assert await store.append("r", entry("t", kind="agent", ref=1)) == 2

    async def test_read_your_writes(self, store: JournalStore) -> None:
        for i in range(1, 6):
            await store.append("r", entry(f"k{i}"))
            assert [e.key for e in await store.load("r")] == [f"k{j}" for j in range(1, i + 1)]

    async def test_concurrent_appends_get_one_total_order_per_run(
        self, store: JournalStore
    ) -> None:
        async def put(run: str, i: int) -> tuple[str, int, str]:
            return run, await store.append(run, entry(f"{run}-{i}")), f"{run}-{i}"

        results = await asyncio.gather(*(put(run, i) for i in range(20) for run in ("x", "y")))
        for run in ("x", "y"):
            mine = sorted((seq, key) for r, seq, key in results if r == run)
            assert [seq for seq, _ in mine] == list(range(1, 21))
            assert [(e.seq, e.key) for e in await store.load(run)] == mine

    async def test_runs_have_independent_seqs(self, store: JournalStore) -> None:
        await store.append_many("a", [entry("1"), entry("2")])
        assert await store.append("b", entry("1")) == 1
        assert await store.load("missing") == []

    async def test_a_resolution_after_an_abandon_is_preserved_in_order(
        self, store: JournalStore
    ) -> None:
        await store.append("r", entry("ext", kind="external", status="suspended"))
        await store.append("r", entry("ext", kind="abandon", ref=1))
        await store.append("r", entry("ext", kind="resolution", ref=1, value={"ok": True}))
        loaded = await store.load("r")
        assert [(e.seq, e.kind, e.ref) for e in loaded] == [
            (1, "external", None),
            (2, "abandon", 1),
            (3, "resolution", 1),
        ]
        assert loaded[2].value == {"ok": True}

    # -- payloads ---------------------------------------------------------------------------------

    async def test_unknown_fields_round_trip_untouched(self, store: JournalStore) -> None:
        future = {"nested": [1, {"deep": "ü"}], "flag": False}
        sent = entry("a", future_field=future, another_one=7)
        await store.append("r", sent)
        (got,) = await store.load("r")
        expected = sent.model_copy(update={"seq": 1})
        assert got.to_json_dict() == expected.to_json_dict()
        assert got.model_dump_json() == expected.model_dump_json()
        assert got.unknown == {"future_field": future, "another_one": 7}

    async def test_payloads_round_trip_untouched(self, store: JournalStore) -> None:
        value = {
            "text": 'quotes " and \\ backslashes, tabs\t, newlines\n, NUL-free unicode ✓ 🧪 中文',
            "numbers": [0, -1, 2**62, 0.1, 1e-7, 1.5e300, -2.5],
            "empty": {"list": [], "dict": {}, "str": ""},
            "none_inside": {"a": None, "b": [None]},
            "bools": [True, False],
        }
        sent = entry(
            "agent-key",
            kind="agent",
            status="error",
            scope="par:1:0/wf:child:2",
            ordinal=3,
            label="résumé",
            value=value,
            error={"kind": "rate-limit", "retry_after_ms": 1200},
            usage=Usage(input_tokens=10, output_tokens=3, cache_read_tokens=2, approximate=True),
            usage_by_model={"fake:m": Usage(input_tokens=10, output_tokens=3)},
            served_by="fake:m",
            provider_calls=2,
            checkpoint_ref="ckpt/1",
            tool_budget={"used": 1, "cap": 4},
            memoized=False,
            cost_usd=0.000123,
            span_id="s1",
            started_at=1_700_000_000.25,
            ended_at=1_700_000_001.5,
        )
        await store.append("r", sent)
        (got,) = await store.load("r")
        assert got.to_json_dict() == sent.model_copy(update={"seq": 1}).to_json_dict()
        assert got.value == value

    async def test_loaded_entries_are_copies(self, store: JournalStore) -> None:
        sent = entry("a", value={"list": [1]})
        await store.append("r", sent)
        sent.value["list"].append(2)
        (got,) = await store.load("r")
        got.value["list"].append(3)
        assert (await store.load("r"))[0].value == {"list": [1]}

    # -- meta, blobs, effects, delete ------------------------------------------------------------

    async def test_meta_put_get_and_list_newest_first(self, store: JournalStore) -> None:
        assert await store.get_meta("nope") is None
        for i, run in enumerate(["old", "mid", "new"]):
            meta = RunMeta(run_id=run, workflow="wf", created_at=100.0 + i, updated_at=100.0 + i)
            await store.put_meta(meta)
        updated = RunMeta.model_validate(
            {
                "run_id": "mid",
                "workflow": "wf",
                "status": "ok",
                "created_at": 101.0,
                "updated_at": 200.0,
                "future_field": [1],
            }
        )
        await store.put_meta(updated)
        assert await store.get_meta("mid") == updated
        assert [m.run_id for m in await store.list_runs()] == ["new", "mid", "old"]
        assert [m.run_id for m in await store.list_runs(limit=2)] == ["new", "mid"]

    async def test_blobs_round_trip(self, store: JournalStore) -> None:
        assert await store.get_blob("missing") is None
        data = bytes(range(256)) * 4
        await store.put_blob("ckpt/run-1/agent:3", data)
        await store.put_blob("other", b"")
        assert await store.get_blob("ckpt/run-1/agent:3") == data
        assert await store.get_blob("other") == b""
        await store.put_blob("other", b"v2")
        assert await store.get_blob("other") == b"v2"

    async def test_effects_load_in_append_order_per_run(self, store: JournalStore) -> None:
        assert await store.load_effects("r") == []
        rows = [{"attempt_id": f"a{i}", "outcome": None, "n": {"x": [i]}} for i in range(5)]
        for i, row in enumerate(rows):
            await store.append_effect("r", row)
            await store.append_effect("other", {"i": i})
        assert await store.load_effects("r") == rows
        assert [r["i"] for r in await store.load_effects("other")] == list(range(5))

    async def test_delete_removes_the_run_and_seq_starts_again(self, store: JournalStore) -> None:
        await store.append_many("r", [entry("a"), entry("b")])
        await store.append("keep", entry("a"))
        await store.append_effect("r", {"a": 1})
        await store.put_meta(RunMeta(run_id="r", workflow="wf", created_at=1.0, updated_at=1.0))
        await store.delete("r")
        await store.delete("never-existed")
        assert await store.load("r") == []
        assert await store.get_meta("r") is None
        assert await store.load_effects("r") == []
        assert [m.run_id for m in await store.list_runs()] == []
        assert len(await store.load("keep")) == 1
        assert await store.append("r", entry("again")) == 1

    # -- run ids and depth -----------------------------------------------------------------------

    async def test_a_run_id_outside_the_one_rule_is_a_config_error_and_nothing_is_written(
        self, store: JournalStore
    ) -> None:
        """Every store refuses the same run ids (`stores.run_ids`), before it writes anything for them."""
        for bad in BAD_RUN_IDS:
            for write in _writes(store, bad):
                with pytest.raises(ConfigError, match="run id") as caught:
                    await write()
                assert caught.value.data["limit"] == MAX_RUN_ID_BYTES
        assert await store.list_runs() == []
        assert await store.load("ok") == []

    async def test_run_ids_up_to_the_limit_work_on_every_store(self, store: JournalStore) -> None:
        for good in GOOD_RUN_IDS:
            assert await store.append(good, entry("a")) == 1
            await store.put_meta(RunMeta(run_id=good, workflow="wf", created_at=1.0, updated_at=1.0))
            await store.append_effect(good, {"a": 1})
            assert [e.key for e in await store.load(good)] == ["a"]
            got = await store.get_meta(good)
            assert got is not None and got.run_id == good
            assert await store.load_effects(good) == [{"a": 1}]
            if isinstance(store, LeasableStore):
                await store.release(await store.acquire(good, owner("w"), 30.0))
        assert sorted(m.run_id for m in await store.list_runs()) == sorted(GOOD_RUN_IDS)

    async def test_an_entry_is_either_refused_on_write_or_loads_back_at_any_depth(self, store: JournalStore) -> None:
        """Whatever a store accepts, it reads back: entries nested around and past every parser's limit
        (pydantic's JSON parser stops at 200 levels, its serializer at about 255) either load back
        equal or were refused with `NonSerializableValueError` and nothing appended."""
        for depth in (*range(195, 203), 254, 255, 256, 400):
            run = f"deep-{depth}"
            sent = entry("a", value=nested(depth), error={"data": nested(depth - 2)})
            try:
                await store.append(run, sent)
            except NonSerializableValueError:
                assert await store.load(run) == [], depth
                continue
            (got,) = await store.load(run)
            assert got.value == sent.value and got.error == sent.error, depth
            await store.put_meta(RunMeta(run_id=run, workflow="wf", args=nested(depth - 2), created_at=1.0,
                                         updated_at=1.0))
            meta = await store.get_meta(run)
            assert meta is not None and meta.args == nested(depth - 2)

    # -- leases ---------------------------------------------------------------------------------

    async def test_epoch_grows_on_every_acquire_and_survives_delete(
        self, store: JournalStore
    ) -> None:
        s = leasable(store)
        me = owner("me")
        first = await s.acquire("r", me, 30)
        again = await s.acquire("r", me, 30)  # the same owner re-acquiring also bumps the epoch
        assert (first.epoch, again.epoch) == (1, 2)
        await s.release(again)
        third = await s.acquire("r", owner("someone-else"), 30)
        assert third.epoch == 3
        await s.delete("r")
        assert (await s.acquire("r", me, 30)).epoch == 4
        assert (await s.acquire("other-run", me, 30)).epoch == 1

    async def test_append_with_the_current_lease_is_accepted(self, store: JournalStore) -> None:
        s = leasable(store)
        lease = await s.acquire("r", owner("me"), 30)
        assert await s.append("r", entry("a"), lease) == 1
        assert await s.append_many("r", [entry("b")], lease) == [2]

    async def test_a_stale_writer_is_rejected_and_its_entry_never_visible(
        self, store: JournalStore
    ) -> None:
        s = leasable(store)
        old = await s.acquire("r", owner("old"), 30)
        await s.append("r", entry("by-old"), old)
        # The old holder lost its lease (here: released and taken over; in life, expiry or death).
        await s.release(old)
        new = await s.acquire("r", owner("new"), 30)
        with pytest.raises(LeaseHeldError):
            await s.append("r", entry("stale"), old)
        with pytest.raises(LeaseHeldError):
            await s.append_many("r", [entry("stale-1"), entry("stale-2")], old)
        assert await s.append("r", entry("by-new"), new) == 2
        assert [e.key for e in await s.load("r")] == ["by-old", "by-new"]

    async def test_a_lease_fences_only_its_own_run(self, store: JournalStore) -> None:
        s = leasable(store)
        lease = await s.acquire("a", owner("me"), 30)
        with pytest.raises(LeaseHeldError):
            await s.append("b", entry("x"), lease)
        assert await s.load("b") == []

    async def test_an_expired_lease_is_rejected(self, store: JournalStore) -> None:
        s = leasable(store)
        lease = await s.acquire("r", owner("me"), 0.05)
        await asyncio.sleep(0.12)
        with pytest.raises(LeaseHeldError, match="expired"):
            await s.append("r", entry("late"), lease)
        assert await s.load("r") == []
        renewed = await s.renew(lease)  # nobody took over, so the holder may renew
        assert renewed.epoch == lease.epoch
        assert renewed.expires_at > lease.expires_at
        assert await s.append("r", entry("on-time"), renewed) == 1

    async def test_a_second_acquirer_while_held_gets_lease_held(self, store: JournalStore) -> None:
        s = leasable(store)
        holder = await s.acquire("r", owner("first"), 30)
        with pytest.raises(LeaseHeldError) as caught:
            await s.acquire("r", owner("second"), 30)
        assert str(holder.owner.pid) in str(caught.value)
        assert holder.owner.host in str(caught.value)
        assert await s.append("r", entry("a"), holder) == 1

    async def test_a_holder_on_another_host_is_honoured_until_expiry(
        self, store: JournalStore
    ) -> None:
        s = leasable(store)
        remote = owner("remote", host="another-host.invalid", pid=NO_SUCH_PID)
        held = await s.acquire("r", remote, 0.2)
        with pytest.raises(LeaseHeldError):
            await s.acquire("r", owner("me"), 30)
        await asyncio.sleep(0.3)
        taken = await s.acquire("r", owner("me"), 30)
        assert taken.epoch == held.epoch + 1
        with pytest.raises(LeaseHeldError):
            await s.append("r", entry("zombie"), held)

    async def test_a_dead_owner_on_this_host_is_taken_over_at_once(
        self, store: JournalStore
    ) -> None:
        s = leasable(store)
        ghost = owner("ghost", host=local_host(), pid=NO_SUCH_PID)
        held = await s.acquire("r", ghost, 3600)
        taken = await s.acquire("r", owner("me"), 30)
        assert taken.epoch == held.epoch + 1
        with pytest.raises(LeaseHeldError):
            await s.append("r", entry("from-the-grave"), held)

    async def test_a_reused_pid_does_not_keep_a_dead_owners_lease(
        self, store: JournalStore
    ) -> None:
        s = leasable(store)
        started = process_start_time(os.getpid())
        if started is None:
            pytest.skip("process start times need /proc")
        # Our own pid, but a different start time: the pid was recycled, the owner is gone.
        recycled = owner("recycled").model_copy(update={"started_at": started + 1000})
        held = await s.acquire("r", recycled, 3600)
        assert (await s.acquire("r", owner("me"), 30)).epoch == held.epoch + 1

    async def test_renew_extends_only_the_current_lease(self, store: JournalStore) -> None:
        s = leasable(store)
        first = await s.acquire("r", owner("me"), 30)
        renewed = await s.renew(first)
        assert renewed.epoch == first.epoch
        assert renewed.expires_at >= first.expires_at
        await s.acquire("r", owner("me"), 30)
        with pytest.raises(LeaseHeldError):
            await s.renew(renewed)

    async def test_release_frees_the_run_and_a_stale_release_is_a_no_op(
        self, store: JournalStore
    ) -> None:
        s = leasable(store)
        first = await s.acquire("r", owner("a"), 30)
        await s.release(first)
        second = await s.acquire("r", owner("b"), 30)
        await s.release(first)  # stale: must not free b's lease
        with pytest.raises(LeaseHeldError):
            await s.acquire("r", owner("c"), 30)
        with pytest.raises(LeaseHeldError):
            await s.append("r", entry("x"), first)
        await s.release(second)
        third: Lease = await s.acquire("r", owner("c"), 30)
        assert third.epoch == 3

    async def test_a_deleted_runs_old_lease_is_rejected(self, store: JournalStore) -> None:
        s = leasable(store)
        lease = await s.acquire("r", owner("me"), 30)
        await s.append("r", entry("a"), lease)
        await s.delete("r")
        with pytest.raises(LeaseHeldError):
            await s.append("r", entry("b"), lease)
        assert await s.load("r") == []
