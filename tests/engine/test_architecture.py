"""The engine's structure, checked: no import cycle, no private pydantic state, one record type per concept,
one declaration of the run and agent options."""

from __future__ import annotations

import ast
import asyncio
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

import tether
from tether.contracts.entries import JournalEntry
from tether.engine.options import AGENT_OPTION_NAMES, DURABLE_OPTIONS, AgentOptions, RunOptions
from tether.engine.replay import Abandoned
from tether.testing import FakeModel, Reply

SRC = Path(tether.__file__).parent
ENGINE = SRC / "engine"
PRIVATE = {"__pydantic_fields_set__", "__pydantic_extra__", "__pydantic_private__", "__dict__"}


def _imports_of(path: Path) -> set[str]:
    """The `tether.engine` modules `path` imports, at run time or under TYPE_CHECKING alike."""
    names = {p.stem for p in ENGINE.glob("*.py")}
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("tether.engine"):
            parts = node.module.split(".")
            if len(parts) >= 3:
                found.add(parts[2])
            else:
                found |= {a.name for a in node.names if a.name in names}
        elif isinstance(node, ast.Import):
            found |= {a.name.split(".")[2] for a in node.names if a.name.startswith("tether.engine.")}
    found.discard(path.stem)
    return found


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of `graph`, as the list of modules on it, or None."""
    state: dict[str, int] = {}
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for dep in sorted(graph.get(node, ())):
            if state.get(dep) == 1:
                return [*path[path.index(dep):], dep]
            if dep not in state and (found := visit(dep)) is not None:
                return found
        state[node] = 2
        path.pop()
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)) is not None:
            return found
    return None


def test_the_engine_package_has_no_import_cycle_counting_type_checking_imports() -> None:
    graph = {p.stem: _imports_of(p) for p in ENGINE.glob("*.py")}
    assert len(graph) > 20  # the scan saw the package
    assert _cycle(graph) is None, " -> ".join(_cycle(graph) or [])


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


def _private_writes(source: str) -> list[tuple[int, str]]:
    """Lines of `source` that write a pydantic instance's private state or an instance `__dict__`."""
    out: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = list(node.targets)
        elif isinstance(node, ast.AugAssign | ast.AnnAssign):
            targets = [node.target]
        for t in targets:
            base = t.value if isinstance(t, ast.Subscript) else t
            if isinstance(base, ast.Attribute) and base.attr in PRIVATE:
                out.append((node.lineno, base.attr))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            f = node.func
            if f.attr in ("update", "setdefault", "pop", "clear") and isinstance(f.value, ast.Attribute) \
                    and f.value.attr in PRIVATE:
                out.append((node.lineno, f"{f.value.attr}.{f.attr}"))
            if f.attr == "__setattr__" or (isinstance(f.value, ast.Name) and f.attr == "setattr"):
                names = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
                out += [(node.lineno, n) for n in names if n in PRIVATE]
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "setattr":
            names = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
            out += [(node.lineno, n) for n in names if n in PRIVATE]
    return out


def test_no_code_in_src_writes_pydantic_private_state_or_an_instance_dict() -> None:
    found = {str(p.relative_to(SRC)): w for p in SRC.rglob("*.py") if (w := _private_writes(p.read_text()))}
    assert found == {}


def test_the_private_state_scan_catches_each_form_of_write() -> None:
    bad = '''
m.__pydantic_fields_set__ = set()
m.__pydantic_extra__["k"] = 1
m.__dict__.update(x=1)
object.__setattr__(m, "__pydantic_private__", {})
setattr(m, "__dict__", {})
'''
    assert [n for _, n in _private_writes(bad)] == [
        "__pydantic_fields_set__", "__pydantic_extra__", "__dict__.update", "__pydantic_private__", "__dict__",
    ]


def test_two_entries_of_one_shape_share_no_state() -> None:
    """Entries of one shape used to share one fields-set object: setting a field on one changed the other."""
    a = JournalEntry(kind="step", status="ok", scope="", key="k1")
    b = JournalEntry(kind="step", status="ok", scope="", key="k2")
    a.label = "mine"
    assert b.label is None
    assert "label" in a.model_dump(exclude_none=True) and "label" not in b.model_dump(exclude_none=True)
    loaded = [JournalEntry.model_validate_json(x.model_dump_json()) for x in (a, b)]
    loaded[1].phase = "p"
    assert loaded[0].phase is None and loaded[0] == a


def test_a_member_this_version_does_not_know_survives_a_load_and_a_dump() -> None:
    text = JournalEntry(kind="step", scope="", key="k").model_dump_json()
    newer = text[:-1] + ',"from_the_future":{"x":1}}'
    back = JournalEntry.model_validate_json(newer)
    assert '"from_the_future":{"x":1}' in back.model_dump_json()


def test_abandoned_unwinds_past_a_workflow_s_except_exception() -> None:
    assert issubclass(Abandoned, BaseException) and not issubclass(Abandoned, Exception)


async def test_an_invalid_value_resolved_before_the_run_started_is_logged_and_the_suspension_stays_open(
    tmp_path: Path,
) -> None:
    """It used to raise `ValidationError` inside a future nothing awaited (the log event was invalid)."""

    @tether.workflow(name="wait-int")
    async def wait_int(ctx: tether.Ctx) -> int:
        return int(await ctx.await_external("n", schema=int))

    engine = tether.Engine(store=f"sqlite:///{tmp_path}/t.db")
    assert (await engine.run(wait_int, run_id="r")).status == "suspended"
    handle = engine.start(wait_int, run_id="r")  # the run again: its suspension is in the journal
    logged: list[Any] = []
    handle.on("log", logged.append)
    assert await handle.resolve_external("n", "not a number") is True  # queued: the segment has not started
    out = await handle
    assert out.status == "suspended" and out.pending == ["n"]
    assert [(e.level, e.fields.get("key")) for e in logged] == [("error", "n")]

    early = engine.start(wait_int, run_id="fresh")  # a fresh run: nothing waits for "n" yet
    warned: list[Any] = []
    early.on("log", warned.append)
    await early.resolve_external("n", 1)
    assert (await early).status == "suspended"
    assert [(e.level, e.fields.get("key")) for e in warned] == [("warning", "n")]
    assert await engine.resolve_external("r", "n", 7) is True
    assert (await engine.resume("r", wait_int)).value == 7
    await engine.close()


class Verdict(BaseModel):
    score: int


async def test_a_replayed_annotated_step_builds_its_return_adapter_once_and_warns_when_it_no_longer_validates(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import tether.engine.return_types as return_types

    built: list[object] = []
    real = return_types.TypeAdapter

    def counting(tp: Any) -> Any:
        built.append(tp)
        return real(tp)

    monkeypatch.setattr(return_types, "TypeAdapter", counting)

    stored: dict[str, Any] = {}

    @tether.workflow(name="steps")
    async def steps(ctx: tether.Ctx) -> list[int]:
        stored["typed"] = [await ctx.step(f"t{i}", make_typed(i)) for i in range(3)]
        return [v.score for v in stored["typed"]]

    def make_typed(i: int) -> Any:
        def typed() -> Verdict:
            return Verdict(score=i)

        return typed

    engine = tether.Engine(store=f"sqlite:///{tmp_path}/t.db")
    assert (await engine.run(steps, run_id="r")).status == "ok"
    built.clear()  # the live run validated nothing; only replays build adapters
    again = await engine.resume("r", steps)
    assert again.status == "ok" and again.replay.hits == 3, again
    assert all(isinstance(v, Verdict) for v in stored["typed"])  # replayed values come back as models
    assert len(built) == 1  # one adapter for the three replays of `typed` (same code, same annotation)

    def renamed() -> int:  # the annotation changed: a journaled Verdict is no int
        return 0

    @tether.workflow(name="changed")
    async def changed(ctx: tether.Ctx) -> Any:
        return await ctx.step("t0", renamed)

    first = await engine.run(changed, run_id="c")
    assert first.status == "ok"

    @tether.workflow(name="changed")
    async def changed_again(ctx: tether.Ctx) -> Any:
        def renamed() -> Verdict:
            return Verdict(score=1)

        return await ctx.step("t0", renamed)

    replayed = await engine.resume("c", changed_again)
    assert replayed.status == "ok" and replayed.value == 0
    assert any("no longer validates" in w for w in replayed.warnings), replayed.warnings
    await engine.close()


def test_the_durable_options_and_the_genesis_derive_from_run_options() -> None:
    assert set(DURABLE_OPTIONS) == set(RunOptions.__annotations__) - {"deadline_s"}
    from tether.engine.options import SegmentOptions, genesis_entry

    genesis = genesis_entry(0.0, "wf", {}, SegmentOptions())
    assert isinstance(genesis.value, dict)
    assert set(DURABLE_OPTIONS) <= set(genesis.value)
    assert set(AgentOptions.__annotations__) == AGENT_OPTION_NAMES


async def test_an_unknown_run_or_agent_option_from_untyped_code_is_a_type_error(tmp_path: Path) -> None:
    engine = tether.Engine(models=[FakeModel(script=[Reply(text="hi")])], store=f"sqlite:///{tmp_path}/t.db",
                           routing={"loop": "fake:m"})
    with pytest.raises(TypeError, match=r"budgt_usd.*tether\.RunOptions"):
        engine.start(lambda ctx: asyncio.sleep(0), budgt_usd=1.0)  # type: ignore[call-arg,arg-type]

    @tether.workflow(name="typo")
    async def typo(ctx: tether.Ctx) -> str:
        return await ctx.agent("hi", tol=[])  # type: ignore[call-overload]

    out = await engine.run(typo, run_id="t")
    assert out.status == "error" and isinstance(out.error, TypeError) and "tether.AgentOptions" in str(out.error)
    ok = await engine.resume("t", typo, deadline_s=30.0)  # the per-segment option is a resume's own
    assert ok.status == "error"
    await engine.close()


async def test_every_tether_object_made_per_agent_invocation_is_slotted(tmp_path: Path) -> None:
    """An instance `__dict__` costs 100-1,600 bytes (one past 30 attributes stops sharing keys), paid once per
    agent: at 10,000 concurrent agents the slotted set is ~20 MB of peak RSS (docs/performance.md). Objects
    counted while 3 agents are mid-call, and made once per agent, must have no `__dict__`; pydantic models
    (the chat messages, the contract's wire shapes) are exempt."""
    import gc

    agents = 3

    def census() -> dict[type, int]:
        seen: dict[type, int] = {}
        for obj in gc.get_objects():
            cls = type(obj)
            module = cls.__dict__.get("__module__")
            if isinstance(module, str) and module.startswith("tether.") and not isinstance(obj, BaseModel):
                seen[cls] = seen.get(cls, 0) + 1
        return seen

    counts: list[dict[type, int]] = []
    in_flight = asyncio.Event()

    @tether.tool
    def lookup(q: str) -> str:
        """Look up."""
        return q

    def reply(request: Any) -> Reply:
        return Reply(text="done")

    waiting = [0]
    all_waiting = asyncio.Event()

    class Census(FakeModel):
        async def stream(self, request: Any, signal: Any = None) -> Any:
            waiting[0] += 1
            if waiting[0] == agents:
                all_waiting.set()
            await in_flight.wait()
            async for event in super().stream(request, signal):
                yield event

    model = Census(script=reply, prices={"m": tether.Price(input=1.0, output=2.0)})
    engine = tether.Engine(models=[model], store=f"sqlite:///{tmp_path}/t.db", routing={"loop": "fake:m"})

    @tether.workflow(name="fan")
    async def fan(ctx: tether.Ctx) -> list[Any]:
        async def count() -> None:
            await all_waiting.wait()
            try:
                counts.append(census())
            finally:
                in_flight.set()

        gc.collect()
        counts.append(census())  # before: whatever else this process holds (other tests' engines)
        waiter = asyncio.ensure_future(count())
        out = await ctx.parallel([lambda i=i: ctx.agent(f"task {i}", tools=[lookup]) for i in range(agents)])
        await waiter
        return out

    out = await engine.run(fan, run_id="r", budget_usd=1.0)
    await engine.close()
    assert out.status == "ok", out.error
    before, during = counts
    made = {cls: n - before.get(cls, 0) for cls, n in during.items()}
    per_invocation = {cls for cls, n in made.items() if n > 0 and n % agents == 0}
    assert len(per_invocation) >= 10  # the census saw the invocations' objects
    dicts = sorted(f"{c.__module__}.{c.__qualname__}" for c in per_invocation if hasattr(c, "__dict__")
                   and "__dict__" in {k for b in c.__mro__ for k in vars(b)})
    assert dicts == []


TRACKED_PER_AGENT_IN_FLIGHT = 58
"""The objects the cycle collector tracks per one-turn agent parked inside its model call (56.4 measured at
the time of writing; 100.4 before issue 48's round three): every full collection walks all of them, so at 10,000
agents in flight each one more is about 10,000 more (docs/performance.md, *Many agents at once*)."""


async def test_the_objects_the_cycle_collector_tracks_per_agent_in_flight_stay_few(tmp_path: Path) -> None:
    """A count, not a timing: agents parked in their model call, `gc.get_objects()` counted with 10 and with 40
    in flight (the difference cancels what a run holds whatever its size), per agent."""
    import functools
    import gc

    from tether.contracts.stream import Finish, ModelCaps, TextDelta
    from tether.contracts.usage import Usage

    class Parked:
        """A one-reply adapter that keeps nothing (as a real one), parked until released."""

        id = family = "park"

        def __init__(self) -> None:
            self.calls, self.waiting, self.release = 0, 0, asyncio.Event()
            self.all_in = asyncio.Event()
            self._caps = ModelCaps()

        def caps(self, model: str) -> ModelCaps:
            return self._caps

        async def stream(self, request: Any, signal: Any = None) -> Any:
            self.calls += 1
            if self.calls == self.waiting:
                self.all_in.set()
            if not self.release.is_set():
                await self.release.wait()
            yield TextDelta(text="ok")
            yield Finish(reason="stop", usage=Usage(input_tokens=5, output_tokens=1))

    model = Parked()
    engine = tether.Engine(models=[model], routing={"loop": "park:m"}, store=f"sqlite:///{tmp_path}/t.db",
                           concurrency=100, max_spawns=100)

    @tether.workflow(name="fan")
    async def fan(ctx: tether.Ctx, n: int) -> int:
        async def one(i: int) -> Any:
            return await ctx.agent(f"task {i}")

        return len(await ctx.parallel([functools.partial(one, i) for i in range(n)]))

    async def tracked_with(n: int, run_id: str) -> int:
        model.calls, model.waiting = 0, n
        model.release.clear()
        model.all_in.clear()
        run = asyncio.ensure_future(engine.run(fan, {"n": n}, run_id=run_id))
        await model.all_in.wait()
        gc.collect()
        count = len(gc.get_objects())
        model.release.set()
        assert (await run).status == "ok"
        return count

    model.release.set()
    await engine.run(fan, {"n": 3}, run_id="warm")  # imports and caches, made once
    few = await tracked_with(10, "few")
    many = await tracked_with(40, "many")
    await engine.close()
    per_agent = (many - few) / 30
    assert per_agent <= TRACKED_PER_AGENT_IN_FLIGHT, per_agent


def test_segment_options_mirror_run_options_name_for_name() -> None:
    # RunOptions is the declaration users see; SegmentOptions carries the same options through a segment (plus
    # a segment's own flags). A run option added to one and not the other fails here.
    import dataclasses

    from tether.engine.options import RUN_OPTION_NAMES, SegmentOptions

    fields = {f.name for f in dataclasses.fields(SegmentOptions)}
    assert set(RUN_OPTION_NAMES) <= fields, sorted(set(RUN_OPTION_NAMES) - fields)
