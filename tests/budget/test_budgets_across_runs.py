"""Budgets across runs (`tether.Budget`): one scope's USD shared by every run on a PostgreSQL store."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

import tether
from tether.contracts.entries import Lease, LeaseOwner
from tether.stores.postgres import PostgresStore
from tether.testing import Reply

PRICE = tether.Price(input=1.0, output=1000.0)  # 20 output tokens: 0.02 USD a call, plus 0.0001 of input
CALL_USD = 100 * 1.0 / 1e6 + 20 * 1000.0 / 1e6


def why(outcome: tether.RunOutcome) -> str:
    """The refusal an exhausted outcome carries (the exception in process, its dict once read back)."""
    error = outcome.error
    return str(error["message"]) if isinstance(error, dict) else str(error)


def _engine(store: PostgresStore | str, *, output_tokens: int = 20) -> tether.Engine:
    model = tether.models.fake("fake", script=lambda _r: Reply(text="ok", input_tokens=100, output_tokens=output_tokens),
                               prices={"m": PRICE})
    return tether.Engine(models=[model], routing={"loop": "fake:m"}, store=store)


@tether.workflow(name="two_calls")
async def two_calls(ctx: tether.Ctx, tag: str) -> list[str]:
    return [await ctx.agent(f"{tag} {i}", max_output_tokens=30) for i in range(2)]


@pytest.fixture
async def store(pg_dsn: str, pg_schema: str) -> PostgresStore:
    s = PostgresStore(f"{pg_dsn}?schema={pg_schema}")
    yield s  # type: ignore[misc]
    await s.close()


def test_a_budget_checks_what_it_is_given() -> None:
    with pytest.raises(tether.ConfigError, match=r"Budget\.window"):
        tether.Budget(usd=1.0, window="week", scope="tenant:acme")  # type: ignore[arg-type]
    with pytest.raises(tether.ConfigError, match=r"Budget\.usd"):
        tether.Budget(usd=-1, scope="tenant:acme")
    assert tether.Budget(usd=5, window="day", scope="t").window_start(86_400 * 3 + 5) == 86_400 * 3


async def test_budgets_on_a_store_without_a_ledger_are_a_config_error_before_anything_is_written(
    tmp_path: Path,
) -> None:
    engine = _engine(f"sqlite:///{tmp_path / 'runs.db'}")
    with pytest.raises(tether.ConfigError, match="use a PostgreSQL store"):
        await engine.run(two_calls, {"tag": "x"}, run_id="r1", budgets=[tether.Budget(usd=1.0, scope="t")])
    assert await engine.runs() == []
    await engine.close()


async def test_runs_sharing_a_scope_stop_at_its_limit_and_say_why(store: PostgresStore) -> None:
    engine = _engine(store)
    budget = tether.Budget(usd=0.10, scope="tenant:acme")
    outcomes = [await engine.run(two_calls, {"tag": f"r{i}"}, run_id=f"r{i}", budgets=[budget]) for i in range(4)]
    charged = sum(u.charged_usd for u in await store.budget_usage("tenant:acme"))
    billed = sum(o.cost.total_usd for o in outcomes)
    assert billed <= 0.10 + 1e-9
    assert charged == pytest.approx(billed)
    assert [o.status for o in outcomes[:2]] == ["ok", "ok"]  # 4 calls of 0.0201 fit in 0.10, the fifth does not
    stopped = outcomes[2]
    assert stopped.status == "exhausted"
    assert "scope 'tenant:acme'" in why(stopped) and "0.10 USD" in why(stopped)
    assert outcomes[3].status == "exhausted" and outcomes[3].cost.provider_calls == 0
    (usage,) = await store.budget_usage("tenant:acme")
    assert usage.held_usd == pytest.approx(0.0)
    await engine.close()


async def test_the_budgets_are_durable_and_a_resume_keeps_them(store: PostgresStore) -> None:
    engine = _engine(store)
    budget = tether.Budget(usd=1.0, window="day", scope="tenant:b")
    await engine.run(two_calls, {"tag": "a"}, run_id="d1", budgets=[budget])
    again = await engine.resume("d1", two_calls)
    assert again.status == "ok"
    with pytest.raises(tether.ConfigError, match="budgets"):
        await engine.resume("d1", two_calls, budgets=[tether.Budget(usd=2.0, window="day", scope="tenant:b")])
    await engine.close()


async def test_calls_racing_for_the_last_room_never_pass_the_limit(store: PostgresStore) -> None:
    engine = _engine(store)
    budget = tether.Budget(usd=0.25, scope="race")
    outcomes = await asyncio.gather(*[
        engine.run(two_calls, {"tag": f"q{i}"}, run_id=f"q{i}", budgets=[budget]) for i in range(12)
    ])
    billed = sum(o.cost.total_usd for o in outcomes)
    assert billed <= 0.25 + 1e-9
    assert billed >= 0.25 - 2 * 0.031  # calls wait for holds to settle instead of being refused early
    assert all(o.status in ("ok", "exhausted") for o in outcomes)
    assert all("scope 'race'" in why(o) for o in outcomes if o.status == "exhausted")
    await engine.close()


async def test_a_hold_whose_lease_died_is_charged_at_its_worst_case_and_blocks_nobody(store: PostgresStore) -> None:
    owner = LeaseOwner(owner_id="dead", host="elsewhere", pid=1, started_at=0)
    lease = await store.acquire("ghost", owner, 0.2)
    budget = tether.Budget(usd=0.05, scope="crash")
    answer = await store.budget_reserve("ghost", lease, [budget], 0.03, "a call")
    assert answer.outcome == "ok"
    assert (await store.budget_reserve("other", None, [budget], 0.03, "a call")).outcome == "wait"
    await asyncio.sleep(0.3)  # the ghost's lease expires: its hold is charged, never held for good
    assert (await store.budget_reserve("other", None, [budget], 0.03, "a call")).outcome == "refused"
    (usage,) = await store.budget_usage("crash")
    assert (usage.charged_usd, usage.held_usd) == (pytest.approx(0.03), pytest.approx(0.0))
    await store.budget_settle([(answer.ids[0], 0.01)])  # its call did report after all: charged what it cost
    (usage,) = await store.budget_usage("crash")
    assert usage.charged_usd == pytest.approx(0.01)
    assert (await store.budget_reserve("other", None, [budget], 0.03, "a call")).outcome == "ok"
    assert isinstance(lease, Lease)
