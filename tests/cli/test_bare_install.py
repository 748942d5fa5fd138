"""The wheel on a bare install: `pip install tether` (no extras) runs `tether demo` offline, then `tether runs`.

Builds the wheel from this checkout, installs it into a fresh virtualenv (dependencies come from the
package index, as for a user), and runs the installed `tether` with no API keys and every proxy
pointed at a closed local port, so any network use would fail.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]
OFFLINE = {"HTTP_PROXY": "http://127.0.0.1:9", "HTTPS_PROXY": "http://127.0.0.1:9", "ALL_PROXY": "http://127.0.0.1:9"}


def _env() -> dict[str, str]:
    drop = ("PYTHONPATH", "ANTHROPIC_API_KEY", "OPENAI_API_KEY", "TETHER_STORE", "VIRTUAL_ENV")
    return {k: v for k, v in os.environ.items() if k not in drop}


def _run(argv: list[str | Path], cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([str(a) for a in argv], cwd=cwd, env=env or _env(), capture_output=True, text=True,
                          timeout=900)
    assert done.returncode == 0, (argv, done.stdout[-3000:], done.stderr[-3000:])
    return done


PLUGIN_TEST = '''
import tether
from pydantic import BaseModel
from tether.testing import Reply


class Verdict(BaseModel):
    score: float


async def test_scripted_structured_answer(tether_engine, fake_model):
    fake_model.push(Reply(output={"score": 9.0}))

    async def flow(ctx):
        return (await ctx.agent("Score it", output=Verdict)).score

    outcome = await tether_engine.run(flow, run_id="t")
    assert outcome.status == "ok" and outcome.value == 9.0
'''


@pytest.mark.timeout(900)  # two fresh pip installs: minutes on a busy machine, beyond the suite's 120 s default
def test_a_bare_install_runs_the_demo_offline_and_lists_its_runs(tmp_path: Path) -> None:
    dist, venv, work = tmp_path / "dist", tmp_path / "venv", tmp_path / "work"
    work.mkdir()
    _run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", dist, ROOT], ROOT)
    (wheel,) = dist.glob("tether-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert {"tether/py.typed", "tether/cli/demo_cassette.json"} <= names

    _run([sys.executable, "-m", "venv", venv], tmp_path)
    bin_ = venv / "bin"
    _run([bin_ / "pip", "install", "-q", wheel], tmp_path)
    probe = _run([bin_ / "python", "-c", "import importlib.util as u; print([u.find_spec(m) is None for m in "
                  "('anthropic', 'openai', 'pytest')])"], work)
    assert probe.stdout.strip() == "[True, True, True]"  # truly bare: no extras

    offline = {**_env(), **OFFLINE}
    demo = _run([bin_ / "tether", "demo"], work, offline)
    assert "child exited with -9" in demo.stdout and "outcome: ok" in demo.stdout, demo.stdout
    assert "the anthropic SDK is not installed" in demo.stdout
    assert "model calls made by the resume: " in demo.stdout
    assert (work / ".tether" / "tether.db").is_file()  # the one documented default store
    runs = json.loads(_run([bin_ / "tether", "runs", "--json"], work, offline).stdout)
    assert len(runs) == 1 and runs[0]["run_id"].startswith("demo-") and runs[0]["status"] == "ok"

    missing = subprocess.run([bin_ / "python", "-c", "import tether; tether.models.openai()"], cwd=work, env=offline,
                             capture_output=True, text=True, timeout=120)
    assert missing.returncode != 0
    assert "ConfigError: tether.models.openai() needs the 'openai' package" in missing.stderr
    assert "pip install 'tether[openai]'" in missing.stderr

    # The testing extra is all the pytest plugin needs: an async test runs without pytest-asyncio.
    _run([bin_ / "pip", "install", "-q", f"tether[testing] @ {wheel.as_uri()}"], tmp_path)
    (work / "test_plugin.py").write_text(textwrap.dedent(PLUGIN_TEST))
    tested = _run([bin_ / "python", "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_plugin.py"], work, offline)
    assert "1 passed" in tested.stdout
