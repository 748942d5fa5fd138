"""Journal stores and `open_store`, which turns a store URL into one.

Backends are imported when their URL is opened, so PostgreSQL support never loads psycopg unless a
`postgresql://` URL is used.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from tether.contracts.errors import ConfigError

if TYPE_CHECKING:
    from tether.contracts.protocols import JournalStore
    from tether.stores.jsonl import JsonlStore
    from tether.stores.memory import MemoryStore
    from tether.stores.postgres import PostgresStore
    from tether.stores.sqlite import SqliteStore

DEFAULT_STORE_URL = "sqlite:///.tether/tether.db"

SUPPORTED_FORMS = (
    "memory:// (this process only, no resume)",
    "jsonl:///absolute/dir or jsonl://relative/dir",
    "sqlite:///relative/path.db (relative to the working directory) or sqlite:////absolute/path.db",
    "postgresql://user@host:port/db (or postgres://…)",
)

__all__ = [
    "DEFAULT_STORE_URL",
    "SUPPORTED_FORMS",
    "JsonlStore",
    "MemoryStore",
    "PostgresStore",
    "SqliteStore",
    "open_store",
]


def _bad(url: str, why: str) -> ConfigError:
    forms = "; ".join(SUPPORTED_FORMS)
    return ConfigError(
        f"store URL {url!r} {why}. Supported forms: {forms}; or pass a JournalStore object.",
        url=url,
        supported=list(SUPPORTED_FORMS),
    )


def _sqlite_path(url: str, rest: str) -> str:
    # SQLAlchemy's convention: three slashes then a relative path, four for an absolute one.
    path = rest[1:] if rest.startswith("/") else rest
    if not path:
        raise _bad(url, "names no database file")
    if path != ":memory:":
        Path(path).parent.mkdir(parents=True, exist_ok=True)
    return path


def open_store(target: str | JournalStore) -> JournalStore:
    """The store a URL names (see `SUPPORTED_FORMS`); a store object is returned as is."""
    from tether.contracts.protocols import JournalStore

    if not isinstance(target, str):
        if isinstance(target, JournalStore):
            return target
        raise ConfigError(
            f"store must be a URL string or a JournalStore object, got {type(target).__name__}. "
            f"Supported forms: {'; '.join(SUPPORTED_FORMS)}.",
        )
    scheme, sep, rest = target.partition("://")
    scheme = scheme.lower()
    if not sep:
        raise _bad(target, "has no scheme")
    if scheme == "memory":
        from tether.stores.memory import MemoryStore

        return MemoryStore()
    if scheme == "jsonl":
        if not rest.strip("/"):
            raise _bad(target, "names no directory")
        from tether.stores.jsonl import JsonlStore

        return JsonlStore(rest)
    if scheme == "sqlite":
        from tether.stores.sqlite import SqliteStore

        return SqliteStore(_sqlite_path(target, rest))
    if scheme in ("postgresql", "postgres"):
        from tether.stores.postgres import PostgresStore

        return PostgresStore(target)
    raise _bad(target, f"has an unknown scheme {scheme!r}")


def __getattr__(name: str) -> object:
    """Lazy access to the store classes (`tether.stores.SqliteStore`) without importing them all."""
    modules = {
        "MemoryStore": "memory",
        "JsonlStore": "jsonl",
        "SqliteStore": "sqlite",
        "PostgresStore": "postgres",
    }
    if name in modules:
        import importlib

        return getattr(importlib.import_module(f"tether.stores.{modules[name]}"), name)
    raise AttributeError(f"module 'tether.stores' has no attribute {name!r}")
