"""Runaway brakes: an agent repeating one tool call, a burst of spend, an orchestrator re-spawning a finished goal
each stop with their own typed `StopReason` and the evidence, before the ceiling; the stop is journaled, so a
resume (even after a SIGKILL mid-loop) stops at the same point without sending a turn twice."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import tether
from tether.contracts.messages import ChatRequest
from tether.testing import Reply, ToolCall

sys.path.insert(0, str(Path(__file__).parent))
from brake_kit import looping_model, looping_workflow, poll_tool

KIT = Path(__file__).with_name("brake_kit.py")


def sent(log: Path) -> list[int]:
    return [int(t) for t in log.read_text().split()] if log.exists() else []


async def test_a_looping_agent_under_a_5_usd_ceiling_stops_at_the_identical_call_limit_for_under_10_cents(
    engine_for: Any, tmp_path: Path,
) -> None:
    log = tmp_path / "requests.log"
    engine = engine_for(looping_model(str(log)))
    flow = looping_workflow(poll_tool())
    out = await engine.run(flow, run_id="loop", budget_usd=5.0, max_identical_tool_calls=2)
    assert out.status == "exhausted" and isinstance(out.error, tether.BudgetExhaustedError)
    assert out.error.data["reason"] is tether.StopReason.IDENTICAL_TOOL_CALLS
    assert out.error.data["evidence"] == {"tool": "poll", "args": {"job": 42}, "count": 3, "limit": 2,
                                          "consecutive": False}
    assert out.cost.total_usd < 0.10 and out.cost.provider_calls == 3 and sent(log) == [0, 1, 2]
    assert "max_identical_tool_calls" in out.error.message and "poll" in out.error.message

    again = await engine.resume("loop", flow)  # journaled: the stop replays, no turn is sent again
    assert again.status == "exhausted" and sent(log) == [0, 1, 2]
    assert again.error is not None and again.error.data["reason"] is tether.StopReason.IDENTICAL_TOOL_CALLS
    raised = await engine.resume("loop", flow, raise_budget_usd=10.0)  # more money does not release a brake
    assert raised.status == "exhausted" and sent(log) == [0, 1, 2]
    await engine.close()


async def test_the_old_no_progress_guard_is_the_same_typed_brake_and_on_by_default(
    engine_for: Any, tmp_path: Path,
) -> None:
    log = tmp_path / "requests.log"
    engine = engine_for(looping_model(str(log)))
    out = await engine.run(looping_workflow(poll_tool()), run_id="d", budget_usd=5.0)
    assert out.status == "exhausted" and out.error is not None and sent(log) == [0, 1, 2, 3]
    assert out.error.data["reason"] is tether.StopReason.IDENTICAL_TOOL_CALLS
    assert out.error.data["evidence"] == {"tool": "poll", "args": {"job": 42}, "count": 4, "limit": 3,
                                          "consecutive": True}
    assert out.cost.total_usd < 0.10
    await engine.close()


async def test_max_identical_tool_calls_counts_repeats_that_are_not_in_a_row(engine_for: Any, tmp_path: Path) -> None:
    log = tmp_path / "requests.log"
    engine = engine_for(looping_model(str(log), alternate=True))  # poll(42), poll(43), poll(42), ...
    out = await engine.run(looping_workflow(poll_tool()), run_id="a", budget_usd=5.0, max_identical_tool_calls=3)
    assert out.status == "exhausted" and out.error is not None and len(sent(log)) == 7
    assert out.error.data["evidence"]["args"] == {"job": 42} and out.error.data["evidence"]["count"] == 4
    await engine.close()


def test_after_a_sigkill_mid_loop_a_resume_stops_at_the_same_point_without_re_paying(tmp_path: Path) -> None:
    def child(run_id: str, mode: str, log: Path) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, str(KIT), f"sqlite:///{tmp_path}/t.db", run_id, mode, str(log)],
                              capture_output=True, text=True, timeout=60)

    clean_log, log = tmp_path / "clean.log", tmp_path / "crash.log"
    clean = child("clean", "run", clean_log)
    assert clean.returncode == 0, clean.stderr
    expected = json.loads(clean.stdout.splitlines()[-1])
    assert expected["reason"] == "identical-tool-calls" and sent(clean_log) == [0, 1, 2]

    crashed = child("crashy", "crash", log)  # killed inside the second poll, its turn checkpointed
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr
    assert sent(log) == [0, 1]
    resumed = child("crashy", "resume", log)
    assert resumed.returncode == 0, resumed.stderr
    outcome = json.loads(resumed.stdout.splitlines()[-1])
    assert sent(log) == [0, 1, 2]  # every turn sent once: nothing re-paid
    assert outcome["reason"] == expected["reason"] and outcome["evidence"] == expected["evidence"]
    assert outcome["spent"] == pytest.approx(expected["spent"]) and outcome["calls"] == expected["calls"]


class Clock:
    """The engine's clock, moved by the model: each call takes `step` seconds."""

    def __init__(self, step: float) -> None:
        self.now, self.step = 1_000_000.0, step

    def __call__(self) -> float:
        return self.now


def paced_model(clock: Clock, turns: int = 10) -> Any:
    def script(request: ChatRequest) -> Reply:
        clock.now += clock.step
        turn = sum(1 for m in request.messages if m.role == "assistant")
        if turn >= turns:
            return Reply(text="done", input_tokens=1_000, output_tokens=200)
        return Reply(tool_calls=[ToolCall("poll", {"job": turn})], input_tokens=1_000, output_tokens=200)

    return tether.models.fake("fake", script=script, prices={"m": tether.Price(input=3.0, output=15.0)})


@pytest.mark.parametrize(("step", "stops"), [(0.5, True), (20.0, False)], ids=["burst", "steady"])
async def test_the_spend_rate_brake_trips_on_a_burst_and_not_on_a_steady_run(
    engine_for: Any, step: float, stops: bool,
) -> None:
    clock = Clock(step)  # 0.006 USD a call: a burst spends it every half second, a steady run every 20 s
    engine = engine_for(paced_model(clock), clock=clock)
    out = await engine.run(looping_workflow(poll_tool()), run_id="r", budget_usd=5.0, max_spend_rate_usd_per_min=0.03)
    if not stops:
        assert out.status == "ok" and out.cost.provider_calls == 11
    else:
        assert out.status == "exhausted" and out.error is not None
        assert out.error.data["reason"] is tether.StopReason.SPEND_RATE
        evidence = out.error.data["evidence"]
        assert evidence["usd_per_min"] > 0.03 and evidence["limit_usd_per_min"] == 0.03
        assert evidence["usd_per_min"] == pytest.approx(out.cost.total_usd)  # all of it within the minute
        assert out.cost.provider_calls == 6  # six calls are 0.036 USD: the seventh turn is not sent
    await engine.close()


async def test_an_orchestrator_spawning_a_finished_goal_again_stops_on_the_repeated_spawn_brake(
    engine_for: Any,
) -> None:
    asked: list[str] = []

    def script(request: ChatRequest) -> Reply:
        first = request.messages[0].text_content
        asked.append(first)
        if first == "count the files":
            return Reply(text="12 files", input_tokens=100, output_tokens=20)
        return Reply(tool_calls=[ToolCall("spawn_agent", {"goal": "count the files"})], input_tokens=100,
                     output_tokens=20)

    engine = engine_for(tether.models.fake("fake", script=script, prices={"m": tether.Price(input=3.0, output=15.0)}))

    @tether.workflow(name="orch")
    async def orch(ctx: tether.Ctx) -> Any:
        return await ctx.orchestrate("survey the repo")

    out = await engine.run(orch, run_id="o", budget_usd=5.0, max_repeated_spawns=0)
    assert out.status == "exhausted" and out.error is not None
    assert out.error.data["reason"] is tether.StopReason.REPEATED_SPAWN
    assert out.error.data["evidence"] == {"goal": "count the files", "finished": 1, "limit": 0, "orchestrator": 1}
    assert asked == ["survey the repo", "count the files", "survey the repo"]  # no third orchestrator turn
    again = await engine.resume("o", orch)
    assert again.status == "exhausted" and len(asked) == 3
    await engine.close()


def test_stop_reasons_say_which_are_brakes() -> None:
    brakes = {r for r in tether.StopReason if r.is_brake}
    assert brakes == {tether.StopReason.IDENTICAL_TOOL_CALLS, tether.StopReason.SPEND_RATE,
                      tether.StopReason.REPEATED_SPAWN}
    assert not any(r.is_ceiling for r in brakes)


async def test_an_agent_sets_its_own_identical_call_limit(engine_for: Any, tmp_path: Path) -> None:
    log = tmp_path / "requests.log"
    engine = engine_for(looping_model(str(log), alternate=True))
    poll = poll_tool()

    @tether.workflow(name="own")
    async def own(ctx: tether.Ctx) -> Any:
        return await ctx.agent("wait for job 42", tools=[poll], max_identical_tool_calls=1)

    out = await engine.run(own, run_id="own", budget_usd=5.0, max_identical_tool_calls=10)  # the agent's wins
    assert out.error is not None and out.error.data["evidence"]["limit"] == 1 and len(sent(log)) == 3
    await engine.close()
