"""Ed25519 signatures over an export bundle, through `cryptography` (the `tether[audit]` extra), imported lazily."""

from __future__ import annotations

import base64
import os
from pathlib import Path
from typing import Any

from tether.contracts.errors import ConfigError

ALGORITHM = "ed25519"


def _crypto() -> Any:
    try:
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import ed25519
    except ImportError:  # pragma: no cover - the extra is in the dev environment
        raise ConfigError("signing and checking signatures needs the cryptography package: "
                          "pip install 'tether[audit]'", extra="audit") from None
    return serialization, ed25519


def _read_key(path: str | os.PathLike[str], private: bool) -> Any:
    serialization, ed25519 = _crypto()
    what = "private" if private else "public"
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read the {what} key {path}: {exc.strerror or exc}", path=str(path)) from None
    try:
        key = (serialization.load_pem_private_key(data, password=None) if private
               else serialization.load_pem_public_key(data))
    except (ValueError, TypeError) as exc:
        raise ConfigError(
            f"{path} is not an unencrypted PEM {what} key ({exc}); make one with `openssl genpkey -algorithm "
            f"ed25519 -out key.pem` and `openssl pkey -in key.pem -pubout -out key.pub`", path=str(path)
        ) from None
    wanted = ed25519.Ed25519PrivateKey if private else ed25519.Ed25519PublicKey
    if not isinstance(key, wanted):
        raise ConfigError(f"{path} holds a {type(key).__name__}, not an Ed25519 {what} key", path=str(path))
    return key


def sign(message: bytes, key_path: str | os.PathLike[str]) -> dict[str, str]:
    """The signature member of a bundle: algorithm, the signer's public key (raw, base64) and the signature."""
    serialization, _ = _crypto()
    key = _read_key(key_path, private=True)
    public = key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return {"alg": ALGORITHM, "public_key": base64.b64encode(public).decode(),
            "signature": base64.b64encode(key.sign(message)).decode()}


def signature_holds(
    message: bytes, member: dict[str, Any], public_key_path: str | os.PathLike[str] | None
) -> str | None:
    """None when `member` is a valid signature of `message` (by the key at `public_key_path` when given,
    else by the public key it names); otherwise why not."""
    serialization, ed25519 = _crypto()
    if member.get("alg") != ALGORITHM:
        return f"the signature's algorithm is {member.get('alg')!r}, not {ALGORITHM!r}"
    named, value = _canonical_b64(member.get("public_key")), _canonical_b64(member.get("signature"))
    if named is None or value is None:
        return "the signature member is not canonical base64"
    if public_key_path is not None:
        key = _read_key(public_key_path, private=False)
        raw = key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
        if raw != named:
            return f"the bundle was signed by another key than {public_key_path}"
    else:
        try:
            key = ed25519.Ed25519PublicKey.from_public_bytes(named)
        except ValueError:
            return "the signature names no valid Ed25519 public key"
    from cryptography.exceptions import InvalidSignature

    try:
        key.verify(value, message)
    except InvalidSignature:
        return "the signature does not match the bundle's bytes"
    return None


def _canonical_b64(text: Any) -> bytes | None:
    """The bytes `text` encodes, if it is the one base64 text of them; else None.

    A base64 text's last digit can carry unused bits, so several texts decode to the same bytes: a changed
    bit there would leave the signature valid, and the bundle would differ from what was signed."""
    if not isinstance(text, str):
        return None
    try:
        data = base64.b64decode(text, validate=True)
    except ValueError:
        return None
    return data if base64.b64encode(data).decode() == text else None
