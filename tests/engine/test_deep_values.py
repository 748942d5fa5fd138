"""Deep values: whatever a run journals loads back on every store, and a value nested deeper than
`MAX_DEPTH` is refused with a typed error before it is journaled (issue 34, item 3).

Before the limit, a step value, agent output or return value nested 200 levels or more was written,
the run settled `ok`, and every later load failed `journal-corrupt`: pydantic's JSON parser, which every
store's load uses, stops at 200 levels while its serializer writes about 255.
"""

from __future__ import annotations

import asyncio
import itertools
import warnings
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import tether
from tether.journal.canonical import MAX_DEPTH, nesting_depth, to_jsonable
from tether.testing import Reply, ToolCall

STORES = ("memory", "jsonl", "sqlite", "postgresql")
PLACES = ("step", "agent", "return", "resolution")
DEPTHS = st.one_of(
    st.integers(MAX_DEPTH - 3, MAX_DEPTH + 3),  # around the limit
    st.sampled_from([0, 1, 2, 64, 199, 200, 201, 254, 255, 256, 800]),  # around each parser's own limit
)
_runs = itertools.count()


@st.composite
def deep_values(draw: st.DrawFn, depth: int) -> Any:
    """A JSON value nested exactly `depth` levels: a random list or object per level, shallow siblings."""
    value: Any = draw(st.one_of(st.none(), st.booleans(), st.integers(-5, 5), st.text(max_size=3)))
    for _ in range(depth):
        sibling = draw(st.one_of(st.none(), st.integers(0, 9), st.text(max_size=2)))
        if draw(st.booleans()):
            value = [value, sibling] if draw(st.booleans()) else [value]
        else:
            value = {"k": value, "s": sibling} if draw(st.booleans()) else {"k": value}
    assert nesting_depth(value) == depth
    return value


class Source:
    """What the workflows below journal (set per example; a poison proves a resume replays instead)."""

    value: Any = None


def _produce() -> Any:
    if isinstance(Source.value, BaseException):
        raise Source.value
    return Source.value


@tether.workflow(name="deep-step")
async def in_a_step(ctx: tether.Ctx) -> int | None:
    return nesting_depth(await ctx.step("make", _produce))


@tether.workflow(name="deep-agent")
async def in_an_agent(ctx: tether.Ctx) -> int | None:
    return nesting_depth(await ctx.agent("answer", output={"type": "object"}))


@tether.workflow(name="deep-return")
async def as_the_return_value(ctx: tether.Ctx) -> Any:
    return _produce()


@tether.workflow(name="deep-resolution")
async def in_a_resolution(ctx: tether.Ctx) -> int | None:
    return nesting_depth(await ctx.await_external("deep"))


FLOWS = {"step": in_a_step, "agent": in_an_agent, "return": as_the_return_value, "resolution": in_a_resolution}


def answer(_request: Any) -> Reply:
    """The structured output is `Source.value` (an object), emitted as the forced tool's arguments."""
    return Reply(tool_calls=[ToolCall("emit_result", Source.value)], input_tokens=5, output_tokens=5)


@pytest.fixture(params=STORES)
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    kind = request.param
    if kind == "memory":
        return "memory://"
    if kind == "jsonl":
        return f"jsonl://{tmp_path}/journals"
    if kind == "sqlite":
        return f"sqlite:///{tmp_path}/tether.db"
    return f"{request.getfixturevalue('pg_dsn')}?schema={request.getfixturevalue('pg_schema')}"


def engine_on(url: str) -> tether.Engine:
    async def no_sleep(_: float) -> None:
        return None

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the memory store's loud warning
        return tether.Engine(models=[tether.models.fake("fake", script=answer)], routing={"loop": "fake:m"},
                             store=url, sleep=no_sleep)


async def journal_then_reload(url: str, place: str, value: Any) -> None:
    """Journal `value` at `place`; the journal must load back, holding the value or refusing it typed."""
    engine = engine_on(url)
    run_id, flow = f"deep-{next(_runs)}", FLOWS[place]
    Source.value = {"k": value} if place == "agent" else value  # an agent's output is an object
    depth = nesting_depth(Source.value)
    try:
        out = await engine.run(flow, run_id=run_id)
        if place == "resolution":
            assert out.status == "suspended" and out.pending == ["deep"]
            try:
                assert await engine.resolve_external(run_id, "deep", value) is True
            except tether.NonSerializableValueError as exc:
                assert depth > MAX_DEPTH
                assert (exc.data["depth"], exc.data["limit"]) == (depth, MAX_DEPTH)
                assert f"nested {depth} levels deep" in exc.message and str(MAX_DEPTH) in exc.message
            out = await engine.resume(run_id, flow)

        entries = await engine.inspect(run_id)  # the promise: it loads, whatever happened above
        deepest = max(max(nesting_depth(e.value) or 0, nesting_depth(e.error) or 0) for e in entries)
        assert deepest <= MAX_DEPTH + 2  # a value, under the entry's own member that holds it

        if depth <= MAX_DEPTH and place == "return":
            assert (out.status, out.value) == ("ok", value), out.error
            settles = [e.value for e in entries if e.kind == "decision" and e.value.get("decision") == "settle"]
            assert settles[-1]["value"] == value  # the body runs again on a resume; its journaled value is this
        elif depth <= MAX_DEPTH:
            assert (out.status, out.value) == ("ok", depth), out.error
            Source.value = AssertionError("a resume must replay the journal, not produce the value again")
            again = await engine.resume(run_id, flow)
            assert (again.status, again.value, again.replay.misses) == ("ok", depth, 0)
        elif place == "resolution":
            assert out.status == "suspended" and not [e for e in entries if e.kind == "resolution"]
        else:
            assert out.status == "error"
            assert isinstance(out.error, tether.NonSerializableValueError), out.error
            assert (out.error.data["depth"], out.error.data["limit"]) == (depth, MAX_DEPTH)
            assert "Nothing was journaled" in out.error.message
    finally:
        await engine.close()


def lists(depth: int) -> Any:
    value: Any = "leaf"
    for _ in range(depth):
        value = [value]
    return value


def at_the_edges(test: Any) -> Any:
    """Every place, just inside, at and just past the limit and past the parser's: always tried."""
    for place in PLACES:
        wrap = 1 if place == "agent" else 0  # the agent's output is `{"k": value}`, one level more
        for depth in (MAX_DEPTH - wrap, MAX_DEPTH + 1 - wrap, 200):
            test = example(place=place, value=lists(depth))(test)
    return test


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(place=st.sampled_from(PLACES), value=DEPTHS.flatmap(deep_values))
@at_the_edges
def test_a_journal_loads_back_whatever_depth_its_values_have(store_url: str, place: str, value: Any) -> None:
    asyncio.run(journal_then_reload(store_url, place, value))


@pytest.mark.parametrize("depth", [MAX_DEPTH - 1, MAX_DEPTH, MAX_DEPTH + 1, 200, 800])
def test_to_jsonable_accepts_exactly_max_depth_levels(depth: int) -> None:
    value = lists(depth)
    if depth <= MAX_DEPTH:
        assert to_jsonable(value) == value
        return
    with pytest.raises(tether.NonSerializableValueError, match=rf"nested {depth} levels deep.*at most {MAX_DEPTH}"):
        to_jsonable(value, what="the result of step 's'")
