"""A counterfactual model swap re-runs only that agent; the CLI's fork, preview, diff and plan-upgrade."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from forkkit import fake_model, make_engine, store_digest
from typer.testing import CliRunner

import tether
from tether.cli.main import app


@tether.workflow(name="review")
async def review(ctx: tether.Ctx, topic: str) -> list[str]:
    draft = await ctx.agent(f"draft on {topic}", label="writer")
    note = await ctx.agent(f"criticise: {draft[:30]}", label="critic")
    tail = [await ctx.agent(f"polish {i}: {draft[:30]}", label=f"polish{i}") for i in range(3)]
    return [note, *tail]


async def test_a_model_swap_reruns_only_the_swapped_agent_and_shows_both_sides(store_url: str) -> None:
    engine = make_engine(store_url, fake_model())
    try:
        assert (await engine.run(review, {"topic": "x"}, run_id="src")).status == "ok"
        preview = await engine.fork("src", "swap", review, models=["critic=fake:big"], preview=True)
    finally:
        await engine.close()
    assert [(i.label, i.reason) for i in preview.invalidated] == [("critic", "model")]
    assert [(c.label, c.model) for c in preview.new_calls] == [("critic", "fake:big")]
    fake = fake_model()
    engine = make_engine(store_url, fake)
    try:
        outcome = await engine.fork("src", "swap", review, models={"critic": "fake:big"})
        diff = await engine.diff("src", "swap")
    finally:
        await engine.close()
    assert [r.model for r in fake.requests] == ["big"]
    assert outcome.cost.by_model.keys() == {"fake:big"} and outcome.cost.reused_calls == 4
    # priced from the source's critic tokens at the swapped model's rates: within 15% of what it cost
    assert abs(preview.forecast.expected_usd - outcome.cost.total_usd) <= 0.15 * outcome.cost.total_usd
    critic = next(c for c in diff.calls if c.label == "critic")
    assert critic.a is not None and critic.b is not None and not critic.reused
    assert (critic.a.model, critic.b.model) == ("fake:m", "fake:big")
    assert [c.label for c in diff.calls if c.reused] == ["writer", "polish0", "polish1", "polish2"]


APP = '''
import os
import tether
from forkkit import PRICES, answer

fake = tether.models.fake("fake", script=answer, prices=PRICES)

@tether.workflow(name="chain")
async def chain(ctx, topic):
    last = topic
    for i in range(1, 11):
        last = await ctx.agent(f"step {i}{EDIT if i == 7 else ''}: continue from {last[:40]}", label=f"c{i}")
    return last

engine = tether.Engine(models=[fake], routing={"loop": "fake:m"}, store=os.environ["FORK_STORE"], workflows=[chain])
'''


@pytest.fixture
def cli_app(store_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    (tmp_path / "chain_v1.py").write_text("EDIT = ''\n" + APP)
    (tmp_path / "chain_v2.py").write_text("EDIT = ' (edited)'\n" + APP)
    monkeypatch.setenv("FORK_STORE", store_url)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.syspath_prepend(str(Path(__file__).parent))
    yield store_url
    for name in ("chain_v1", "chain_v2"):
        sys.modules.pop(name, None)


def _cli(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.output


def test_the_cli_previews_forks_and_diffs_an_edited_run(cli_app: str) -> None:
    code, out = _cli("run", "chain_v1:chain", "--args", '{"topic": "tides"}', "--run-id", "src", "--budget", "1",
                     "--json", "--no-progress")
    assert code == 0, out
    before = store_digest(cli_app)
    code, out = _cli("fork", "src", "--new-id", "f1", "--app", "chain_v2:engine", "--preview", "--json")
    assert code == 0, out
    preview = json.loads(out)
    assert store_digest(cli_app) == before
    assert len(preview["reused"]) == 6 and [c["label"] for c in preview["new_calls"]] == ["c7", "c8", "c9", "c10"]
    code, human = _cli("fork", "src", "--new-id", "f1", "--app", "chain_v2:engine", "--preview")
    assert code == 0 and "reused     6 calls" in human and "[prompt]" in human
    import chain_v2

    code, out = _cli("fork", "src", "--new-id", "f1", "--app", "chain_v2:engine", "--json")
    assert code == 0, out
    doc = json.loads(out)
    assert doc["status"] == "ok" and doc["cost"]["reused_calls"] == 6 and doc["cost"]["provider_calls"] == 4
    assert len(chain_v2.fake.requests) == 4
    actual = doc["cost"]["total_usd"]
    assert abs(preview["forecast"]["expected_usd"] - actual) <= 0.15 * actual
    code, out = _cli("diff", "src", "f1", "--store", cli_app, "--json")
    assert code == 0, out
    diff = json.loads(out)
    assert sum(c["reused"] for c in diff["calls"]) == 6 and diff["b_usd"] == pytest.approx(actual)
    code, out = _cli("diff", "src", "f1", "--store", cli_app)
    assert code == 0 and "reused" in out and "changed" in out


def test_plan_upgrade_forecasts_the_repay_of_a_suspended_run_and_writes_nothing(store_url: str, tmp_path: Path,
                                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    flow = '''
import os
import tether
from forkkit import PRICES, answer

fake = tether.models.fake("fake", script=answer, prices=PRICES)

@tether.workflow(name="gate")
async def gate(ctx, topic):
    a = await ctx.agent(f"plan {topic}", label="planner")
    b = await ctx.agent(f"check {topic}{EDIT}", label="checker")
    ok = await ctx.await_external("approve")
    return [a, b, ok]

engine = tether.Engine(models=[fake], routing={"loop": "fake:m"}, store=os.environ["FORK_STORE"], workflows=[gate])
'''
    (tmp_path / "gate_v1.py").write_text("EDIT = ''\n" + flow)
    (tmp_path / "gate_v2.py").write_text("EDIT = ' twice'\n" + flow)
    monkeypatch.setenv("FORK_STORE", store_url)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.syspath_prepend(str(Path(__file__).parent))
    code, out = _cli("run", "gate_v1:gate", "--args", '{"topic": "t"}', "--run-id", "g1", "--json", "--no-progress")
    assert code == 4, out  # suspended
    before = store_digest(store_url)
    code, out = _cli("plan-upgrade", "--app", "gate_v2:engine", "--json")
    assert code == 0, out
    (plan,) = json.loads(out)
    assert plan["run_id"] == "g1" and [r["label"] for r in plan["reused"]] == ["planner"]
    assert [(i["label"], i["reason"]) for i in plan["invalidated"]] == [("checker", "prompt")]
    assert plan["forecast"]["expected_usd"] > 0 and plan["pending"] == ["approve"]
    assert store_digest(store_url) == before
    import gate_v2

    assert gate_v2.fake.requests == []
