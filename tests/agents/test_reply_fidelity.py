"""Through `tether.Engine` and the fake model: what a reply's end means, journaled and replayed.

Finish reasons ride the terminal, a budget-clamped cut is a `budget` stop, an empty reply is asked
once more, reasoning tokens reach the cost report, and a failover is a journaled decision.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import tether
from tether.contracts.entries import JournalEntry
from tether.contracts.messages import ChatRequest
from tether.pricing import cost_usd
from tether.testing import Reply, ToolCall

PRICE = tether.Price(input=1.0, output=2.0)
LONG = "The forecast, in more detail than anyone asked for. " * 40


async def no_sleep(_: float) -> None:
    return None


def engine_for(tmp_path: Path, *models: Any, routing: Any = "fake:m", **kw: Any) -> tether.Engine:
    return tether.Engine(
        models=list(models), routing={"loop": routing}, store=f"sqlite:///{tmp_path}/t.db", sleep=no_sleep, **kw
    )


def terminals(entries: list[JournalEntry]) -> list[JournalEntry]:
    return [e for e in entries if e.kind == "agent" and e.ref is not None]


def decisions(entries: list[JournalEntry], name: str) -> list[dict[str, Any]]:
    return [e.value["payload"] for e in entries if e.kind == "decision" and (e.value or {}).get("decision") == name]


@tether.workflow(name="pair")
async def pair(ctx: tether.Ctx) -> list[Any]:
    done = await ctx.agent("say hi", full=True, label="done")
    cut = await ctx.agent("say a lot", full=True, label="cut", max_output_tokens=10)
    return [(r.status, r.finish_reason, r.output, r.replayed) for r in (done, cut)]


async def test_the_finish_reason_is_journaled_in_the_terminal_and_restored_on_replay(tmp_path: Path) -> None:
    model = tether.models.fake("fake", script=[Reply(text="hi"), Reply(text=LONG)])
    engine = engine_for(tmp_path, model)
    first = await engine.run(pair, run_id="r")
    done, cut = first.value
    assert done == ("ok", "stop", "hi", False)
    assert cut[:2] == ("limit", "max_tokens") and cut[3] is False
    assert cut[2] and LONG.startswith(cut[2]) and len(cut[2]) < len(LONG)  # the partial text is the output
    assert [t.value["finish_reason"] for t in terminals(await engine.inspect("r"))] == ["stop", "max_tokens"]
    again = await engine.resume("r", pair)
    assert model.calls == 2  # both replay: the cut is an engine-decided stop, memoized like `limit`
    assert again.value == [("ok", "stop", "hi", True), (*first.value[1][:3], True)]


@tether.workflow(name="clamped")
async def clamped(ctx: tether.Ctx) -> dict[str, Any]:
    try:
        await ctx.agent("tell me everything", est_cost=0.0001)
    except tether.BudgetExhaustedError as exc:
        return {"raised": exc.data["error"].model_dump(exclude_none=True)}
    return {"raised": None}


async def test_a_reply_cut_at_the_budget_clamped_limit_settles_limit_with_kind_budget_and_its_stage(
    tmp_path: Path,
) -> None:
    model = tether.models.fake("fake", script=[Reply(text=LONG, input_tokens=1, output_tokens=3_000)],
                               prices={"m": PRICE})
    engine = engine_for(tmp_path, model)
    outcome = await engine.run(clamped, run_id="r", budget_usd=0.001)
    sent = model.requests[0].max_output_tokens
    assert sent is not None and sent < 4_096  # the remaining money set the limit, not the spec
    error = outcome.value["raised"]
    assert (error["kind"], error["stage"]) == ("budget", "loop")
    assert f"cut at {sent} output tokens" in error["message"]
    (terminal,) = terminals(await engine.inspect("r"))
    assert (terminal.status, terminal.value["finish_reason"]) == ("limit", "max_tokens")
    assert terminal.value["output"] and LONG.startswith(terminal.value["output"])  # the partial text is kept
    assert terminal.usage is not None and terminal.usage.output_tokens == sent


@tether.workflow(name="ask")
async def ask(ctx: tether.Ctx) -> Any:
    result = await ctx.agent("answer me", full=True)
    return {"status": result.status, "output": result.output, "error": result.error, "finish": result.finish_reason}


async def test_an_empty_reply_is_asked_once_more_then_settles_a_terminal_no_content_error(tmp_path: Path) -> None:
    model = tether.models.fake("fake", script=[Reply(text=""), Reply(text=""), Reply(text="never asked")])
    engine = engine_for(tmp_path, model)
    outcome = await engine.run(ask, run_id="r")
    value = outcome.value
    assert value["status"] == "error" and value["error"].kind == "terminal"
    assert "no content" in value["error"].message
    assert model.calls == 2 and outcome.cost.provider_calls == 2


async def test_one_empty_reply_then_an_answer_is_ok(tmp_path: Path) -> None:
    model = tether.models.fake("fake", script=[Reply(text=""), Reply(text="here it is")])
    outcome = await engine_for(tmp_path, model).run(ask, run_id="r")
    assert (outcome.value["status"], outcome.value["output"], model.calls) == ("ok", "here it is", 2)


async def test_a_refusal_scripted_on_the_fake_settles_a_terminal_error(tmp_path: Path) -> None:
    model = tether.models.fake("fake", script=[Reply(text="I won't do that.", finish_reason="refusal")])
    outcome = await engine_for(tmp_path, model).run(ask, run_id="r")
    value = outcome.value
    assert (value["status"], value["finish"], value["output"]) == ("error", "refusal", None)
    assert value["error"].kind == "terminal" and "I won't do that." in value["error"].message


async def test_reasoning_tokens_are_journaled_and_summed_in_the_cost_report_never_billed_twice(tmp_path: Path) -> None:
    model = tether.models.fake(
        "fake",
        script=[Reply(text="a", input_tokens=100, output_tokens=400, reasoning_tokens=350),
                Reply(text="b", input_tokens=100, output_tokens=60, reasoning_tokens=20)],
        prices={"m": PRICE},
    )
    engine = engine_for(tmp_path, model)

    @tether.workflow(name="two")
    async def two(ctx: tether.Ctx) -> list[Any]:
        return [await ctx.agent("first"), await ctx.agent("second")]

    outcome = await engine.run(two, run_id="r", budget_usd=1.0)
    assert [t.usage.reasoning_tokens for t in terminals(await engine.inspect("r")) if t.usage] == [350, 20]
    report = await engine.cost("r")
    assert report == outcome.cost
    assert (report.usage.reasoning_tokens, report.usage.output_tokens) == (370, 460)
    billed = cost_usd(tether.Usage(input_tokens=200, output_tokens=460), PRICE)
    assert abs(report.total_usd - billed) < 1e-12


# -- failover ---------------------------------------------------------------------------------------


@tether.tool(needs_approval=True)
def deploy(version: int) -> str:
    """Deploy a version."""
    return f"deployed {version}"


def backup_script(request: ChatRequest) -> Reply:
    if request.messages[-1].role == "tool":
        return Reply(text="shipped")
    return Reply(tool_calls=[ToolCall("deploy", {"version": 3})])


@tether.workflow(name="ship")
async def ship(ctx: tether.Ctx) -> Any:
    result = await ctx.agent("ship v3", tools=[deploy], full=True)
    return [result.status, result.output, result.served_by]


async def test_a_failover_is_a_journaled_decision_and_a_resume_reads_it_back(tmp_path: Path) -> None:
    primary = tether.models.fake("p", script=[Reply(error="transport", message="p: connection reset")] * 3)
    backup = tether.models.fake("b", script=backup_script)
    engine = engine_for(tmp_path, primary, backup, routing=tether.ModelSpec("p:m", fallbacks=("b:m",)))
    first = await engine.run(ship, run_id="r")
    assert first.status == "suspended" and (primary.calls, backup.calls) == (3, 1)
    (decided,) = decisions(await engine.inspect("r"), "model-failover")
    assert (decided["failed"], decided["served_by"], decided["kind"]) == ("p:m", "b:m", "transport")
    assert "connection reset" in decided["why"]

    assert await engine.resolve_external("r", first.pending[0], "allow")
    done = await engine.resume("r", ship)
    assert done.value == ["ok", "shipped", "b:m"]
    assert primary.calls == 3  # the resumed turn starts on the model that serves
    assert len(decisions(await engine.inspect("r"), "model-failover")) == 1


class LosesCheckpoints:
    """A store whose agent checkpoints never land: a resume re-runs the agent from its first turn."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def put_blob(self, key: str, data: bytes, lease: Any = None) -> None:
        if "/checkpoints/" not in key:
            await self._inner.put_blob(key, data, lease)


async def test_a_failover_repeated_after_a_lost_checkpoint_reads_the_journaled_decision_back(tmp_path: Path) -> None:
    from tether.stores import open_store

    primary = tether.models.fake("p", script=[Reply(error="transport")] * 6)
    backup = tether.models.fake("b", script=backup_script)
    store = LosesCheckpoints(open_store(f"sqlite:///{tmp_path}/t.db"))
    engine = tether.Engine(models=[primary, backup], routing={"loop": tether.ModelSpec("p:m", fallbacks=("b:m",))},
                           store=store, sleep=no_sleep)
    first = await engine.run(ship, run_id="r")
    assert first.status == "suspended"
    assert await engine.resolve_external("r", first.pending[0], "allow")
    done = await engine.resume("r", ship)
    assert done.value == ["ok", "shipped", "b:m"]
    assert primary.calls == 6  # no checkpoint: the primary was asked again and failed again
    (decided,) = decisions(await engine.inspect("r"), "model-failover")  # read back, not written twice
    assert decided["served_by"] == "b:m"
