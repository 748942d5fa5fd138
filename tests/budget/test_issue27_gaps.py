"""Follow-ups of issue 27 found by its audit: free models in the cost report and under a zero ceiling, and a
token-ceiling stop that speaks of tokens, not USD; the SIGKILLed race whose admission estimate is far below
what an agent costs (the crash the issue reported: 0.98-1.27 USD on a 0.50 ceiling)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from test_local_pricing import REF, local, ollama
from test_race_kills import CEILING_USD, soak

import tether
from tether.testing import Reply, ToolCall


def summary(body: dict[str, Any]) -> Reply:
    return Reply(text="A summary.", input_tokens=1_200, output_tokens=300)


async def test_a_free_model_is_in_the_cost_reports_by_model_at_zero_live_and_folded(tmp_path: Path) -> None:
    engine = tether.Engine(models=[ollama(summary, [], local=True)], routing={"loop": REF},
                           store=f"sqlite:///{tmp_path}/t.db")
    out = await engine.run(local, {"tools": False}, run_id="free", budget_usd=0.01)
    assert out.status == "ok"
    assert out.cost.by_model == {REF: 0.0}
    assert (await engine.cost("free")).by_model == {REF: 0.0}  # the fold of the journal agrees
    await engine.close()


async def test_a_zero_usd_ceiling_admits_free_models_and_settles_ok(tmp_path: Path) -> None:
    bodies: list[dict[str, Any]] = []
    engine = tether.Engine(models=[ollama(summary, bodies, local=True)], routing={"loop": REF},
                           store=f"sqlite:///{tmp_path}/t.db")
    out = await engine.run(local, {"tools": False}, run_id="zero", budget_usd=0.0)
    assert out.status == "ok" and out.value == "A summary.", out.error
    assert out.error is None and out.cost.total_usd == 0.0 and len(bodies) == 1
    await engine.close()


async def test_a_zero_usd_ceiling_still_refuses_a_paid_model_before_the_wire(tmp_path: Path) -> None:
    bodies: list[dict[str, Any]] = []
    paid = tether.Price(input=1.0, output=2.0)
    engine = tether.Engine(models=[ollama(summary, bodies)], routing={"loop": REF}, prices={REF: paid},
                           store=f"sqlite:///{tmp_path}/t.db")
    out = await engine.run(local, {"tools": False}, run_id="paid", budget_usd=0.0)
    assert out.status == "exhausted" and bodies == []
    assert isinstance(out.error, tether.BudgetExhaustedError)
    await engine.close()


async def test_a_token_ceiling_stop_speaks_of_tokens_not_usd(tmp_path: Path) -> None:
    def forever(body: dict[str, Any]) -> Reply:  # a model that never stops calling its tool
        turn = sum(1 for m in body["messages"] if m["role"] == "tool")
        return Reply(tool_calls=[ToolCall("lookup", {"topic": f"part {turn}"})], input_tokens=150, output_tokens=50)

    engine = tether.Engine(models=[ollama(forever, [], local=True)], routing={"loop": REF},
                           store=f"sqlite:///{tmp_path}/t.db")
    tree = tether.Containment(max_agents=4, max_concurrent=2, max_depth=2, max_tokens=500)
    out = await engine.run(local, {"tools": True}, run_id="tokens", budget_usd=0.01, containment=tree)
    assert out.status == "exhausted" and out.error is not None
    message = str(out.error)
    assert "token" in message and "max_tokens" in message, message
    assert "USD" not in message and "--raise-budget" not in message, message
    await engine.close()


def test_a_killed_race_admitting_on_a_low_estimate_never_reports_more_than_the_hard_ceiling(tmp_path: Path) -> None:
    # est_cost 0.001 against an agent's 0.018: admission lets every agent of a slot in, so only the worst case
    # each dispatch holds before it leaves keeps a crash's orphans (charged at that worst case) inside 0.50.
    proc, verdicts = soak(tmp_path, "--scenarios", "race-low-estimate", "--kills", "8", "--seed", "17")
    assert sum(v["kills"] for v in verdicts) >= 8, proc.stdout
    for v in verdicts:
        assert v["overshoot"] == "hard" and v["ceiling_usd"] == CEILING_USD
        assert v["reported_usd"] <= CEILING_USD + 1e-9, f"{v['run_id']}: reported {v['reported_usd']:.4f} USD"
        assert v["billed_usd"] <= CEILING_USD + 1e-9, f"{v['run_id']}: billed {v['billed_usd']:.4f} USD"
    assert max(v["reported_usd"] for v in verdicts) >= 0.45  # the ceiling, not a refusal, stopped each race
    assert [x for v in verdicts for x in v["violations"]] == [], proc.stdout  # g, and i: billed <= reported
    assert proc.returncode == 0, proc.stdout
