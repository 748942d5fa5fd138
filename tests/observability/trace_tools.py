"""A tool the OTel tests run in a subprocess executor (importable by module:qualname)."""

from __future__ import annotations

import os


def traceparent(label: str) -> str:
    """The W3C trace context the tool's process was started with."""
    return os.environ.get("TRACEPARENT", "")
