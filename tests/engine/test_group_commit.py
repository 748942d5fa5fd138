"""Parallel branches of one run share journal transactions, and each append is durable when it returns."""

from __future__ import annotations

import asyncio
import functools
from pathlib import Path
from typing import Any

import pytest

import tether
from tether.stores import open_store
from tether.stores.sqlite import SqliteStore
from tether.testing import Reply


class CountingSqlite(SqliteStore):
    """A SQLite store that counts its journal write transactions, what each one held and which task wrote it."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.commits: list[list[int]] = []
        self.writers: list[asyncio.Task[Any] | None] = []
        self.fail_next = False

    def append_rows_now(self, run_id: str, rows: list[tuple[int, str]], lease: Any = None) -> list[int]:
        if self.fail_next:
            self.fail_next = False
            raise tether.StoreUnavailableError("simulated: the disk went away")
        seqs = super().append_rows_now(run_id, rows, lease)
        self.commits.append(seqs)
        self.writers.append(asyncio.current_task())
        return seqs


async def durable_seqs(path: Path) -> set[int]:
    """What another connection reads from the file right now (what survives a crash at this instant)."""
    other = open_store(f"sqlite:///{path}")
    try:
        return {e.seq for e in await other.load("r") if e.seq is not None}
    finally:
        await other.close()


async def test_parallel_branches_share_commits_and_each_step_is_durable_when_it_returns(tmp_path: Path) -> None:
    path = tmp_path / "t.db"
    store = CountingSqlite(path)
    seen: list[tuple[int, set[int]]] = []

    @tether.workflow(name="par")
    async def par(ctx: tether.Ctx) -> int:
        async def branch(b: int) -> int:
            for i in range(20):
                await ctx.step(f"b{b}s{i}", lambda: None)
                terminal = max(e.seq for e in handle._segment.index.entries if e.label == f"b{b}s{i}")  # type: ignore[union-attr]
                seen.append((terminal, await durable_seqs(path)))
            return b

        return sum(await ctx.parallel([functools.partial(branch, b) for b in range(8)]))

    engine = tether.Engine(store=store)
    handle = engine.start(par, run_id="r")
    out = await handle
    assert out.status == "ok" and out.value == sum(range(8))
    steps = 8 * 20
    assert all(terminal in durable for terminal, durable in seen)  # durable before ctx.step returned
    step_commits = [c for c in store.commits if len(c) > 1]
    assert len(store.commits) < steps  # 320 step entries in far fewer transactions than steps
    assert max(len(c) for c in step_commits) >= 8  # the branches' entries rode one transaction
    committed = [seq for c in store.commits for seq in c]
    assert committed == list(range(1, len(committed) + 1))  # one total order, no gaps
    await engine.close()


async def test_a_one_turn_agent_journals_in_two_commits(tmp_path: Path) -> None:
    store = CountingSqlite(tmp_path / "t.db")
    model = tether.models.fake("fake", script=[Reply(text="ok", input_tokens=5, output_tokens=1)],
                               prices={"m": tether.Price(input=1.0, output=1.0)})
    engine = tether.Engine(models=[model], routing={"loop": "fake:m"}, store=store)
    tasks: list[asyncio.Task[Any] | None] = []

    @tether.workflow(name="one")
    async def one(ctx: tether.Ctx) -> Any:
        tasks.append(asyncio.current_task())
        return await ctx.agent("q")

    out = await engine.run(one, run_id="r", budget_usd=1.0)
    assert out.status == "ok"
    entries = {e.seq: e for e in await engine.inspect("r")}
    kinds = [[(entries[s].kind, entries[s].label or entries[s].status) for s in c] for c in store.commits]
    running = next(s for s, e in entries.items() if e.kind == "agent" and e.status == "running")
    dispatch = next(s for s, e in entries.items() if e.label == "dispatch")
    terminal = next(s for s, e in entries.items() if e.kind == "agent" and e.ref is not None)
    # the running entry rides the dispatch record's commit (durable before the request left) ...
    assert [running, dispatch] in store.commits, kinds
    # ... and the turn's budget draw rides the terminal's
    assert any(terminal in c and any(entries[s].label == "budget_draw" for s in c) for c in store.commits), kinds
    # one branch: no sibling could join a batch, so the workflow's own task writes both (no commit task)
    writers = {store.writers[i] for i, c in enumerate(store.commits) if running in c or terminal in c}
    assert writers == {tasks[0]}
    await engine.close()


async def test_a_failed_group_commit_fails_every_caller_and_stops_the_segment(tmp_path: Path) -> None:
    store = CountingSqlite(tmp_path / "t.db")

    @tether.workflow(name="par")
    async def par(ctx: tether.Ctx) -> Any:
        await ctx.step("first", lambda: 1)
        store.fail_next = True
        return await ctx.parallel([functools.partial(ctx.step, f"s{i}", lambda: 2) for i in range(4)])

    engine = tether.Engine(store=store)
    with pytest.raises(tether.StoreUnavailableError, match="the disk went away"):
        await engine.run(par, run_id="r")
    loaded = await store.load("r")
    assert [e.label for e in loaded if e.kind == "step"] == ["first", "first"]  # nothing after the failure
    await engine.close()


async def test_a_failed_commit_of_one_branch_fails_its_caller_and_stops_the_segment(tmp_path: Path) -> None:
    store = CountingSqlite(tmp_path / "t.db")
    after: list[str] = []

    @tether.workflow(name="seq")
    async def seq(ctx: tether.Ctx) -> Any:
        await ctx.step("first", lambda: 1)
        store.fail_next = True
        try:
            await ctx.step("second", lambda: 2)
        finally:
            try:
                await ctx.step("third", lambda: 3)
            except tether.TetherError as exc:
                after.append(type(exc).__name__)

    engine = tether.Engine(store=store)
    with pytest.raises(tether.StoreUnavailableError, match="the disk went away"):
        await engine.run(seq, run_id="r")
    assert after == ["StoreUnavailableError"]  # the segment stopped: nothing more is written
    loaded = await store.load("r")
    assert [e.label for e in loaded if e.kind == "step"] == ["first", "first"]
    await engine.close()


class SlowSqlite(CountingSqlite):
    """Each journal write takes a while (so a caller can be cancelled while its commit is in flight)."""

    append_rows_now = None  # type: ignore[assignment]  # its writes wait: written through `append_rows`

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.writing = asyncio.Event()

    async def append_rows(self, run_id: str, rows: list[tuple[int, str]], lease: Any = None) -> list[int]:
        self.writing.set()
        await asyncio.sleep(0.2)
        return CountingSqlite.append_rows_now(self, run_id, rows, lease)


async def test_a_caller_cancelled_while_its_commit_is_in_flight_sees_it_only_once_the_write_is_durable(
    tmp_path: Path,
) -> None:
    """Every caller of a batch awaits the batch's one commit: cancelling one cancels neither the write
    nor its siblings, and the cancelled caller wakes (cancelled) only after its entry is durable."""
    from tether.engine.journal_writer import AppendCancelled

    path = tmp_path / "t.db"
    store = SlowSqlite(path)
    woke: dict[str, Any] = {}

    @tether.workflow(name="par")
    async def par(ctx: tether.Ctx) -> Any:
        seg = handle._segment
        assert seg is not None
        await ctx.step("first", lambda: 1)  # the run's own entries are durable before the race

        async def append(label: str) -> int:
            from tether.contracts.entries import JournalEntry

            entry = await seg.journal.append(JournalEntry(kind="step", status="ok", scope="", key=label, label=label))
            assert entry.seq is not None
            return entry.seq

        store.writing.clear()
        victim = asyncio.ensure_future(append("victim"))
        sibling = asyncio.ensure_future(append("sibling"))
        await store.writing.wait()  # their one commit is being written now
        victim.cancel()
        try:
            await victim
        except AppendCancelled as exc:
            woke["durable"] = await durable_seqs(path)
            woke["seq"] = exc.stored.seq
        woke["sibling"] = await sibling
        return "ok"

    engine = tether.Engine(store=store)
    handle = engine.start(par, run_id="r")
    out = await handle
    assert out.status == "ok", out.error
    assert woke["seq"] is not None and woke["seq"] in woke["durable"]  # cancelled only once durable
    assert woke["sibling"] in woke["durable"]
    assert any(woke["seq"] in c and woke["sibling"] in c for c in store.commits)  # one transaction
    await engine.close()


async def test_a_store_that_opts_out_of_writing_without_waiting_on_the_instance_is_written_through_append_rows(
    tmp_path: Path,
) -> None:
    store = SqliteStore(tmp_path / "t.db")
    calls: list[int] = []
    write = store.append_rows_now

    async def counted(run_id: str, rows: list[tuple[int, str]], lease: Any = None) -> list[int]:
        calls.append(len(rows))
        return write(run_id, rows, lease)

    store.append_rows = counted  # type: ignore[method-assign]
    store.append_rows_now = None  # type: ignore[assignment,method-assign]

    @tether.workflow(name="one")
    async def one(ctx: tether.Ctx) -> int:
        return await ctx.step("s", lambda: 1)

    engine = tether.Engine(store=store)
    assert (await engine.run(one, run_id="r")).status == "ok"
    assert sum(calls) == len(await store.load("r"))  # every row went through the wrapper
    await engine.close()


async def test_the_store_fast_path_is_declared_by_the_class_not_found_through_a_delegating_wrapper(
    tmp_path: Path,
) -> None:
    """`ImmediateRowWriting`/`RowWriting` are declared by a store's class: a wrapper that delegates
    everything else through `__getattr__` and intercepts `append` sees every journal write."""
    from tether.contracts.protocols import ImmediateRowWriting, RowWriting
    from tether.engine.journal_writer import writes_without_waiting

    inner = SqliteStore(tmp_path / "t.db")
    assert writes_without_waiting(inner) is not None
    assert issubclass(SqliteStore, ImmediateRowWriting) and issubclass(SqliteStore, RowWriting)
    assert not issubclass(SlowSqlite, ImmediateRowWriting)

    seen: list[int] = []

    class Watching:
        def __getattr__(self, name: str) -> Any:
            return getattr(inner, name)

        async def append(self, run_id: str, entry: Any, lease: Any = None) -> int:
            seen.append(1)
            return await inner.append(run_id, entry, lease)

        async def append_many(self, run_id: str, entries: list[Any], lease: Any = None) -> list[int]:
            seen.append(len(entries))
            return await inner.append_many(run_id, entries, lease)

    @tether.workflow(name="one")
    async def one(ctx: tether.Ctx) -> int:
        return await ctx.step("s", lambda: 1)

    engine = tether.Engine(store=Watching())  # type: ignore[arg-type]
    assert (await engine.run(one, run_id="r")).status == "ok"
    assert writes_without_waiting(Watching()) is None  # type: ignore[arg-type]
    assert sum(seen) == len(await inner.load("r"))  # every entry passed the wrapper
    await engine.close()


def test_no_future_in_src_overrides_cancel_to_refuse_it() -> None:
    """`cancel()` means cancel: no `Future`/`Task` subclass in the library redefines it (a future that refuses
    cancellation reports False where asyncio expects a cancel, and callers wait on it unshielded)."""
    import ast

    src = Path(tether.__file__).parent
    found: list[str] = []
    for path in src.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.ClassDef):
                continue
            bases = {ast.unparse(b) for b in node.bases}
            if any("Future" in b or "Task" in b for b in bases) and any(
                    isinstance(f, ast.FunctionDef | ast.AsyncFunctionDef) and f.name == "cancel" for f in node.body):
                found.append(f"{path.relative_to(src)}:{node.name}")
    assert found == []


async def test_a_caller_cancelled_twice_while_its_commit_is_in_flight_still_wakes_once_durable(tmp_path: Path) -> None:
    from tether.contracts.entries import JournalEntry
    from tether.engine.journal_writer import AppendCancelled

    path = tmp_path / "t.db"
    store = SlowSqlite(path)
    woke: dict[str, Any] = {}

    @tether.workflow(name="twice")
    async def twice(ctx: tether.Ctx) -> Any:
        seg = handle._segment
        assert seg is not None
        await ctx.step("first", lambda: 1)
        store.writing.clear()
        victim = asyncio.ensure_future(
            seg.journal.append(JournalEntry(kind="step", status="ok", scope="", key="v", label="v")))
        await store.writing.wait()
        victim.cancel()
        await asyncio.sleep(0.01)
        victim.cancel()  # a second cancel while it waits, shielded, for the write
        with pytest.raises(AppendCancelled) as caught:
            await victim
        woke["seq"], woke["durable"] = caught.value.stored.seq, await durable_seqs(path)
        return "ok"

    engine = tether.Engine(store=store)
    handle = engine.start(twice, run_id="r")
    out = await handle
    assert out.status == "ok", out.error
    assert woke["seq"] in woke["durable"]
    await engine.close()
