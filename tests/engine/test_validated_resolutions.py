"""Resolutions are checked against the declared schema before anything is journaled.

An invalid value raises `tether.InvalidResolutionError`, writes nothing, and leaves the
suspension open, so a later valid value wins and the run completes: live (through the handle),
settled (`engine.resolve_external`, validated from the JSON Schema stored with the suspension) and
from the CLI (`tether resolve`, one line, non-zero exit).
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Annotated, Any, Literal

import pytest
from pydantic import AfterValidator, BaseModel, Field
from typer.testing import CliRunner

import tether
from tether.cli.main import app


class Review(BaseModel):
    score: int = Field(ge=0, le=10)
    kind: Literal["bug", "feature"] | None


KIND_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"kind": {"anyOf": [{"type": "string"}, {"type": "null"}]}},
    "required": ["kind"],
}


@tether.workflow(name="review")
async def review_flow(ctx: tether.Ctx) -> dict[str, Any]:
    got = await ctx.await_external("review", schema=Review)
    assert isinstance(got, Review)
    return got.model_dump()


@tether.workflow(name="kinded")
async def kinded_flow(ctx: tether.Ctx) -> object:
    return await ctx.await_external("kind", schema=KIND_SCHEMA)


async def kinds(engine: tether.Engine, run_id: str) -> list[str]:
    return [e.kind for e in await engine.inspect(run_id)]


async def test_a_live_invalid_resolution_is_refused_and_a_later_valid_one_wins(engine: tether.Engine) -> None:
    release = asyncio.Event()

    @tether.workflow
    async def live(ctx: tether.Ctx) -> list[object]:
        async def other() -> object:  # keeps the run live while the human answers
            return await ctx.step("other", release.wait)

        async def wait() -> object:
            return (await ctx.await_external("review", schema=Review)).model_dump()

        return await ctx.parallel([wait, other])

    handle = engine.start(live, run_id="live")
    async for event in handle.events:
        if event.type == "external:waiting":
            break
    before = await kinds(engine, "live")
    with pytest.raises(tether.InvalidResolutionError) as caught:
        await handle.resolve_external("review", {"score": 999, "kind": "bug"})
    assert isinstance(caught.value, tether.TetherError) and caught.value.code == "invalid-resolution"
    assert "score" in caught.value.message and "maximum of 10" in caught.value.message
    assert [i["loc"] for i in caught.value.issues] == [["score"]]
    assert await kinds(engine, "live") == before  # nothing journaled
    assert await handle.resolve_external("review", {"score": 7, "kind": "bug"}) is True
    release.set()
    out = await handle
    assert out.status == "ok" and out.value == [{"score": 7, "kind": "bug"}, True]


async def test_a_settled_run_validates_from_the_stored_schema(engine: tether.Engine) -> None:
    out = await engine.run(review_flow, run_id="r")
    assert out.status == "suspended"
    [suspended] = [e for e in await engine.inspect("r") if e.kind == "external"]
    assert suspended.value["schema"]["properties"]["score"]["maximum"] == 10  # stored as JSON Schema
    before = await kinds(engine, "r")
    for bad in ({"score": 999, "kind": "bug"}, {"score": 3, "kind": 42}, {"kind": "bug"}, "yes"):
        with pytest.raises(tether.InvalidResolutionError):
            await engine.resolve_external("r", "review", bad)
    assert await kinds(engine, "r") == before
    assert await engine.resolve_external("r", "review", {"score": 4, "kind": None}) is True
    assert await engine.resolve_external("r", "review", {"score": 5, "kind": None}) is False  # first valid won
    done = await engine.resume("r", review_flow)
    assert done.status == "ok" and done.value == {"score": 4, "kind": None}


async def test_a_fresh_engine_on_the_store_refuses_an_invalid_value(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/t.db"
    first = tether.Engine(store=url)
    await first.run(kinded_flow, run_id="k")
    await first.close()
    other = tether.Engine(store=url)  # knows nothing of the workflow: only the stored schema
    with pytest.raises(tether.InvalidResolutionError) as caught:
        await other.resolve_external("k", "kind", {"kind": 42})
    assert "kind: 42 is not valid under any of the given schemas; expected one of: string, null" in str(caught.value)
    assert await other.resolve_external("k", "kind", {"kind": "bug"}) is True
    done = await other.resume("k", kinded_flow)
    assert done.status == "ok" and done.value == {"kind": "bug"}
    await other.close()


def test_tether_resolve_prints_one_line_and_exits_non_zero_on_an_invalid_value(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/t.db"

    async def start() -> None:
        engine = tether.Engine(store=url)
        await engine.run(review_flow, run_id="cli")
        await engine.close()

    asyncio.run(start())
    runner = CliRunner()
    journal = runner.invoke(app, ["inspect", "cli", "--store", url, "--json"]).stdout
    bad = runner.invoke(app, ["resolve", "cli", "review", '{"score": 999, "kind": "bug"}', "--store", url])
    assert bad.exit_code != 0 and bad.stdout == ""
    lines = bad.stderr.strip().splitlines()  # one line, on stderr
    assert len(lines) == 1 and "invalid-resolution" in lines[0] and "maximum of 10" in lines[0], bad.stderr
    assert "Traceback" not in bad.stderr
    assert runner.invoke(app, ["inspect", "cli", "--store", url, "--json"]).stdout == journal
    good = runner.invoke(app, ["resolve", "cli", "review", '{"score": 9, "kind": "feature"}', "--store", url])
    assert good.exit_code == 0 and "resolved" in good.stdout

    async def finish() -> tether.RunOutcome:
        engine = tether.Engine(store=url)
        try:
            return await engine.resume("cli", review_flow)
        finally:
            await engine.close()

    out = asyncio.run(finish())
    assert out.status == "ok" and out.value == {"score": 9, "kind": "feature"}
    rows = json.loads(runner.invoke(app, ["inspect", "cli", "--store", url, "--json"]).stdout)
    assert [r["kind"] for r in rows].count("resolution") == 1


def _even(n: int) -> int:
    if n % 2:
        raise ValueError("must be even")
    return n


async def test_the_live_adapter_also_applies_validators_json_schema_cannot_express(engine: tether.Engine) -> None:
    release = asyncio.Event()

    @tether.workflow
    async def even(ctx: tether.Ctx) -> list[object]:
        async def other() -> object:
            return await ctx.step("other", release.wait)

        return await ctx.parallel([lambda: ctx.await_external("n", schema=Annotated[int, AfterValidator(_even)]), other])

    handle = engine.start(even, run_id="even")
    async for event in handle.events:
        if event.type == "external:waiting":
            break
    with pytest.raises(tether.InvalidResolutionError, match="must be even"):
        await handle.resolve_external("n", 3)
    assert await handle.resolve_external("n", 4) is True
    release.set()
    assert (await handle).value == [4, True]


async def test_an_invalid_json_schema_is_a_config_error(engine: tether.Engine) -> None:
    @tether.workflow
    async def broken(ctx: tether.Ctx) -> object:
        return await ctx.await_external("x", schema={"type": "no-such-type"})

    out = await engine.run(broken, run_id="b")
    assert out.status == "error" and isinstance(out.error, tether.ConfigError)
    assert "not a valid JSON schema" in str(out.error)
