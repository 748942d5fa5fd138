"""Fixtures for the adapter tests; the helpers themselves live in `wirekit`."""

from __future__ import annotations

import pytest
from wirekit import Kit


@pytest.fixture
def kit() -> type[Kit]:
    return Kit
