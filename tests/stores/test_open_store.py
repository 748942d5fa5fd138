"""`open_store` resolves every supported URL, passes store objects through, explains bad URLs."""

from __future__ import annotations

from pathlib import Path

import pytest

from tether.contracts.errors import ConfigError
from tether.stores import DEFAULT_STORE_URL, open_store
from tether.stores.jsonl import JsonlStore
from tether.stores.memory import MemoryStore
from tether.stores.postgres import PostgresStore
from tether.stores.sqlite import SqliteStore


async def test_memory_url_warns_that_resume_is_impossible() -> None:
    with pytest.warns(UserWarning, match="cannot be resumed"):
        store = open_store("memory://")
    assert isinstance(store, MemoryStore)


async def test_jsonl_urls_absolute_and_relative(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    absolute = open_store(f"jsonl://{tmp_path}/abs")
    assert isinstance(absolute, JsonlStore) and absolute.dir == tmp_path / "abs"
    monkeypatch.chdir(tmp_path)
    relative = open_store("jsonl://rel/dir")
    assert isinstance(relative, JsonlStore) and relative.dir.resolve() == tmp_path / "rel" / "dir"
    assert (tmp_path / "rel" / "dir").is_dir()


async def test_default_sqlite_url_is_relative_to_cwd_and_creates_parents(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    store = open_store(DEFAULT_STORE_URL)
    assert isinstance(store, SqliteStore)
    assert (tmp_path / ".tether" / "tether.db").is_file()
    await store.close()


async def test_sqlite_url_with_four_slashes_is_absolute(tmp_path: Path) -> None:
    store = open_store(f"sqlite:///{tmp_path}/deep/er/t.db")
    assert isinstance(store, SqliteStore) and Path(store.path) == tmp_path / "deep/er/t.db"
    assert tmp_path.joinpath("deep/er/t.db").is_file()
    await store.close()


@pytest.mark.parametrize("url", ["postgresql://u@h:5432/db", "postgres://u@h/db"])
async def test_postgres_urls_open_lazily(url: str) -> None:
    store = open_store(url)  # no connection is made until the first call
    assert isinstance(store, PostgresStore) and store.dsn == url


async def test_a_store_object_is_returned_as_is(tmp_path: Path) -> None:
    store = JsonlStore(tmp_path)
    assert open_store(store) is store


@pytest.mark.parametrize(
    "url", ["redis://localhost", "nonsense", "jsonl://", "sqlite://", "s3://b/k"]
)
async def test_a_bad_url_is_a_config_error_listing_the_supported_forms(url: str) -> None:
    with pytest.raises(ConfigError) as caught:
        open_store(url)
    message = str(caught.value)
    for form in ("memory://", "jsonl://", "sqlite:///", "postgresql://"):
        assert form in message


async def test_a_non_store_object_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="JournalStore"):
        open_store(42)  # type: ignore[arg-type]
