"""Audit records that prove themselves: verify a run's hash chain, export a signed bundle, turn a run into a test.

See docs/audit.md.
"""

from __future__ import annotations

from tether.audit.bundle import build_bundle, verify_bundle, write_bundle
from tether.audit.cassette import CassetteReplayError, build_cassette, write_cassette
from tether.audit.verify import AuditError, Head, Verified, verify_store

__all__ = [
    "AuditError", "CassetteReplayError", "Head", "Verified", "build_bundle", "build_cassette",
    "verify_bundle", "verify_store", "write_bundle", "write_cassette",
]
