"""Export bundles: an untouched one verifies offline; a flipped byte, a wrong key or a changed total fails."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from pathlib import Path

import pytest
from audit_kit import RUN, Backend

from tether.audit import AuditError, verify_bundle
from tether.journal.canonical import canonical_json


@pytest.fixture
def keys(tmp_path: Path) -> dict[str, Path]:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ed25519

    out: dict[str, Path] = {}
    for name in ("signer", "other"):
        key = ed25519.Ed25519PrivateKey.generate()
        private = tmp_path / f"{name}.pem"
        private.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                              serialization.NoEncryption()))
        public = tmp_path / f"{name}.pub"
        public.write_bytes(key.public_key().public_bytes(serialization.Encoding.PEM,
                                                         serialization.PublicFormat.SubjectPublicKeyInfo))
        out[name], out[f"{name}.pub"] = private, public
    return out


async def test_an_untouched_signed_bundle_verifies_offline(backend: Backend, keys: dict[str, Path],
                                                          tmp_path: Path) -> None:
    path = await backend.engine.export(RUN, tmp_path / "run.bundle", sign_key=keys["signer"])
    await backend.engine.close()  # offline: no store from here on
    verified = verify_bundle(path, keys["signer.pub"])
    assert len(verified.entries) == len(backend.read()) and verified.agents == 2
    assert "signature" in verified.checks and "recorded totals" in verified.checks
    doc = json.loads(path.read_bytes())
    assert doc["prices"] == {"fake:m": {"input": 3.0, "output": 15.0, "cache_read": None, "cache_write": None,
                                        "tiers": []}}
    assert any(k.endswith("/checkpoints/2") for k in doc["blobs"]) and doc["head"]["seq"] == len(doc["entries"])


async def test_an_unsigned_bundle_verifies_and_refuses_a_key(backend: Backend, keys: dict[str, Path],
                                                            tmp_path: Path) -> None:
    path = await backend.engine.export(RUN, tmp_path / "run.bundle")
    assert "unsigned" in verify_bundle(path).checks
    with pytest.raises(AuditError, match="not signed") as err:
        verify_bundle(path, keys["signer.pub"])
    assert err.value.why == "signature"


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
async def test_a_signed_bundle_with_any_one_byte_flipped_fails(backend: Backend, keys: dict[str, Path],
                                                               tmp_path: Path) -> None:
    path = await backend.engine.export(RUN, tmp_path / "run.bundle", sign_key=keys["signer"])
    raw = path.read_bytes()
    positions = range(0, len(raw), max(1, len(raw) // 300))  # every part of the file: entries, blobs, cost, signature
    whys: set[str] = set()
    for at in positions:
        flipped = bytearray(raw)
        flipped[at] ^= 0x01
        path.write_bytes(bytes(flipped))
        with pytest.raises(AuditError) as err:
            verify_bundle(path, keys["signer.pub"])
        whys.add(err.value.why)
    assert {"checksum", "signature"} <= whys


@pytest.mark.parametrize("member", ["signature", "public_key"])
async def test_a_base64_digit_changed_in_its_unused_bits_fails(backend: Backend, keys: dict[str, Path],
                                                               tmp_path: Path, member: str) -> None:
    # The last digit of a padded base64 text carries bits no byte uses: changing one of them decodes to the
    # same bytes, so a lax decode would call such a bundle signed although its bytes are not what was signed.
    path = await backend.engine.export(RUN, tmp_path / "run.bundle", sign_key=keys["signer"])
    doc = json.loads(path.read_bytes())
    text = doc["signature"][member]
    digits = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
    last = len(text.rstrip("=")) - 1
    twin = text[:last] + digits[digits.index(text[last]) ^ 1] + text[last + 1:]
    assert base64.b64decode(twin) == base64.b64decode(text) and twin != text
    doc["signature"][member] = twin
    path.write_bytes(canonical_json(doc))
    with pytest.raises(AuditError, match="canonical base64") as err:
        verify_bundle(path, keys["signer.pub"])
    assert err.value.why == "signature"


async def test_a_byte_flipped_inside_an_entry_names_its_seq(backend: Backend, keys: dict[str, Path],
                                                            tmp_path: Path) -> None:
    path = await backend.engine.export(RUN, tmp_path / "run.bundle", sign_key=keys["signer"])
    raw = path.read_bytes()
    at = raw.index(b'\\"label\\":\\"sum\\"')  # inside the stored text of the agent "sum"'s running entry
    path.write_bytes(raw[:at + 12] + b"S" + raw[at + 13:])
    with pytest.raises(AuditError) as err:
        verify_bundle(path, keys["signer.pub"])
    assert err.value.why == "checksum" and err.value.seq == 8


async def test_the_wrong_key_fails(backend: Backend, keys: dict[str, Path], tmp_path: Path) -> None:
    path = await backend.engine.export(RUN, tmp_path / "run.bundle", sign_key=keys["signer"])
    with pytest.raises(AuditError, match="another key") as err:
        verify_bundle(path, keys["other.pub"])
    assert err.value.why == "signature"
    forged = tmp_path / "forged.bundle"  # re-signed by someone else after the fact: names its own key
    doc = json.loads(path.read_bytes())
    doc.pop("signature")
    from tether.audit.bundle import write_bundle

    write_bundle(doc, forged, keys["other"])
    verify_bundle(forged)  # consistent on its own ...
    with pytest.raises(AuditError):
        verify_bundle(forged, keys["signer.pub"])  # ... but not by the signer's key


async def test_recorded_totals_that_differ_from_the_fold_fail(backend: Backend, tmp_path: Path) -> None:
    path = await backend.engine.export(RUN, tmp_path / "run.bundle")
    doc = json.loads(path.read_bytes())
    doc["cost"]["total_usd"] = 0.0
    path.write_bytes(canonical_json(doc))
    with pytest.raises(AuditError, match="total_usd") as err:
        verify_bundle(path)
    assert err.value.why == "cost"


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
async def test_the_cli_exports_and_verifies_with_exit_codes(backend: Backend, keys: dict[str, Path],
                                                            tmp_path: Path) -> None:
    await backend.engine.close()
    bundle = tmp_path / "cli.bundle"

    def tether(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "tether.cli.main", *args], capture_output=True, text=True,
                              timeout=60)

    live = tether("verify", "--store", backend.url, RUN)
    assert live.returncode == 0 and "2 agents" in live.stdout and "USD" in live.stdout, live.stderr
    made = tether("export", RUN, "-o", str(bundle), "--sign", str(keys["signer"]), "--store", backend.url)
    assert made.returncode == 0, made.stderr
    ok = tether("verify", str(bundle), "--key", str(keys["signer.pub"]))
    assert ok.returncode == 0 and "verifies" in ok.stdout, ok.stderr
    bad = tether("verify", str(bundle), "--key", str(keys["other.pub"]))
    assert bad.returncode == 1 and "error (audit-failed)" in bad.stderr and "Traceback" not in bad.stderr
