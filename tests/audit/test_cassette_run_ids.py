"""Exported tests carry every value from the journal as data (issue 43, item 1): a run id the run-id rule allows,
quotes and non-ASCII letters included, exports to a test file that parses, collects, runs no code from the id,
and replays green."""

from __future__ import annotations

import ast
import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest

import tether
from tether.audit.cassette import build_cassette, write_cassette
from tether.testing import Reply

FLOW = '''
import tether
from tether.testing import Reply

fake = tether.models.fake("fake", script=[Reply(text="hi", input_tokens=5, output_tokens=2)],
                          prices={"m": tether.Price(input=1.0, output=1.0)})


@tether.workflow(name="hello")
async def hello(ctx: tether.Ctx) -> str:
    return await ctx.agent("say hi")


engine = tether.Engine(models=[fake], routing={"loop": "fake:m"}, store="memory://")
'''

RUN_IDS = [
    'x"""+str(open("PWNED","w").write("1"))+"""',
    "x'''+str(open('PWNED','w').write('1'))+'''",
    "a²b",
    "ünï-cödé 運行",
    "it's a \"run\" {id} %s",
]


@pytest.mark.parametrize("run_id", RUN_IDS, ids=range(len(RUN_IDS)))
async def test_every_allowed_run_id_exports_to_a_test_that_parses_collects_and_replays(
    run_id: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "incident_flow.py").write_text(FLOW)
    monkeypatch.syspath_prepend(str(tmp_path))
    fake = tether.models.fake("fake", script=[Reply(text="hi", input_tokens=5, output_tokens=2)],
                              prices={"m": tether.Price(input=1.0, output=1.0)})

    @tether.workflow(name="hello")
    async def hello(ctx: tether.Ctx) -> str:
        return await ctx.agent("say hi")

    engine = tether.Engine(models=[fake], routing={"loop": "fake:m"}, store=f"sqlite:///{tmp_path}/runs.db")
    out = await engine.run(hello, run_id=run_id)
    assert out.status == "ok"
    doc = await build_cassette(await engine.store(), run_id, workflow="incident_flow:hello",
                               app="incident_flow:engine")
    await engine.close()
    folder = tmp_path / "incident"
    _, test = write_cassette(doc, folder)
    source = test.read_text()
    tree = ast.parse(source)  # it parses
    names = [n.name for n in tree.body if isinstance(n, ast.FunctionDef)]
    assert len(names) == 1 and names[0].isascii() and names[0].isidentifier()
    assert run_id not in source  # the id stays in the cassette, as JSON
    done = await asyncio.to_thread(
        subprocess.run, [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(test)],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
        env={**os.environ, "PYTHONPATH": f"{tmp_path}:{Path(tether.__file__).parents[1]}"},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 passed" in done.stdout
    assert not (tmp_path / "PWNED").exists() and not (folder / "PWNED").exists()
