"""A `schema-mismatch` says why the output failed validation where people read it: the line `tether run`
prints and the run's settled error the inspector's Outcome shows (issue 42, item 5)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from starlette.testclient import TestClient
from typer.testing import CliRunner

import tether
from tether.cli.main import app
from tether.server import create_app

PROSE = '''
import os
import tether
from pydantic import BaseModel
from tether.testing import Reply


class City(BaseModel):
    city: str
    country: str


@tether.workflow
async def where(ctx: tether.Ctx) -> object:
    return await ctx.agent("Where is the Eiffel Tower?", output=City)


model = tether.models.fake("fake", script=[Reply(text="It is in Paris, of course.")] * 3, structured_output="prompt")
engine = tether.Engine(models=[model], routing={"loop": "fake:m"}, store=os.environ["PROSE_STORE"], workflows=[where])
'''
REASON = "the reply holds no JSON value"


@pytest.fixture
def prose(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "prose.py").write_text(PROSE)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PROSE_STORE", f"sqlite:///{tmp_path}/prose.db")
    monkeypatch.delitem(sys.modules, "prose", raising=False)
    return tmp_path


def test_tether_run_prints_why_the_output_failed_validation(prose: Path) -> None:
    result = CliRunner().invoke(app, ["run", "prose:where", "--run-id", "v"])
    out = result.stdout
    assert result.exit_code != 0 and "run v: error" in out, out
    assert f"output failed validation after 2 re-prompts: {REASON}" in out, out


def test_the_outcome_the_inspector_shows_carries_the_reason(prose: Path) -> None:
    CliRunner().invoke(app, ["run", "prose:where", "--run-id", "v"])
    engine = tether.Engine(store=f"sqlite:///{prose}/prose.db")
    with TestClient(create_app(engine, mode="store", owns_engine=True), base_url="http://localhost",
                    headers={"X-Tether-Request": "1"}) as client:
        outcome = client.get("/api/runs/v").json()["outcome"]  # the Outcome card renders `error.message`
    assert outcome["status"] == "error"
    assert outcome["error"]["message"].endswith(f"output failed validation after 2 re-prompts: {REASON}")
