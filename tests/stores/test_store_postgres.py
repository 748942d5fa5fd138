"""PostgreSQL specifics: two stores (two pools) on one schema still give one total order per run."""

from __future__ import annotations

import asyncio

import pytest

from tether.contracts.errors import ConfigError
from tether.stores.postgres import PostgresStore
from tether.testing.store_kit import entry


async def test_two_pools_appending_concurrently_get_one_total_order(
    pg_dsn: str, pg_schema: str
) -> None:
    one = PostgresStore(pg_dsn, schema=pg_schema, max_size=4)
    two = PostgresStore(pg_dsn, schema=pg_schema, max_size=4)
    await one.load("warm-up")  # create the schema once

    async def writer(store: PostgresStore, tag: str) -> None:
        for i in range(25):
            await store.append_many("r", [entry(f"{tag}-{i}-a"), entry(f"{tag}-{i}-b")])

    await asyncio.gather(*(writer(s, t) for s, t in [(one, "p"), (two, "q"), (one, "r")]))
    loaded = await two.load("r")
    assert [e.seq for e in loaded] == list(range(1, 151))
    for n in range(0, 150, 2):  # every batch stayed contiguous
        assert loaded[n].key[:-2] == loaded[n + 1].key[:-2]
    await one.close()
    await two.close()


async def test_a_second_store_opening_the_same_schema_is_harmless(
    pg_dsn: str, pg_schema: str
) -> None:
    stores = [PostgresStore(pg_dsn, schema=pg_schema) for _ in range(3)]
    await asyncio.gather(*(s.append(f"run-{i}", entry("a")) for i, s in enumerate(stores)))
    assert [len(await stores[0].load(f"run-{i}")) for i in range(3)] == [1, 1, 1]
    for s in stores:
        await s.close()


async def test_an_unreachable_server_is_a_config_error_without_the_password() -> None:
    store = PostgresStore("postgresql://user:s3cret@127.0.0.1:1/nowhere")
    with pytest.raises(ConfigError, match="cannot connect") as caught:
        await store.load("r")
    assert "s3cret" not in str(caught.value)
    await store.close()
