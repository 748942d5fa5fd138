"""The pytest plugin as a user meets it: async tests with only the `testing` extra, closed engines,
structured answers on the fake model, and a cassette mode that follows the file."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

import tether
from tether.cli.demo import CASSETTE
from tether.models.anthropic_messages import AnthropicModel
from tether.testing import Reply
from tether.testing.cassette import fixture_cassette

USER_TESTS = '''
from pathlib import Path

from pydantic import BaseModel

from tether.testing import Reply

SEEN = {}


class Verdict(BaseModel):
    score: float


async def test_an_async_test_runs_with_the_fixtures(tether_engine, fake_model, tmp_path):
    fake_model.push(Reply(output={"score": 9.0}))

    async def flow(ctx):
        return (await ctx.agent("Score it", output=Verdict)).score

    outcome = await tether_engine.run(flow, run_id="t")
    assert outcome.status == "ok" and outcome.value == 9.0
    SEEN["db"] = tmp_path / "tether.db"
    assert Path(str(SEEN["db"]) + "-wal").exists()  # the store is open while the test runs


def test_the_engine_was_closed_after_the_test():
    assert not Path(str(SEEN["db"]) + "-wal").exists()  # closing the last connection removes the WAL
'''


def test_async_tests_run_with_only_the_testing_extra_and_engines_are_closed(tmp_path: Path) -> None:
    (tmp_path / "test_user.py").write_text(textwrap.dedent(USER_TESTS))
    # No pytest-asyncio, no anyio: just pytest and tether's own plugin (registered by its entry point).
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:asyncio", "-p", "no:anyio", "-p", "no:cacheprovider",
         "test_user.py"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300, env={**os.environ},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "2 passed" in done.stdout and "warning" not in done.stdout.lower()


OPT_IN_TESTS = '''
import asyncio

import pytest


@pytest.mark.tether
async def test_marked():
    await asyncio.sleep(0)


async def test_requests_a_tether_fixture(fake_model):
    await asyncio.sleep(0)


async def test_asks_for_nothing():
    await asyncio.sleep(0)
'''


def test_the_plugin_runs_only_the_async_tests_that_ask_for_it(tmp_path: Path) -> None:
    """A project that installs tether[testing] keeps its own async tests to itself: the plugin runs a test
    marked `tether` (a registered marker: --strict-markers passes) or one that requests a tether fixture."""
    (tmp_path / "test_opt_in.py").write_text(OPT_IN_TESTS)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rA", "--strict-markers", "-p", "no:asyncio", "-p", "no:anyio",
         "-p", "no:cacheprovider", "test_opt_in.py"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300, env={**os.environ},
    )
    out = done.stdout
    assert "PASSED test_opt_in.py::test_marked" in out, out
    assert "PASSED test_opt_in.py::test_requests_a_tether_fixture" in out, out
    assert "PASSED test_opt_in.py::test_asks_for_nothing" not in out, out  # left to pytest (which has no runner)
    assert "async def functions are not natively supported" in out + done.stderr, out


def test_the_plugin_reads_no_private_pytest_attribute() -> None:
    import ast

    from tether.testing import pytest_plugin

    tree = ast.parse(Path(pytest_plugin.__file__).read_text())
    private = sorted({n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)
                      and n.attr.startswith("_") and not n.attr.startswith("__")})
    assert private == []


class Verdict(BaseModel):
    score: float
    rationale: str = ""


@pytest.mark.parametrize("tier", ["tool", "native", "prompt"])
async def test_reply_output_scripts_a_structured_answer_under_every_tier(tier: Any, tmp_path: Path) -> None:
    fake = tether.models.fake("fake", script=[Reply(output=Verdict(score=4.0, rationale="ok"))],
                              structured_output=tier)
    engine = tether.Engine(models=[fake], routing={"loop": "fake:m"}, store=f"sqlite:///{tmp_path}/t.db")

    async def flow(ctx: tether.Ctx) -> float:
        verdict = await ctx.agent("Score it", output=Verdict)
        return verdict.score

    outcome = await engine.run(flow)
    assert outcome.status == "ok" and outcome.value == 4.0 and fake.calls == 1


async def test_reply_output_fits_a_non_object_schema_under_the_forced_tool(tmp_path: Path) -> None:
    fake = tether.models.fake("fake", script=[Reply(output=[1, 2, 3])])
    engine = tether.Engine(models=[fake], routing={"loop": "fake:m"}, store=f"sqlite:///{tmp_path}/t.db")
    schema = {"type": "array", "items": {"type": "integer"}}

    async def flow(ctx: tether.Ctx) -> Any:
        return await ctx.agent("List them", output=schema)

    outcome = await engine.run(flow)
    assert outcome.value == [1, 2, 3]
    assert fake.requests[0].tools[0].name == "emit_result"


def test_the_cassette_mode_follows_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    missing = tmp_path / "cassettes" / "new.json"
    with pytest.raises(tether.ConfigError) as caught:
        fixture_cassette(tether.models.anthropic, missing)
    assert str(missing) in caught.value.message and "ANTHROPIC_API_KEY" in caught.value.message
    replayed = fixture_cassette(tether.models.anthropic, CASSETTE)  # a recording exists: replay, no key needed
    assert replayed.mode == "replay" and isinstance(replayed.inner, AnthropicModel)
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test")
    assert fixture_cassette(tether.models.anthropic, missing).mode == "record"  # a key and no file: record
    assert fixture_cassette(tether.models.fake(), missing).mode == "record"  # a keyless model records too
    with pytest.raises(tether.ConfigError):
        monkeypatch.delenv("ANTHROPIC_API_KEY")
        fixture_cassette(tether.models.anthropic, CASSETTE, mode="record")  # recording needs the key


async def test_the_cassette_fixture_records_then_replays(cassette: Any, tmp_path: Path) -> None:
    fake = tether.models.fake("fake", script=[Reply(text="hello")])
    path = Path(__file__).parent / "cassettes" / "plugin-record-replay.json"
    path.unlink(missing_ok=True)
    try:
        recorder = cassette(fake, name="plugin-record-replay")
        assert recorder.mode == "record"
        engine = tether.Engine(models=[recorder], routing={"loop": "fake:m"}, store=f"sqlite:///{tmp_path}/t.db")

        async def flow(ctx: tether.Ctx) -> str:
            return await ctx.agent("Say hello")

        assert (await engine.run(flow)).value == "hello"
        player = cassette(tether.models.fake(), name="plugin-record-replay")
        assert player.mode == "replay"
        again = tether.Engine(models=[player], routing={"loop": "fake:m"}, store=f"sqlite:///{tmp_path}/t.db")
        assert (await again.run(flow)).value == "hello" and player.replayed == 1
    finally:
        path.unlink(missing_ok=True)
        if path.parent.exists() and not any(path.parent.iterdir()):
            path.parent.rmdir()


PRICED_TESTS = '''
import pytest

from tether.testing import FIXTURE_PRICE, Reply


async def flow(ctx):
    first = await ctx.agent("Draft it")
    return first + await ctx.agent("Polish it")


def test_the_fixture_price_is_the_documented_one():
    assert (FIXTURE_PRICE.input, FIXTURE_PRICE.output) == (1.0, 2.0)


async def test_a_budget_runs_on_the_fixture_price(tether_engine, fake_model):
    fake_model.push(Reply(text="a", input_tokens=1000, output_tokens=500),
                    Reply(text="b", input_tokens=1000, output_tokens=500))
    outcome = await tether_engine.run(flow, run_id="priced", budget_usd=1.0)
    assert outcome.status == "ok", outcome.error
    assert outcome.cost.total_usd == pytest.approx(0.004)  # 2 x (1000 x 1.0 + 500 x 2.0) / 1e6


async def test_a_ceiling_stops_a_run_on_the_fixture_price(tether_engine, fake_model):
    fake_model.push(Reply(text="a", input_tokens=1000, output_tokens=500),
                    Reply(text="b", input_tokens=1000, output_tokens=500))
    outcome = await tether_engine.run(flow, run_id="capped", budget_usd=0.003)
    assert outcome.status == "exhausted", outcome.error
    assert outcome.cost.total_usd <= 0.003 and fake_model.calls == 1
'''

CUSTOM_PRICE_TESTS = '''
import pytest

from tether import Price
from tether.testing import FakeModel, Reply


@pytest.fixture
def fake_model():
    return FakeModel("fake", prices={"m": Price(input=3.0, output=15.0)})


async def test_an_overridden_fake_model_sets_the_price(tether_engine, fake_model):
    fake_model.push(Reply(text="a", input_tokens=1000, output_tokens=500))

    async def flow(ctx):
        return await ctx.agent("Draft it")

    outcome = await tether_engine.run(flow, run_id="custom", budget_usd=1.0)
    assert outcome.status == "ok", outcome.error
    assert outcome.cost.total_usd == pytest.approx(0.0105)  # (1000 x 3.0 + 500 x 15.0) / 1e6
'''


def test_a_budget_in_a_users_test_runs_on_the_fixtures_documented_price(tmp_path: Path) -> None:
    """`budget_usd=` with the `tether_engine` / `fake_model` fixtures: priced at `FIXTURE_PRICE`, a ceiling
    stops the run, and a `fake_model` fixture of the user's own sets another price (docs/testing.md)."""
    (tmp_path / "test_priced.py").write_text(PRICED_TESTS)
    (tmp_path / "test_custom_price.py").write_text(CUSTOM_PRICE_TESTS)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rA", "-p", "no:asyncio", "-p", "no:anyio", "-p", "no:cacheprovider",
         "test_priced.py", "test_custom_price.py"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300, env={**os.environ},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "4 passed" in done.stdout, done.stdout
