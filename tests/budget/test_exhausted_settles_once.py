"""A settled `exhausted` run stays settled once (issue 40, item 6), and its outcome's error is typed.

A resume of a run a ceiling stopped used to append a second `settle` decision, with status `ok`, when
the body caught the refusal and returned; and when it caught it, `RunOutcome.error` was a plain dict
while an escaping refusal gave the typed `BudgetExhaustedError` the SPEC promises.
"""

from __future__ import annotations

from typing import Any

import pytest
from pydantic_core import to_jsonable_python

import tether
from tether.contracts.entries import JournalEntry
from tether.contracts.messages import ChatRequest
from tether.testing import Reply, ToolCall

PRICE = tether.Price(input=10.0, output=20.0)
"""USD per million tokens: a turn of 100 in and 50 out costs 0.002 USD."""


def script(request: ChatRequest) -> Reply:
    """Every turn is 150 tokens (0.002 USD); with tools, the loop never ends on its own."""
    if not request.tools:
        return Reply(text="done", input_tokens=100, output_tokens=50)
    turn = sum(1 for m in request.messages if m.role == "assistant")
    return Reply(tool_calls=[ToolCall("note", {"n": turn})], input_tokens=100, output_tokens=50)


@tether.tool
def note(n: int) -> str:
    """Take a note."""
    return f"noted {n}"


@tether.workflow(name="caught-mid-agent")
async def caught_mid_agent(ctx: tether.Ctx) -> Any:
    """One agent whose tool loop the ceiling stops; the body catches the refusal and returns."""
    try:
        return await ctx.agent("work until the budget runs out", tools=[note], est_cost=0.0)
    except tether.BudgetExhaustedError as exc:
        return {"stopped": str(exc.data["reason"])}


@tether.workflow(name="escaped-mid-agent")
async def escaped_mid_agent(ctx: tether.Ctx) -> Any:
    return await ctx.agent("work until the budget runs out", tools=[note], est_cost=0.0)


@tether.workflow(name="caught-at-admission")
async def caught_at_admission(ctx: tether.Ctx) -> Any:
    """One-turn agents until the ceiling refuses the next one; the body catches the refusal and returns."""
    for i in range(40):
        try:
            await ctx.agent(f"step {i}", max_output_tokens=100, est_cost=0.002)
        except tether.BudgetExhaustedError as exc:
            return {"done": i, "stopped": str(exc.data["reason"])}
    return {"done": 40}


@tether.workflow(name="escaped-at-admission")
async def escaped_at_admission(ctx: tether.Ctx) -> Any:
    for i in range(40):
        await ctx.agent(f"step {i}", max_output_tokens=100, est_cost=0.002)


TREE = tether.Containment(max_agents=100, max_concurrent=2, max_depth=2, max_tokens=1_800)
CEILINGS: dict[str, tuple[dict[str, Any], str, tether.StopReason]] = {
    "tokens": ({"containment": TREE}, "tree tokens", tether.StopReason.TOKEN_CEILING),
    "usd": ({"budget_usd": 0.025}, "run", tether.StopReason.USD_CEILING),
}
BODIES = {
    "caught-mid-agent": caught_mid_agent, "escaped-mid-agent": escaped_mid_agent,
    "caught-at-admission": caught_at_admission, "escaped-at-admission": escaped_at_admission,
}


def _settles(entries: list[JournalEntry]) -> list[JournalEntry]:
    return [e for e in entries if e.kind == "decision" and isinstance(e.value, dict)
            and e.value.get("decision") == "settle"]


def _stopped_by(entries: list[JournalEntry]) -> tether.StopReason | None:
    """The typed reason the journal holds for the stop: an agent's terminal, else an admission refusal."""
    for e in entries:
        if e.kind == "agent" and e.ref is not None and e.error is not None and e.error.get("kind") == "budget":
            return tether.StopReason.parse(e.error.get("reason"))
    refusal = next(e for e in entries if e.kind == "decision" and isinstance(e.value, dict)
                   and e.value.get("decision") == "budget-refusal")
    return tether.StopReason.parse(refusal.value["data"].get("reason"))


def _assert_typed_refusal(error: object, reason: tether.StopReason) -> None:
    assert isinstance(error, tether.BudgetExhaustedError), repr(error)
    assert error.code == "budget-exhausted"
    assert error.data.get("reason") is reason, error.data


@pytest.mark.parametrize("ceiling", sorted(CEILINGS))
@pytest.mark.parametrize("body", sorted(BODIES))
async def test_a_settled_exhausted_run_is_settled_once_and_its_resume_sends_nothing(
    engine_for: Any, ceiling: str, body: str
) -> None:
    opts, account, ceiling_reason = CEILINGS[ceiling]
    wf = BODIES[body]
    model = tether.models.fake("fake", script=script, prices={"m": PRICE})
    engine = engine_for(model)
    out = await engine.run(wf, run_id="r", **opts)
    assert out.status == "exhausted"
    entries = await engine.inspect("r")
    reason = _stopped_by(entries)
    # the ceiling itself refuses an agent, or the clamp finds no output token affordable under it
    assert reason in (ceiling_reason, tether.StopReason.OUTPUT_FLOOR), reason
    _assert_typed_refusal(out.error, reason)
    if body.startswith("caught"):
        assert out.value is not None and out.value["stopped"] == reason.value
    assert [s.value["status"] for s in _settles(entries)] == ["exhausted"]
    calls = model.calls
    assert calls > 1

    again = await engine.resume("r", wf)
    assert again.status == "exhausted" and again.value == out.value
    assert model.calls == calls and again.replay.reruns == 0  # no provider call
    assert await engine.inspect("r") == entries  # nothing appended: one settle, still `exhausted`
    _assert_typed_refusal(again.error, reason)
    assert again.cost.total_usd == out.cost.total_usd
    waited = await engine.wait("r")  # folded from the settle decision: the same typed refusal
    assert waited.status == "exhausted"
    _assert_typed_refusal(waited.error, reason)
    assert str(waited.error) == str(out.error) and waited.error.data == to_jsonable_python(out.error.data, fallback=str)
    if isinstance(out.error.data.get("error"), tether.AgentError):  # escaped from inside the agent
        assert out.error.data["error"].reason is reason
    else:
        assert out.error.data["account"] == account
    await engine.close()
