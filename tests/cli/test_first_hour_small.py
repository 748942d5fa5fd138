"""The small things of the first hour (issue 44, item 7): plurals, a mistyped bundle path, the export hint's
`--key`, settle-orphans on a finished run, and the unpriced-model error's ways out."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from clikit import AppDir, assert_one_line_error

from tether.engine.engine import Engine
from tether.journal.cost import CostReport, OrphanSettlement

RUN = "panel-1"


@pytest.fixture
def ran(appdir: AppDir) -> AppDir:
    result = appdir("run", "flows:panel", "--args", '{"question": "q"}', "--run-id", RUN, "--budget", "1.0")
    assert result.exit_code == 0, result.stderr
    return appdir


def test_one_call_is_one_call_not_one_calls(ran: AppDir) -> None:
    tree = ran("tree", RUN, "--store", ran.store).stdout
    assert re.search(r"#2 score .* 1 call  ", tree), tree  # the score agent made one provider call
    assert "2 calls" in tree  # the answer agent, two (a tool turn)
    assert not re.search(r"\b1 calls\b", tree)
    cost = ran("cost", RUN, "--store", ran.store).stdout
    assert "3 provider calls" in cost and "1 provider calls" not in cost


def test_verify_of_a_mistyped_bundle_says_the_file_does_not_exist(appdir: AppDir) -> None:
    line = assert_one_line_error(appdir("verify", "typo.bundle"), 1, "no bundle file typo.bundle",
                                 f"{appdir.path / 'typo.bundle'} does not exist", "--store")
    assert "no store at" not in line


def test_the_export_hint_of_a_signed_bundle_names_the_key(ran: AppDir, tmp_path: Path) -> None:
    serialization = pytest.importorskip("cryptography.hazmat.primitives.serialization")
    from cryptography.hazmat.primitives.asymmetric import ed25519

    signer = tmp_path / "signer.pem"
    signer.write_bytes(ed25519.Ed25519PrivateKey.generate().private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    out = tmp_path / "run.bundle"
    signed = ran("export", RUN, "-o", str(out), "--sign", str(signer), "--store", ran.store)
    assert signed.exit_code == 0, signed.stderr
    assert f"check it with: tether verify {out} --key " in signed.stdout
    unsigned = ran("export", RUN, "-o", str(tmp_path / "plain.bundle"), "--store", ran.store)
    assert unsigned.exit_code == 0 and "--key" not in unsigned.stdout


def test_settle_orphans_on_a_finished_run_does_not_say_resume_goes_on(
    ran: AppDir, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def settled(self: Engine, run_id: str, usd: float, reason: str = "", **_: object) -> CostReport:
        report = await self.cost(run_id)  # the run's real figures, as if a crash had cut two of its calls
        return report.model_copy(update={"settlement": OrphanSettlement(seq=99, usd=usd, old_usd=0.2, calls=2)})

    monkeypatch.setattr(Engine, "settle_orphans", settled)
    result = ran("settle-orphans", RUN, "--usd", "0.001", "--store", ran.store)
    assert result.exit_code == 0, result.stderr
    assert "settled 2 cut calls of panel-1" in result.stdout
    assert "tether resume" not in result.stdout and "The run is ok" in result.stdout


UNPRICED = '''
import tether
from tether.testing import Reply

free = tether.models.fake("fake", script=lambda request: Reply(text="hi", input_tokens=10, output_tokens=2))

@tether.workflow
async def hello(ctx):
    return await ctx.agent("hello")

engine = tether.Engine(models=[free], routing={"loop": "fake:m"}, store="sqlite:///unpriced.db", workflows=[hello])
'''


def test_the_unpriced_model_error_names_local_and_price_free(appdir: AppDir) -> None:
    (appdir.path / "unpriced.py").write_text(UNPRICED)
    result = appdir("run", "unpriced:hello", "--budget", "0.5", "--json")
    text = result.stdout + result.stderr
    assert "unpriced model under a USD ceiling" in text, text
    assert "local=True" in text and "Price.free()" in text and "--allow-unpriced" in text
