"""The terminal progress view and the pytest plugin's fixtures."""

from __future__ import annotations

import io
from typing import Any

from rich.console import Console

import tether
from tether.testing import Reply


@tether.workflow(name="two")
async def two(ctx: tether.Ctx) -> Any:
    return [await ctx.agent("first", label="first"), await ctx.agent("second", label="second")]


async def test_progress_prints_plain_lines_off_a_tty(tether_engine: tether.Engine, fake_model: Any) -> None:
    fake_model.push(Reply(text="a", input_tokens=10, output_tokens=2), Reply(text="b", input_tokens=10, output_tokens=2))
    out = io.StringIO()
    outcome = await tether.progress(tether_engine.start(two, run_id="p"), console=Console(file=out))
    assert outcome.status == "ok" and outcome.value == ["a", "b"]
    text = out.getvalue()
    assert "start  #1 first" in text and "end    #2 second: ok, 12 tokens" in text
    assert "run p: ok" in text


async def test_progress_renders_a_live_tree_on_a_terminal(tether_engine: tether.Engine, fake_model: Any) -> None:
    fake_model.push(Reply(text="a"), Reply(text="b"))
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=100)
    outcome = await tether.progress(tether_engine.start(two, run_id="t", budget_usd=1.0, allow_unpriced=True), console=console)
    assert outcome.status == "ok"
    assert "#2 second" in out.getvalue()


async def test_the_plugin_fixtures_route_the_fake_model(tether_engine: tether.Engine, fake_model: Any) -> None:
    fake_model.push(Reply(text="hello"))

    @tether.workflow(name="hi")
    async def hi(ctx: tether.Ctx) -> Any:
        return await ctx.agent("hi")

    assert (await tether_engine.run(hi, run_id="h")).value == "hello"
    assert fake_model.calls == 1
