"""The `appdir` fixture: a fresh working directory holding the app module (`flows.py`) and a store."""

from __future__ import annotations

import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
from clikit import BARE, FLOWS, AppDir
from typer.testing import CliRunner


def _forget(names: Sequence[str]) -> None:
    for name in names:
        sys.modules.pop(name, None)


@pytest.fixture
def appdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[AppDir]:
    store = f"sqlite:///{tmp_path}/app.db"
    (tmp_path / "flows.py").write_text(FLOWS)
    (tmp_path / "bare.py").write_text(BARE)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("FLOWS_STORE", store)
    monkeypatch.delenv("TETHER_STORE", raising=False)
    monkeypatch.syspath_prepend(str(tmp_path))
    _forget(["flows", "bare"])
    yield AppDir(tmp_path, store, CliRunner())
    _forget(["flows", "bare"])
