"""Where a soak keeps its journals: a SQLite file, a JSONL directory, or a fresh PostgreSQL schema."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from tether.contracts.protocols import JournalStore
from tether.stores import open_store

StoreKind = Literal["sqlite", "jsonl", "postgresql"]
STORE_KINDS: tuple[StoreKind, ...] = ("sqlite", "jsonl", "postgresql")
DEFAULT_PG_DSN = "postgresql://postgres@127.0.0.1:5432/test"


@dataclass(frozen=True)
class StoreTarget:
    """A store every process of one soak opens the same way (picklable, so children get it as is)."""

    kind: StoreKind
    location: str
    """The SQLite file, the JSONL directory, or the PostgreSQL DSN."""
    schema: str | None = None
    """The PostgreSQL schema of this soak (created on first use, dropped by `dispose`)."""

    @classmethod
    def fresh(cls, kind: StoreKind, workdir: Path, pg_dsn: str = DEFAULT_PG_DSN) -> StoreTarget:
        if kind == "sqlite":
            return cls(kind, str(workdir / "soak.db"))
        if kind == "jsonl":
            return cls(kind, str(workdir / "journals"))
        return cls(kind, pg_dsn, schema=f"soak_{uuid.uuid4().hex[:12]}")

    def open(self) -> JournalStore:
        if self.kind == "postgresql":
            from tether.stores.postgres import PostgresStore

            return PostgresStore(self.location, schema=self.schema or "tether", max_size=4)
        if self.kind == "sqlite":
            return open_store(f"sqlite:///{self.location}")
        return open_store(f"jsonl://{self.location}")

    def dispose(self) -> None:
        """Drop the soak's PostgreSQL schema (files go with the work directory)."""
        if self.kind != "postgresql" or self.schema is None:
            return
        import psycopg

        with psycopg.connect(self.location, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{self.schema}" CASCADE')

    def __str__(self) -> str:
        return self.kind
