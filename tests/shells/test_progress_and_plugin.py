"""The terminal progress view and the pytest plugin's fixtures."""

from __future__ import annotations

import io
import re
from pathlib import Path
from typing import Any

from rich.console import Console

import tether
from tether.contracts.messages import ChatRequest
from tether.contracts.money import usd
from tether.testing import Reply, ToolCall


@tether.workflow(name="two")
async def two(ctx: tether.Ctx) -> Any:
    return [await ctx.agent("first", label="first"), await ctx.agent("second", label="second")]


async def test_progress_prints_plain_lines_off_a_tty(tether_engine: tether.Engine, fake_model: Any) -> None:
    fake_model.push(Reply(text="a", input_tokens=10, output_tokens=2), Reply(text="b", input_tokens=10, output_tokens=2))
    out = io.StringIO()
    outcome = await tether.progress(tether_engine.start(two, run_id="p"), console=Console(file=out))
    assert outcome.status == "ok" and outcome.value == ["a", "b"]
    text = out.getvalue()
    assert "start  #1 first" in text and "end    #2 second: ok, 12 tokens, 0.000014 USD" in text  # FIXTURE_PRICE
    assert "run p: ok" in text


PRICE = tether.Price(input=100.0, output=50.0)  # a call of 100 in, 20 out costs 0.011 USD


def priced(tmp_path: Path, script: Any) -> tether.Engine:
    model = tether.models.fake("fake", script=script, prices={"m": PRICE})
    return tether.Engine(models=[model], routing={"loop": "fake:m"}, store=f"sqlite:///{tmp_path}/t.db")


def boss_script(request: ChatRequest) -> Reply:
    if "spawn_agent" in {t.name for t in request.tools} and not any(m.role == "tool" for m in request.messages):
        return Reply(tool_calls=[ToolCall("spawn_agent", {"goal": f"dig {i}"}) for i in range(3)],
                     input_tokens=100, output_tokens=20)
    return Reply(text="dug", input_tokens=100, output_tokens=20)


@tether.workflow(name="boss")
async def boss(ctx: tether.Ctx) -> Any:
    return await ctx.orchestrate("plan", label="boss")


CAPS = tether.Containment(max_agents=3, max_concurrent=3, max_depth=2)


async def test_plain_lines_show_spend_refusals_and_the_final_status(tmp_path: Path) -> None:
    engine = priced(tmp_path, boss_script)
    out = io.StringIO()
    outcome = await tether.progress(engine.start(boss, run_id="b", budget_usd=1.0, containment=CAPS),
                                    console=Console(file=out))
    await engine.close()
    text = out.getvalue()
    assert "run b: boss, ceilings 1.00 USD" in text
    assert "refused spawn of #1 (agents): dig 2" in text
    assert "end    #2 spawn: dig 0: ok, 120 tokens, 0.011 USD" in text
    assert f"run b: {outcome.status}, {usd(outcome.cost.total_usd)} USD spent of 1.00" in text


async def test_an_exhausted_run_shows_its_real_spend_and_the_budget_refusal(tmp_path: Path) -> None:
    engine = priced(tmp_path, lambda r: Reply(text="x", input_tokens=100, output_tokens=20))

    @tether.workflow(name="pricey")
    async def pricey(ctx: tether.Ctx) -> Any:
        await ctx.agent("cheap", label="cheap", est_cost=0.03)
        return await ctx.agent("dear", label="dear", est_cost=5.0)

    console = Console(file=io.StringIO(), force_terminal=True, width=120)
    outcome = await tether.progress(engine.start(pricey, run_id="x", budget_usd=0.05), console=console)
    await engine.close()
    assert outcome.status == "exhausted"
    frame = render_text(console, "x  pricey")
    assert "exhausted: 0.011 USD" in frame and "0.011 of 0.05 USD (22%)" in frame
    assert "✗ budget refused: agent 'dear'" in frame


async def test_a_replayed_run_shows_restored_spend_the_ceiling_and_all_children(tmp_path: Path) -> None:
    engine = priced(tmp_path, boss_script)
    first = await engine.run(boss, run_id="r", budget_usd=1.0, containment=CAPS)
    console = Console(file=io.StringIO(), force_terminal=True, width=120)
    replayed = await tether.progress(await engine.start_resume("r", boss), console=console)
    await engine.close()
    assert replayed.replay.hits == 1 and replayed.cost.total_usd == first.cost.total_usd
    frame = render_text(console, "r  boss")
    assert f"restored from the journal: {usd(first.cost.total_usd)} USD" in frame
    assert f"{usd(first.cost.total_usd)} of 1.00 USD" in frame
    for agent in ("#1 boss", "#2 spawn: dig 0", "#3 spawn: dig 1"):
        assert agent in frame
    assert frame.count("(replayed)") == 3 and "✗ spawn refused (agents)" in frame


def render_text(console: Console, header: str) -> str:
    """The last frame a Live console drew (from its last `header`), without terminal control sequences."""
    raw = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", console.file.getvalue())  # type: ignore[attr-defined]
    return raw[raw.rindex(header):]


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
