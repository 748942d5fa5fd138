"""`StoreSlot`: the store an engine was given (a URL or an object), opened on first use and closed with it."""

from __future__ import annotations

from tether.contracts.errors import ConfigError
from tether.contracts.protocols import JournalStore

STORE_SCHEMES = ("memory://", "jsonl://", "sqlite://", "postgresql://", "postgres://")


def checked_store(store: str | JournalStore) -> str | JournalStore:
    """`store`, or a `ConfigError` naming the schemes when it is a URL no store opens."""
    if isinstance(store, str) and not store.startswith(STORE_SCHEMES):
        raise ConfigError(f"unknown store URL {store!r}; use one of: memory://, jsonl:///dir, sqlite:///path.db, "
                          f"postgresql://user@host/db, or pass a store object", url=store)
    return store


class StoreSlot:
    """Holds the store spec until the first `get()` opens it; `use` may change the spec only before that."""

    __slots__ = ("_opened", "_spec")

    def __init__(self, spec: str | JournalStore) -> None:
        self._spec = checked_store(spec)
        self._opened: JournalStore | None = None

    @property
    def url(self) -> str | None:
        """The URL the store was given as (None when a store object was passed)."""
        return self._spec if isinstance(self._spec, str) else None

    def get(self) -> JournalStore:
        if self._opened is None:
            from tether.stores import open_store

            self._opened = open_store(self._spec)
        return self._opened

    def use(self, spec: str | JournalStore) -> None:
        if self._opened is not None:
            raise ConfigError("use_store() must be called before the engine first uses its store")
        self._spec = checked_store(spec)

    async def close(self) -> None:
        if self._opened is not None:
            opened, self._opened = self._opened, None
            await opened.close()
