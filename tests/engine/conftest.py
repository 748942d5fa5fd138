"""Fixtures for engine tests: an engine per store kind, and a step counter."""

from __future__ import annotations

import warnings
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

import tether

STORE_KINDS = ("memory", "jsonl", "sqlite")


def store_url(kind: str, tmp_path: Path) -> str:
    if kind == "memory":
        return "memory://"
    if kind == "jsonl":
        return f"jsonl://{tmp_path}/journal"
    return f"sqlite:///{tmp_path}/tether.db"


@pytest.fixture(params=STORE_KINDS)
def store_kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def engine(store_kind: str, tmp_path: Path) -> Iterator[tether.Engine]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield tether.Engine(store=store_url(store_kind, tmp_path))


@pytest.fixture
def sqlite_engine(tmp_path: Path) -> tether.Engine:
    return tether.Engine(store=f"sqlite:///{tmp_path}/tether.db")


@pytest.fixture
def counter() -> Counter[str]:
    return Counter()
