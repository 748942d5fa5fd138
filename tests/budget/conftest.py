"""Fixtures for budget tests: an engine factory on a temp SQLite store, without backoff sleeps."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import tether


async def no_sleep(_: float) -> None:
    return None


@pytest.fixture
def engine_for(tmp_path: Path) -> Callable[..., tether.Engine]:
    def make(model: Any, **kw: Any) -> tether.Engine:
        return tether.Engine(models=[model], routing={"loop": "fake:m"}, store=f"sqlite:///{tmp_path}/t.db",
                             sleep=no_sleep, **kw)

    return make
