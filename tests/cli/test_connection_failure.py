"""`tether run` against a provider that is down, under a tiny budget: the connection failure is what it reports
(issue 40, item 2), never a budget stop, and no provider call is counted: nothing was sent."""

from __future__ import annotations

import socket
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tether.cli.main import app

DOWN = '''
import os
import tether


async def no_sleep(_: float) -> None:
    return None


@tether.workflow
async def hi(ctx: tether.Ctx) -> object:
    return await ctx.agent("hi")


model = tether.models.openai_compatible("loop", os.environ["DOWN_URL"], api_key="sk-test-DOWN-KEY-123456")
engine = tether.Engine(models=[model], routing={"loop": "loop:m"},
                       prices={"loop:m": tether.Price(input=1.0, output=100.0)},
                       store=os.environ["DOWN_STORE"], workflows=[hi], sleep=no_sleep)
'''


def refused_url() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


def test_a_provider_that_is_down_is_reported_as_down_under_a_tiny_budget(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "down.py").write_text(DOWN)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("DOWN_URL", refused_url())
    monkeypatch.setenv("DOWN_STORE", f"sqlite:///{tmp_path}/down.db")
    monkeypatch.delitem(sys.modules, "down", raising=False)
    result = CliRunner().invoke(app, ["run", "down:hi", "--budget", "0.001", "--run-id", "d"])
    out = result.stdout
    assert "run d: error" in out and "connection failed (http://127.0.0.1:" in out, out
    assert "output floor" not in out and "budget-exhausted" not in out
    assert "0.00 USD of 0.001 USD ceiling, 0 provider calls" in out
