"""Workers on two "hosts" (network namespaces) reaching PostgreSQL over a 5 ms link: partitions, heals, skew.

Each host is a network namespace with its own host name, linked to the root namespace by a veth pair
(see netns_kit). What is counted, from the journal, the fake provider's request log (every request and
every completed reply, from every process, in one file) and each worker's log of the writes the
database refused:

- runs finished exactly once: one `ok` settle per run, its queue row `done`;
- completed calls paid again: a request sent after the reply the journal kept had come back (0);
- replies lost in a cut: calls that completed on the cut-off host but never reached its journal, sent
  again by the host that took over (at most one per run the cut-off host held, the documented cost);
- takeover time: from the cut to the takeover, against the lease TTL, and never before the lease
  expired by the database's clock;
- stale writes: the cut-off host's writes that arrive after the heal, each refused, none visible.

Creating namespaces needs root: where `ip netns add` is refused these tests skip, saying why.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import worker_app
from netns_kit import HostWorker, Lab, netns_refused
from workerkit import request_lines, wait_until

import tether
from tether.contracts.entries import JournalEntry
from tether.journal.keys import SETTLE_KEY
from tether.stores.postgres import PostgresStore

pytestmark = pytest.mark.timeout(150)

TTL = 2.0
POLL = 0.2
DELAY_S = 0.0025  # each way: a 5 ms round trip


@pytest.fixture
def lab(pg_schema: str) -> Iterator[Lab]:
    """Hosts `host-a` and `host-b`, each over its own 5 ms link; removed (with their workers) afterwards,
    before the test's schema is dropped."""
    refused = netns_refused()
    if refused is not None:
        pytest.skip(f"multi-host tests need network namespaces: {refused}")
    with Lab("host-a", "host-b", delay_s=DELAY_S) as made:
        yield made


@pytest.fixture
def refusals(tmp_path: Path) -> Path:
    return tmp_path / "refusals.log"


def settles(entries: list[JournalEntry]) -> list[str]:
    return [e.value["status"] for e in entries if e.key == SETTLE_KEY and isinstance(e.value, dict)]


def journaled_answers(entries: list[JournalEntry]) -> dict[str, int]:
    """prompt -> the pid of the process whose reply the journal kept."""
    running = {e.seq for e in entries if e.kind == "agent" and e.status == "running"}
    out = {}
    for e in entries:
        if e.kind == "agent" and e.status == "ok" and e.ref in running and isinstance(e.value, dict):
            prompt, _, pid = str(e.value["output"]).rpartition(" by ")
            out[prompt] = int(pid)
    return out


@dataclass(frozen=True)
class Pays:
    """What the request log says about re-sent calls (see the module docstring)."""

    completed_paid_again: int
    lost_in_a_cut: int
    calls: int


def pays(log: Path, journals: dict[str, list[JournalEntry]]) -> Pays:
    kept: dict[str, int] = {}
    for entries in journals.values():
        kept |= journaled_answers(entries)
    lines = request_lines(log)  # in the order the processes wrote them (one shared file, O_APPEND)
    again = lost = 0
    for prompt, pid in kept.items():
        mine = [(i, r) for i, r in enumerate(lines) if r.prompt == prompt]
        kept_at = next(i for i, r in mine if r.event == "done" and r.pid == pid)
        starts = [i for i, r in mine if r.event == "start"]
        again += sum(i > kept_at for i in starts)
        lost += sum(1 for i, r in mine if r.event == "done" and i != kept_at)
    return Pays(again, lost, len(kept))


async def journals_of(client: tether.Engine, run_ids: list[str]) -> dict[str, list[JournalEntry]]:
    return {run_id: await client.inspect(run_id) for run_id in run_ids}


async def assert_finished_exactly_once(client: tether.Engine, journals: dict[str, list[JournalEntry]]) -> None:
    store = await client.store()
    assert isinstance(store, PostgresStore)
    for run_id, entries in journals.items():
        assert settles(entries) == ["ok"], run_id
        for _ in range(100):  # a worker reports a settled run with its next claim, a moment after the settle
            row = await store.queue_entry(run_id)
            if row is not None and row.state == "done":
                break
            await asyncio.sleep(0.05)
        assert row is not None and row.state == "done", (run_id, row)


def refused(path: Path) -> list[str]:
    """The refusal lines (`<run_id> <action> epoch <n>`) the workers wrote."""
    return [r.prompt for r in request_lines(path) if r.event == "refused"]


async def enqueue(client: tether.Engine, tag: str, count: int, n: int) -> list[str]:
    return [await client.enqueue(worker_app.chain, {"tag": f"{tag}{i}", "n": n}, run_id=f"{tag}{i}", budget_usd=1.0)
            for i in range(count)]


def done_for(log: Path, run_id: str) -> int:
    return sum(1 for r in request_lines(log) if r.event == "done" and r.prompt.startswith(f"{run_id} step "))


def mid_call(log: Path, runs: list[str]) -> bool:
    """Whether every one of `runs` has a model call in flight (its dispatch journaled, its reply not back)."""
    lines = request_lines(log)
    return all(sum((r.event == "start") - (r.event == "done") for r in lines if r.prompt.startswith(f"{run_id} step "))
               == 1 for run_id in runs)


async def under_way(log: Path, runs: list[str], steps: int) -> None:
    """Until each of `runs` has finished `steps` calls and all of them are in the middle of one: a cut then
    lands while each waits for a reply, so each reply's terminal write is sent into the cut link."""
    await wait_until(lambda: all(done_for(log, r) >= steps for r in runs) and mid_call(log, runs),
                     what="the runs under way, each mid-call")


@dataclass(frozen=True)
class Cut:
    """One partition of a host that held `runs`: when it began and when each run was taken over."""

    at: float
    expiries: dict[str, float]
    taken_over_at: dict[str, float]

    def takeover_s(self) -> list[float]:
        return [self.taken_over_at[r] - self.at for r in self.expiries]


async def cut_and_take_over(lab: Lab, host: str, client: tether.Engine, runs: list[str], taker: HostWorker) -> Cut:
    """Partition `host` while it drives `runs`; return once `taker` has taken every one of them over."""
    store = await client.store()
    assert isinstance(store, PostgresStore)
    at = time.time()
    lab[host].partition()
    await asyncio.sleep(0.05)  # bytes already past the cut (in the forwarder's delay line) land first
    expiries = {}
    for run_id in runs:
        lease = await store.lease_of(run_id)
        assert lease is not None and lease.owner.host == host, lease
        expiries[run_id] = lease.expires_at  # the cut-off host can never renew it again
    await wait_until(lambda: set(runs) <= set(taker.runs("taken over")), within_s=TTL + 15, what="the takeovers")
    return Cut(at, expiries, {r: taker.seen_at(f"run {r}: taken over") for r in runs})


def assert_taken_over_after_expiry_within_a_ttl(cut: Cut) -> None:
    for run_id, expires in cut.expiries.items():
        taken = cut.taken_over_at[run_id]
        assert taken >= expires, (run_id, taken, expires)  # never while the database still held the lease
        assert taken - cut.at <= TTL + POLL + 1.0, (run_id, taken - cut.at)


async def test_two_hosts_over_a_5_ms_link_finish_every_run_exactly_once_and_never_resend_a_call(
    lab: Lab, client: tether.Engine, store_url: str, request_log: Path
) -> None:
    rtt = {name: lab[name].round_trip_ms(store_url) for name in ("host-a", "host-b")}
    assert all(ms >= 2 * DELAY_S * 1000 for ms in rtt.values()), rtt  # the link really is that slow
    a = lab.spawn("host-a", store_url, request_log, ttl=TTL, concurrency=4)
    b = lab.spawn("host-b", store_url, request_log, ttl=TTL, concurrency=4)
    assert a.lines[-1].startswith("tether worker host-a:") and b.lines[-1].startswith("tether worker host-b:")
    started = time.monotonic()
    ids = await enqueue(client, "r", 24, n=2)
    outcomes = await asyncio.gather(*(client.wait(run_id, timeout=60) for run_id in ids))
    took = time.monotonic() - started
    assert [o.status for o in outcomes] == ["ok"] * len(ids)
    journals = await journals_of(client, ids)
    await assert_finished_exactly_once(client, journals)
    sent = request_lines(request_log)
    assert len(sent) == 2 * 2 * len(ids)  # one start and one done per call: nothing was sent twice
    counted = pays(request_log, journals)
    assert counted == Pays(completed_paid_again=0, lost_in_a_cut=0, calls=2 * len(ids))
    by_host = {w.host: len(w.runs("claimed")) for w in (a, b)}
    assert all(by_host.values()) and sum(by_host.values()) == len(ids), by_host  # both hosts took a share
    print(f"\n5 ms link ({lab['host-a'].shaping}): SELECT 1 round trip {rtt['host-a']:.1f} / {rtt['host-b']:.1f} ms; "
          f"{len(ids)} runs in {took:.2f} s, claimed {by_host}; {counted}")


async def test_a_partitioned_host_is_taken_over_after_the_lease_ttl_its_late_writes_are_refused_and_it_rejoins(
    lab: Lab, client: tether.Engine, store_url: str, request_log: Path, refusals: Path
) -> None:
    a = lab.spawn("host-a", store_url, request_log, ttl=TTL, latency=0.25, concurrency=3, refusals=refusals)
    held = await enqueue(client, "a", 3, n=24)  # far more steps than host-a gets through before the cut
    await wait_until(lambda: set(held) <= set(a.runs("claimed")), what="host-a claiming its runs")
    b = lab.spawn("host-b", store_url, request_log, ttl=TTL, latency=0.05, concurrency=8, refusals=refusals)
    others = await enqueue(client, "b", 3, n=4)  # host-a is full: host-b drives these at the same time
    await under_way(request_log, held, steps=3)
    cut = await cut_and_take_over(lab, "host-a", client, held, b)
    outcomes = await asyncio.gather(*(client.wait(run_id, timeout=60) for run_id in held + others))
    assert [o.status for o in outcomes] == ["ok"] * 6
    for o, run_id in zip(outcomes, held + others, strict=True):
        assert [v.rpartition(" by ")[0] for v in o.value] == [f"{run_id} step {i}" for i in range(len(o.value))]
    journals = await journals_of(client, held + others)
    stopped_before_heal = a.runs("stopped")
    lab["host-a"].heal()
    await wait_until(lambda: set(held) <= set(a.runs("stopped")), within_s=30, what="host-a stopping its runs")
    await wait_until(lambda: len(refused(refusals)) >= 1, within_s=10, what="a refused late write")
    await asyncio.sleep(0.5)
    assert await journals_of(client, held + others) == journals  # nothing host-a sent late became visible
    late = refused(refusals)
    assert {line.split()[0] for line in late} <= set(held)  # every refusal was of a run host-a had lost
    assert all(line.endswith("epoch 1") for line in late), late  # host-a's epoch; host-b writes at epoch 2
    await assert_finished_exactly_once(client, journals)
    assert_taken_over_after_expiry_within_a_ttl(cut)
    counted = pays(request_log, journals)
    assert counted.completed_paid_again == 0
    assert counted.lost_in_a_cut <= len(held)  # at most the one call each run had in flight at the cut
    # Healed, host-a is a worker again: with host-b gone it drives new runs to the end.
    assert b.stop() == 0
    after = await enqueue(client, "healed", 2, n=2)
    healed = await asyncio.gather(*(client.wait(run_id, timeout=30) for run_id in after))
    assert all(o.status == "ok" and all(v.endswith(f" by {a.proc.pid}") for v in o.value) for o in healed)
    print(f"\npartition of host-a ({lab['host-a'].shaping}), lease ttl {TTL:g} s: takeover after "
          f"{', '.join(f'{s:.2f}' for s in cut.takeover_s())} s; lease expiry after the cut "
          f"{', '.join(f'{e - cut.at:.2f}' for e in cut.expiries.values())} s; late writes refused {len(late)} "
          f"({', '.join(late)}); runs stopped before the heal {len(stopped_before_heal)}; {counted}")


async def test_a_host_an_hour_ahead_takes_over_a_cut_off_host_an_hour_behind_only_once_its_lease_expired(
    lab: Lab, client: tether.Engine, store_url: str, request_log: Path, refusals: Path
) -> None:
    a = lab.spawn("host-a", store_url, request_log, ttl=TTL, latency=0.25, concurrency=2, faketime="-1h",
                  refusals=refusals)
    held = await enqueue(client, "s", 2, n=40)  # far more steps than host-a gets through before the cut
    await wait_until(lambda: set(held) <= set(a.runs("claimed")), what="host-a claiming its runs")
    b = lab.spawn("host-b", store_url, request_log, ttl=TTL, latency=0.05, concurrency=4, faketime="+1h",
                  refusals=refusals)
    clocks = {w.host: float(w.wait_for("worker_app clock ").rsplit(" ", 1)[1]) - time.time() for w in (a, b)}
    assert clocks["host-a"] < -3000 and clocks["host-b"] > 3000, clocks  # the shim really skewed both
    await asyncio.sleep(1.5 * TTL)  # longer than a TTL: host-a's renewals, not luck, keep host-b away
    assert not b.runs("taken over") and not b.runs("claimed"), b.output
    await under_way(request_log, held, steps=1)
    cut = await cut_and_take_over(lab, "host-a", client, held, b)
    outcomes = await asyncio.gather(*(client.wait(run_id, timeout=60) for run_id in held))
    assert [o.status for o in outcomes] == ["ok"] * len(held)
    journals = await journals_of(client, held)
    lab["host-a"].heal()
    await wait_until(lambda: set(held) <= set(a.runs("stopped")), within_s=30, what="host-a stopping its runs")
    await wait_until(lambda: len(refused(refusals)) >= 1, within_s=10, what="a refused late write")
    await asyncio.sleep(0.5)
    assert await journals_of(client, held) == journals
    late = refused(refusals)
    assert {line.split()[0] for line in late} <= set(held) and all(line.endswith("epoch 1") for line in late)
    await assert_finished_exactly_once(client, journals)
    assert_taken_over_after_expiry_within_a_ttl(cut)
    counted = pays(request_log, journals)
    assert counted.completed_paid_again == 0 and counted.lost_in_a_cut <= len(held)
    print(f"\nskewed hosts (host-a {clocks['host-a']:+.0f} s, host-b {clocks['host-b']:+.0f} s), lease ttl {TTL:g} s: "
          f"takeover after {', '.join(f'{s:.2f}' for s in cut.takeover_s())} s of partition; late writes refused "
          f"{len(late)}; {counted}")
