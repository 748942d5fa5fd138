"""The money promises at their edges (issue: crashes, racing resumers, ceilings, unpriced models).

One test (or a few) per edge, each through the public API; crash edges kill a real child process.
"""

from __future__ import annotations

import asyncio
import logging
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

import tether
from tether.contracts.entries import JournalEntry, Lease, RunMeta
from tether.stores import open_store
from tether.testing import Reply, ToolCall

CHILD = Path(__file__).with_name("money_crash_child.py")
PRICE = tether.Price(input=10.0, output=20.0)  # a 1,000-in / 500-out turn = 0.02 USD


async def no_sleep(_: float) -> None:
    return None


def priced(script: Any = None, **caps: Any) -> Any:
    reply = Reply(text="ok", input_tokens=1_000, output_tokens=500)
    return tether.models.fake("fake", script=script or (lambda r: reply), prices={"m": PRICE}, **caps)


def engine_on(url: str, model: Any, **kw: Any) -> tether.Engine:
    return tether.Engine(models=[model], routing={"loop": "fake:m"}, store=url, sleep=no_sleep, **kw)


def settles(entries: list[JournalEntry]) -> list[str]:
    return [e.value["status"] for e in entries
            if e.kind == "decision" and isinstance(e.value, dict) and e.value.get("decision") == "settle"]


# -- 1. durable run options ----------------------------------------------------------------------

def test_a_run_killed_before_its_first_effect_resumes_under_the_ceiling_it_started_with(tmp_path: Path) -> None:
    url, log = f"sqlite:///{tmp_path}/t.db", tmp_path / "requests.log"
    killed = subprocess.run([sys.executable, str(CHILD), url, "r", "after-start", str(log)],
                            capture_output=True, text=True, timeout=60)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert not log.exists()  # no effect ran before the kill

    async def resume() -> tether.RunOutcome:
        sys.path.insert(0, str(CHILD.parent))
        from money_crash_child import engine as child_engine

        eng = child_engine(url, str(log), 0.0)
        try:
            return await eng.resume("r")  # no budget given: the stored one holds
        finally:
            await eng.close()

    out = asyncio.run(resume())
    assert out.status == "exhausted"
    assert out.cost.total_usd <= 0.10 + 1e-9  # 5 agents, not 40 (0.80 USD)
    assert len(log.read_text().split("\n")) - 1 == 5

    async def meta() -> RunMeta | None:
        store = open_store(url)
        try:
            return await store.get_meta("r")
        finally:
            await store.close()

    stored = asyncio.run(meta())
    assert stored is not None and stored.budget_usd == 0.10  # never overwritten with null


async def test_resuming_or_reading_an_unknown_run_raises_run_not_found(tmp_path: Path) -> None:
    engine = engine_on(f"sqlite:///{tmp_path}/t.db", priced())

    @tether.workflow(name="w")
    async def w(ctx: tether.Ctx) -> str:
        return str(await ctx.agent("hi"))

    with pytest.raises(tether.RunNotFoundError, match="no run 'nope'"):
        await engine.resume("nope", w)
    with pytest.raises(tether.RunNotFoundError):
        await engine.resume("nope", w, dry_run=True)
    for read in (engine.inspect, engine.cost, engine.agent_events, engine.agent_tree, engine.effect_ledger):
        with pytest.raises(tether.RunNotFoundError):
            await read("nope")
    assert issubclass(tether.RunNotFoundError, tether.TetherError)
    assert await engine.runs() == []  # nothing was started by any of it
    await engine.close()


async def test_a_resume_can_neither_drop_nor_change_the_stored_ceiling(tmp_path: Path) -> None:
    engine = engine_on(f"sqlite:///{tmp_path}/t.db", priced())

    @tether.workflow(name="w")
    async def w(ctx: tether.Ctx) -> Any:
        return await ctx.await_external("go")

    first = await engine.run(w, run_id="r", budget_usd=0.5, strict_pricing=True)
    assert first.status == "suspended"
    with pytest.raises(tether.ConfigError, match=re.escape("budget_usd=0.5")):
        await engine.resume("r", w, budget_usd=5.0)
    with pytest.raises(tether.ConfigError, match="strict_pricing=True"):
        await engine.run(w, run_id="r", strict_pricing=False)
    genesis = (await engine.inspect("r"))[0]
    assert genesis.value["budget_usd"] == 0.5 and genesis.value["strict_pricing"] is True
    await engine.close()


# -- 2. lease first --------------------------------------------------------------------------------

class SlowLoad:
    """A real store whose `load` pauses after reading: the window a stale resumer used to act in."""

    def __init__(self, inner: Any, pause: float) -> None:
        self._inner = inner
        self._pause = pause

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def load(self, run_id: str) -> list[JournalEntry]:
        entries = await self._inner.load(run_id)
        await asyncio.sleep(self._pause)
        return list(entries)


async def test_two_resumers_one_drives_and_the_other_is_refused_at_once(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/t.db"
    calls: list[str] = []

    def script(request: Any) -> Reply:
        calls.append(request.messages[-1].text_content)
        return Reply(text="done", input_tokens=1_000, output_tokens=500)

    @tether.workflow(name="w")
    async def w(ctx: tether.Ctx) -> Any:
        await ctx.await_external("go")
        return await ctx.agent("pay once")

    setup = engine_on(url, priced(script))
    assert (await setup.run(w, run_id="r", budget_usd=1.0)).status == "suspended"
    assert await setup.resolve_external("r", "go", True)
    await setup.close()

    slow = tether.Engine(models=[priced(script)], routing={"loop": "fake:m"}, store=SlowLoad(open_store(url), 0.5))
    fast = engine_on(url, priced(script))
    first = asyncio.create_task(slow.resume("r", w))
    await asyncio.sleep(0.1)  # `slow` holds the lease and is reading
    started = time.monotonic()
    with pytest.raises(tether.LeaseHeldError):
        await fast.resume("r", w)
    assert time.monotonic() - started < 0.4  # refused at once, not after the other finished
    out = await first
    assert out.status == "ok" and calls == ["pay once"]
    entries = await fast.inspect("r")
    terminals = [e for e in entries if e.kind == "agent" and e.ref is not None]
    assert len(terminals) == 1 and settles(entries) == ["suspended", "ok"]
    await slow.close()
    await fast.close()


async def test_an_append_from_a_stale_view_of_the_journal_is_rejected(tmp_path: Path) -> None:
    """Fencing by seq: a writer whose journal view is not the head cannot append after it."""
    store = open_store(f"sqlite:///{tmp_path}/t.db")
    await store.append("r", JournalEntry(kind="step", key="a", status="running"))
    stale_next = JournalEntry(seq=1, kind="step", key="b", status="running")  # it believed the journal empty
    with pytest.raises(tether.JournalOrderViolation):
        await store.append("r", stale_next)
    assert [e.key for e in await store.load("r")] == ["a"]
    await store.close()


# -- 3. crash-safe billed spend --------------------------------------------------------------------

def test_a_call_in_flight_at_a_kill_is_charged_at_its_worst_case_on_resume(tmp_path: Path) -> None:
    url, log = f"sqlite:///{tmp_path}/t.db", tmp_path / "requests.log"
    proc = subprocess.Popen([sys.executable, str(CHILD), url, "r", "in-flight", str(log)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 30
    while not (log.exists() and log.read_text()) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert log.read_text() == "task 0\n", "the first call is in flight"
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)

    async def check() -> None:
        store = open_store(url)
        dispatch = next(e for e in await store.load("r") if e.label == "dispatch")
        worst = dispatch.value["worst_usd"]
        assert worst > 0 and dispatch.value["max_output"] > 0
        sys.path.insert(0, str(CHILD.parent))
        from money_crash_child import engine as child_engine

        before = await child_engine(url, str(log), 0.0).cost("r")
        assert before.orphaned_usd == pytest.approx(worst) and before.total_usd == pytest.approx(worst)
        assert before.approximate
        eng = child_engine(url, str(log), 0.0)
        out = await eng.resume("r")
        await eng.close()
        # the billed-but-unrecorded call counts against the ceiling: fewer agents fit after it
        assert out.cost.orphaned_usd == pytest.approx(worst)
        assert out.cost.total_usd <= 0.10 + 1e-9
        paid = log.read_text().split("\n")[:-1]
        assert paid[0] == "task 0" and paid[1] == "task 0"  # the cut call re-sent once, by the redispatch
        assert len(paid) - 1 == int((0.10 - worst) // 0.02 + 1e-9)
        await store.close()

    asyncio.run(check())


def kill_when_asked(url: str, log: Path, mode: str, line: str) -> None:
    """Run the child in `mode` and SIGKILL it once LOG shows `line` (the hanging call is in flight)."""
    proc = subprocess.Popen([sys.executable, str(CHILD), url, "r", mode, str(log)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 30
    while not (log.exists() and line in log.read_text().splitlines()) and time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)


def test_calls_cut_off_by_two_kills_are_both_charged_when_the_agent_finally_settles(tmp_path: Path) -> None:
    """A later segment's turn must not settle, and a later checkpoint must not forget, an earlier kill's call."""
    url, log = f"sqlite:///{tmp_path}/t.db", tmp_path / "requests.log"
    kill_when_asked(url, log, "tool-loop:0", "turn 0")  # cut off: call 1 (turn 0)
    kill_when_asked(url, log, "tool-loop:1", "turn 1")  # turn 0 re-sent and checkpointed; cut off: call 3
    sys.path.insert(0, str(CHILD.parent))
    from money_crash_child import engine as child_engine

    async def finish() -> tuple[tether.RunOutcome, list[JournalEntry]]:
        eng = child_engine(url, str(log), 0.0, hang_turn=-1)
        try:
            return await eng.resume("r"), await eng.inspect("r")
        finally:
            await eng.close()

    out, entries = asyncio.run(finish())
    assert out.status == "ok" and out.value == "done"
    worst = {d.value["call"]: d.value["worst_usd"] for d in entries if d.label == "dispatch"}
    assert log.read_text().split() == ["turn", "0", "turn", "0", "turn", "1", "turn", "1", "turn", "2", "turn", "3"]
    assert out.cost.orphaned_usd == pytest.approx(worst[1] + worst[3])  # both cut-off calls, at their worst case
    billed_at_worst = 4 * 0.02 + worst[1] + worst[3]  # four completed calls, two cut off
    assert out.cost.total_usd == pytest.approx(billed_at_worst)


# -- 4. `exhausted` means a ceiling stopped work -------------------------------------------------

@pytest.mark.parametrize("bound", [None, 3])  # ctx.parallel(concurrency=): the same outcomes
async def test_refusals_inside_a_settled_parallel_make_the_run_exhausted(tmp_path: Path, bound: int | None) -> None:
    engine = engine_on(f"sqlite:///{tmp_path}/t.db", priced())

    @tether.workflow(name="fan")
    async def fan(ctx: tether.Ctx) -> Any:
        branches = [lambda i=i: ctx.agent(f"t{i}", est_cost=0.02) for i in range(10)]
        try:
            await ctx.parallel(branches, settle=True, concurrency=bound)
        except tether.BudgetExhaustedError as exc:
            return sorted([o.status, type(o.error).__name__] for o in exc.data["outcomes"])
        return "all fit"

    for i in range(5):  # the same inputs settle the same way every time
        out = await engine.run(fan, run_id=f"r{i}", budget_usd=0.1)
        assert out.status == "exhausted"
        assert out.value == [["error", "BudgetExhaustedError"]] * 5 + [["ok", "NoneType"]] * 5
    await engine.close()


async def test_catching_the_refusal_and_returning_a_partial_value_still_settles_exhausted(tmp_path: Path) -> None:
    engine = engine_on(f"sqlite:///{tmp_path}/t.db", priced())

    @tether.workflow(name="partial")
    async def partial(ctx: tether.Ctx) -> Any:
        done = []
        for i in range(10):
            try:
                done.append(await ctx.agent(f"t{i}", est_cost=0.02))
            except tether.BudgetExhaustedError:
                return {"done": len(done)}
        return {"done": len(done)}

    out = await engine.run(partial, run_id="r", budget_usd=0.05)
    assert out.status == "exhausted" and out.value == {"done": 2}
    calls = engine.adapters["fake"].calls  # type: ignore[attr-defined]
    again = await engine.resume("r", partial)  # resuming an exhausted run: still exhausted, nothing paid
    assert again.status == "exhausted" and again.value == {"done": 2} and again.replay.hits == 2
    assert engine.adapters["fake"].calls == calls and again.cost.total_usd == out.cost.total_usd  # type: ignore[attr-defined]
    await engine.close()


async def test_the_tree_token_ceiling_halting_the_tree_settles_exhausted(tmp_path: Path) -> None:
    engine = engine_on(f"sqlite:///{tmp_path}/t.db", priced())

    @tether.workflow(name="tree")
    async def tree(ctx: tether.Ctx) -> Any:
        got = []
        for i in range(6):
            try:
                got.append(await ctx.agent(f"t{i}"))
            except tether.BudgetExhaustedError:
                break
        return len(got)

    box = tether.Containment(max_agents=10, max_concurrent=2, max_depth=2, max_tokens=3_000)
    out = await engine.run(tree, run_id="r", containment=box)
    assert out.status == "exhausted" and out.value == 2
    again = await engine.resume("r", tree)
    assert again.status == "exhausted" and again.value == 2 and again.replay.hits == 2
    assert engine.adapters["fake"].calls == 2  # type: ignore[attr-defined]
    await engine.close()


async def agents_until_refused(ctx: tether.Ctx, attempts: int) -> int:
    """Up to `attempts` 0.02 USD agents, stopping at the first budget refusal; how many were paid."""
    for i in range(attempts):
        try:
            await ctx.agent(f"c{i}", est_cost=0.02)
        except tether.BudgetExhaustedError:
            return i
    return attempts


async def test_a_child_whose_sub_account_ran_out_is_exhausted_while_its_parent_is_not(tmp_path: Path) -> None:
    engine = engine_on(f"sqlite:///{tmp_path}/t.db", priced())

    @tether.workflow(name="child")
    async def child(ctx: tether.Ctx) -> int:
        return await agents_until_refused(ctx, 5)

    @tether.workflow(name="parent")
    async def parent(ctx: tether.Ctx) -> Any:
        return await ctx.workflow(child, budget_fraction=0.5)

    out = await engine.run(parent, run_id="r", budget_usd=0.1)
    assert out.status == "ok" and out.value == 2  # the child's 0.05 ceiling, not the run's, stopped it
    child_terminal = next(e for e in await engine.inspect("r") if e.kind == "child" and e.ref is not None)
    assert child_terminal.status == "exhausted" and child_terminal.value == 2
    again = await engine.resume("r", parent)
    assert again.status == "ok" and again.value == 2 and again.replay.misses == 0
    await engine.close()


async def test_a_parent_that_lets_its_childs_refusal_escape_settles_exhausted(tmp_path: Path) -> None:
    engine = engine_on(f"sqlite:///{tmp_path}/t.db", priced())

    @tether.workflow(name="child")
    async def child(ctx: tether.Ctx) -> int:
        for i in range(5):
            await ctx.agent(f"c{i}", est_cost=0.02)  # the third is refused by the child's 0.05 USD
        return 5

    @tether.workflow(name="parent")
    async def parent(ctx: tether.Ctx) -> Any:
        return await ctx.workflow(child, budget_fraction=0.5)

    out = await engine.run(parent, run_id="r", budget_usd=0.1)
    assert out.status == "exhausted" and isinstance(out.error, tether.BudgetExhaustedError)
    assert out.cost.total_usd == pytest.approx(0.04)  # two agents paid; the refusal spent nothing
    child_terminal = next(e for e in await engine.inspect("r") if e.kind == "child" and e.ref is not None)
    assert child_terminal.status == "exhausted"
    calls = engine.adapters["fake"].calls  # type: ignore[attr-defined]
    again = await engine.resume("r", parent)  # the refused child re-runs; its agents and refusal replay
    assert again.status == "exhausted" and again.cost.total_usd == out.cost.total_usd
    assert engine.adapters["fake"].calls == calls  # type: ignore[attr-defined]
    await engine.close()


async def test_a_child_whose_spend_reaches_the_parents_own_ceiling_makes_the_parent_exhausted(
    tmp_path: Path,
) -> None:
    engine = engine_on(f"sqlite:///{tmp_path}/t.db", priced())

    @tether.workflow(name="child")
    async def child(ctx: tether.Ctx) -> int:
        return await agents_until_refused(ctx, 10)

    @tether.workflow(name="parent")
    async def parent(ctx: tether.Ctx) -> Any:
        return {"child": await ctx.workflow(child, budget_fraction=1.0)}  # the child may spend it all

    out = await engine.run(parent, run_id="r", budget_usd=0.1)
    assert out.status == "exhausted" and out.value == {"child": 5}  # the value is kept
    assert out.cost.total_usd == pytest.approx(0.1)
    await engine.close()


async def test_a_failed_agent_in_a_settled_parallel_is_a_typed_agent_error_branch(tmp_path: Path) -> None:
    def script(request: Any) -> Reply:
        if "bad" in request.messages[-1].text_content:
            return Reply(error="terminal", message="key revoked")
        return Reply(text="fine", input_tokens=1_000, output_tokens=500)

    engine = engine_on(f"sqlite:///{tmp_path}/t.db", priced(script))

    @tether.workflow(name="fan")
    async def fan(ctx: tether.Ctx) -> Any:
        outcomes = await ctx.parallel([lambda: ctx.agent("good"), lambda: ctx.agent("bad")], settle=True)
        return [[o.status, type(o.error).__name__, o.error.kind if isinstance(o.error, tether.AgentError) else None,
                 o.message] for o in outcomes]

    out = await engine.run(fan, run_id="r", budget_usd=1.0)
    assert out.status == "ok"
    (good, bad) = out.value
    assert good == ["ok", "NoneType", None, None]
    assert bad[:3] == ["error", "AgentError", "terminal"] and "key revoked" in bad[3]
    await engine.close()


# -- 5. a refusal never cancels admitted siblings ----------------------------------------------------

@pytest.mark.parametrize("bound", [None, 7])  # ctx.parallel(concurrency=): the same refusal, the same spend
async def test_a_budget_refusal_in_a_fail_fast_parallel_lets_paying_siblings_finish(
    tmp_path: Path, bound: int | None
) -> None:
    model = priced(lambda r: Reply(text="ok", input_tokens=1_000, output_tokens=500, latency_s=0.05))
    engine = engine_on(f"sqlite:///{tmp_path}/t.db", model, concurrency=50)

    @tether.workflow(name="fan")
    async def fan(ctx: tether.Ctx) -> Any:
        # prompts of one length: every turn is estimated alike, so each exactly fits its 0.02 reserve
        return await ctx.parallel([lambda i=i: ctx.agent(f"t{i:02d}", est_cost=0.02) for i in range(50)],
                                  concurrency=bound)

    out = await engine.run(fan, run_id="r", budget_usd=0.5)
    assert out.status == "exhausted" and isinstance(out.error, tether.BudgetExhaustedError)
    terminals = [e for e in await engine.inspect("r") if e.kind == "agent" and e.ref is not None]
    assert [e.status for e in terminals] == ["ok"] * 25  # none of the admitted 25 was cancelled
    assert out.cost.total_usd == pytest.approx(0.5)
    await engine.close()


# -- 6. a paid reply is kept ------------------------------------------------------------------------

async def test_a_reply_whose_final_usage_lands_on_the_ceiling_is_kept(tmp_path: Path) -> None:
    model = priced(lambda r: Reply(text="the answer", input_tokens=1_000, output_tokens=500, chunks=5,
                                   latency_s=0.02))
    engine = engine_on(f"sqlite:///{tmp_path}/t.db", model)

    @tether.workflow(name="one")
    async def one(ctx: tether.Ctx) -> Any:
        return await ctx.agent("q", est_cost=0.02, max_output_tokens=500)

    out = await engine.run(one, run_id="r", budget_usd=0.02)
    assert out.value == "the answer" and out.status == "exhausted"  # paid for, journaled ok; nothing later fits
    terminal = next(e for e in await engine.inspect("r") if e.kind == "agent" and e.ref is not None)
    assert terminal.status == "ok" and terminal.value["output"] == "the answer"
    again = await engine.resume("r", one)
    assert again.value == "the answer" and again.replay.hits == 1 and model.calls == 1
    await engine.close()


async def test_a_stream_still_producing_when_the_ceiling_fires_is_cut(tmp_path: Path) -> None:
    # the input is billed far above its estimate, so the ceiling fires mid-stream, not at the last delta
    model = priced(lambda r: Reply(text="x" * 400, input_tokens=1_000, output_tokens=500, chunks=10,
                                   latency_s=0.05))
    engine = engine_on(f"sqlite:///{tmp_path}/t.db", model)

    @tether.workflow(name="one")
    async def one(ctx: tether.Ctx) -> Any:
        return await ctx.agent("q", est_cost=0.0)

    out = await engine.run(one, run_id="r", budget_usd=0.015)
    assert out.status == "exhausted" and isinstance(out.error, tether.BudgetExhaustedError)
    terminal = next(e for e in await engine.inspect("r") if e.kind == "agent" and e.ref is not None)
    assert terminal.status == "cancelled" and terminal.usage is not None and terminal.usage.approximate
    assert terminal.usage.output_tokens < 500
    await engine.close()


# -- 7. no silent unbounded spend ------------------------------------------------------------------

@tether.workflow(name="ask")
async def ask(ctx: tether.Ctx) -> Any:
    return [await ctx.agent(f"q{i}") for i in range(3)]


async def test_an_unpriced_model_under_a_usd_ceiling_is_refused_before_the_wire(tmp_path: Path) -> None:
    model = tether.models.fake("groq", script=lambda r: Reply(text="free?"))  # no price row anywhere
    engine = tether.Engine(models=[model], routing={"loop": "groq:some-unlisted-model"},
                           store=f"sqlite:///{tmp_path}/t.db")
    out = await engine.run(ask, run_id="r", budget_usd=1.0)
    assert out.status == "error" and isinstance(out.error, tether.PricingError)
    assert "groq:some-unlisted-model" in out.error.message and "allow_unpriced=True" in out.error.message
    assert model.calls == 0
    entries = await engine.inspect("r")
    assert [e for e in entries if e.kind == "agent"] == []  # refused before its reserve: no entry was opened
    await engine.close()


async def test_allow_unpriced_runs_and_warns_once_per_model(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    model = tether.models.fake("groq", script=lambda r: Reply(text="free?", input_tokens=10, output_tokens=2))
    engine = tether.Engine(models=[model], routing={"loop": "groq:some-unlisted-model"},
                           store=f"sqlite:///{tmp_path}/t.db")
    handle = engine.start(ask, run_id="r", budget_usd=1.0, allow_unpriced=True)
    events: list[Any] = []
    handle.on("warning", events.append)
    with caplog.at_level(logging.WARNING, logger="tether"):
        out = await handle
    assert out.status == "ok" and model.calls == 3
    assert len(out.warnings) == 1 and "groq:some-unlisted-model" in out.warnings[0]
    assert [r.getMessage() for r in caplog.records if r.name == "tether"] == [f"run r: {out.warnings[0]}"]
    assert len(events) == 1
    assert out.cost.unpriced["groq:some-unlisted-model"].input_tokens == 30
    await engine.close()


def test_every_provider_genai_prices_knows_prices_its_models() -> None:
    table = tether.PriceTable()
    for ref in ("groq:llama-3.3-70b-versatile", "mistral:mistral-large-latest", "deepseek:deepseek-chat",
                "google:gemini-2.5-pro", "xai:grok-4", "openrouter:openai/gpt-4o", "anthropic:claude-sonnet-4-5"):
        price = table.get(ref)
        assert price is not None and price.input > 0, ref


def test_an_openai_compatible_gateway_prices_its_calls_through_price_provider() -> None:
    gateway = tether.models.openai_compatible("gw", "http://127.0.0.1:1/v1", price_provider="groq")
    price = gateway.caps("llama-3.3-70b-versatile").price
    assert price is not None and price.input > 0
    bare = tether.models.openai_compatible("gw", "http://127.0.0.1:1/v1")
    assert bare.caps("llama-3.3-70b-versatile").price is None  # unknown gateway: unpriced, never zero
    assert tether.models.openai_compatible("groq", "http://127.0.0.1:1/v1").caps(
        "llama-3.3-70b-versatile").price == price  # an adapter id genai-prices knows is its own provider


# -- smaller money leaks -----------------------------------------------------------------------------

async def test_the_agent_type_buckets_sum_to_the_total(tmp_path: Path) -> None:
    engine = engine_on(f"sqlite:///{tmp_path}/t.db", priced())

    @tether.workflow(name="mixed")
    async def mixed(ctx: tether.Ctx) -> Any:
        return [await ctx.agent("a", agent_type="critic"), await ctx.agent("b")]

    out = await engine.run(mixed, run_id="r")
    assert out.cost.by_agent_type == {"critic": pytest.approx(0.02), "(untyped)": pytest.approx(0.02)}
    assert sum(out.cost.by_agent_type.values()) == pytest.approx(out.cost.total_usd)
    await engine.close()


async def test_a_provider_billing_three_times_the_estimated_input_overshoots_by_that_input(tmp_path: Path) -> None:
    """The stated bound assumes the input estimate; docs/budgets.md says what an underestimate costs."""
    from tether.agents.dispatch import estimate_input_tokens

    seen: list[int] = []

    def script(request: Any) -> Reply:
        est = estimate_input_tokens(request)
        seen.append(est)
        return Reply(text="y" * 4000, input_tokens=3 * est, output_tokens=4000)  # bills 3x the estimate

    model = priced(script)
    engine = engine_on(f"sqlite:///{tmp_path}/t.db", model)

    @tether.workflow(name="one")
    async def one(ctx: tether.Ctx) -> Any:
        return await ctx.agent("q " * 2_000, est_cost=0.0, max_output_tokens=4_000)

    out = await engine.run(one, run_id="r", budget_usd=0.05)
    extra_input = 2 * seen[0] * PRICE.input / 1e6  # what the provider billed beyond the estimate
    assert out.cost.total_usd > 0.05  # the clamp trusted the estimate ...
    assert out.cost.total_usd <= 0.05 + extra_input + 1e-9  # ... and overshot by the unestimated input only
    await engine.close()


# -- 9. a lost lease stops the segment --------------------------------------------------------------

def lease_engine(url: str, ran: list[str]) -> tuple[tether.Engine, asyncio.Event, Any]:
    """A run whose one model call would answer (with a tool call) only after 1 s, on a 0.6 s lease."""
    asked = asyncio.Event()

    def script(request: Any) -> Reply:
        asked.set()
        return Reply(tool_calls=[ToolCall("effect", {})], input_tokens=10, output_tokens=5, latency_s=1.0)

    model = priced(script)
    engine = engine_on(url, model, lease_ttl_s=0.6)

    @tether.tool
    def effect() -> str:
        """An effect that must not start once the lease is gone."""
        ran.append("effect")
        return "done"

    @tether.workflow(name="w")
    async def w(ctx: tether.Ctx) -> Any:
        return await ctx.agent("q", tools=[effect])

    return engine, asked, w


async def journal_length(url: str) -> int:
    store = open_store(url)
    try:
        return len(await store.load("r"))
    finally:
        await store.close()


async def test_a_segment_whose_lease_is_taken_over_stops_within_one_renewal_interval(tmp_path: Path) -> None:
    import sqlite3

    from tether.stores.leases import current_owner

    url, ran = f"sqlite:///{tmp_path}/t.db", []
    engine, asked, w = lease_engine(url, ran)
    handle = engine.start(w, run_id="r", budget_usd=1.0)
    await asked.wait()
    with sqlite3.connect(tmp_path / "t.db") as db:  # the lease expires unseen (say, a long GC pause) ...
        db.execute("DELETE FROM leases WHERE run_id = 'r'")
    thief = open_store(url)
    taken = await thief.acquire("r", current_owner("thief"), 30.0)  # type: ignore[attr-defined]
    written = await journal_length(url)
    started = time.monotonic()
    with pytest.raises(tether.LeaseHeldError, match="lease lost"):
        await handle  # ... and the next renewal finds another owner
    assert time.monotonic() - started < 0.2 + 0.3  # one renewal interval (ttl/3), plus slack
    assert ran == []  # the in-flight call was cut: no tool started
    assert await journal_length(url) == written  # nothing further written
    assert taken.epoch == 2
    await thief.close()
    await engine.close()


async def test_a_segment_that_cannot_renew_stops_before_its_lease_expires(tmp_path: Path) -> None:
    url, ran = f"sqlite:///{tmp_path}/t.db", []
    engine, asked, w = lease_engine(url, ran)
    handle = engine.start(w, run_id="r", budget_usd=1.0)
    await asked.wait()
    store = await engine.store()

    async def partitioned(lease: Lease) -> Lease:
        raise tether.StoreUnavailableError("simulated partition")

    store.renew = partitioned  # type: ignore[attr-defined]
    written = await journal_length(url)
    started = time.monotonic()
    with pytest.raises(tether.LeaseHeldError, match="could not renew"):
        await handle
    assert time.monotonic() - started < 0.6  # stopped before the 0.6 s lease could lapse and be taken
    assert ran == [] and await journal_length(url) == written
    await engine.close()


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh store of each durable kind with leases: a SQLite file, a PostgreSQL schema."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/t.db"
    dsn = request.getfixturevalue("pg_dsn")
    return f"{dsn}?schema={request.getfixturevalue('pg_schema')}"


async def test_checkpoint_blobs_and_meta_writes_are_fenced(store_url: str) -> None:
    from tether.stores.leases import current_owner

    store = open_store(store_url)
    old = await store.acquire("r", current_owner("a"), 0.05)  # type: ignore[attr-defined]
    await asyncio.sleep(0.3)
    await store.acquire("r", current_owner("b"), 30.0)  # type: ignore[attr-defined]
    with pytest.raises(tether.LeaseHeldError):
        await store.put_blob("r/checkpoints/1", b"stale", old)
    with pytest.raises(tether.LeaseHeldError):
        await store.put_meta(RunMeta(run_id="r", workflow="w", created_at=1.0, updated_at=1.0), old)
    assert await store.get_blob("r/checkpoints/1") is None and await store.get_meta("r") is None
    await store.close()


def test_two_resumer_processes_one_drives_and_the_other_is_refused_at_once(store_url: str, tmp_path: Path) -> None:
    """Two `engine.resume` calls in two processes race for one run: one pays, the other gets LeaseHeldError."""
    log = tmp_path / "requests.log"

    def child(mode: str) -> subprocess.Popen[str]:
        return subprocess.Popen([sys.executable, str(CHILD), store_url, "r", mode, str(log)],
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    setup = child("gated-setup")
    assert setup.wait(60) == 0, setup.communicate()[0]
    first = child("gated-resume")
    deadline = time.monotonic() + 30
    while not (log.exists() and log.read_text()):  # `first` holds the lease and is inside the call
        assert time.monotonic() < deadline and first.poll() is None, first.communicate()[0]
        time.sleep(0.02)
    second = child("gated-resume")
    assert second.wait(30) == 3, second.communicate()[0]  # exit 3: LeaseHeldError
    assert first.poll() is None  # refused at once, while the other was still inside its 5 s call
    assert first.wait(60) == 0, first.communicate()[0]
    assert "lease held" in (second.stdout.read() if second.stdout else "")
    assert log.read_text().splitlines() == ["pay once"]  # the provider saw the call exactly once
    entries = asyncio.run(_inspect(store_url, "r"))
    assert len([e for e in entries if e.kind == "agent" and e.ref is not None]) == 1
    assert settles(entries) == ["suspended", "ok"]


async def _inspect(url: str, run_id: str) -> list[JournalEntry]:
    store = open_store(url)
    try:
        return await store.load(run_id)
    finally:
        await store.close()


@pytest.mark.parametrize("tools", [[], [ToolCall("noop", {})]])
async def test_a_dispatch_record_precedes_every_provider_call(tmp_path: Path, tools: list[ToolCall]) -> None:
    replies = [Reply(tool_calls=tools, input_tokens=10, output_tokens=5)] if tools else []
    model = priced(lambda r, it=iter([*replies, Reply(text="ok", input_tokens=10, output_tokens=5)]): next(it))
    engine = engine_on(f"sqlite:///{tmp_path}/t.db", model)

    @tether.tool
    def noop() -> str:
        """No operation."""
        return "ok"

    @tether.workflow(name="w")
    async def w(ctx: tether.Ctx) -> Any:
        return await ctx.agent("q", tools=[noop])

    out = await engine.run(w, run_id="r", budget_usd=1.0)
    assert out.status == "ok"
    dispatches = [e for e in await engine.inspect("r") if e.label == "dispatch"]
    assert [d.value["call"] for d in dispatches] == list(range(1, model.calls + 1))
    assert out.cost.orphaned_usd == 0 and not out.cost.approximate  # settled calls owe no estimate
    await engine.close()


async def test_a_run_learns_the_input_a_model_bills_beyond_the_estimate_and_a_resume_keeps_it(
    tmp_path: Path,
) -> None:
    from tether.agents.dispatch import estimate_input_tokens
    from tether.pricing import affordable_output_tokens

    asked: list[int | None] = []

    def script(request: Any) -> Reply:  # a provider with a 900-token hidden preamble
        asked.append(request.max_output_tokens)
        return Reply(text="ok", input_tokens=estimate_input_tokens(request) + 900, output_tokens=10)

    engine = engine_on(f"sqlite:///{tmp_path}/t.db", priced(script))

    @tether.workflow(name="two")
    async def two(ctx: tether.Ctx) -> Any:
        first = await ctx.agent("first", est_cost=0.0)
        await ctx.await_external("go")
        return [first, await ctx.agent("second", est_cost=0.0)]

    budget = 0.05
    assert (await engine.run(two, run_id="r", budget_usd=budget)).status == "suspended"
    (first,) = [e for e in await engine.inspect("r") if e.label == "dispatch"]
    assert first.value["input_overhead"] == 0  # nothing learned before the first call
    await engine.resolve_external("r", "go", True)
    out = await engine.resume("r", two)  # a new segment: the overhead comes back from the journal
    assert out.status == "ok"
    second = [e for e in await engine.inspect("r") if e.label == "dispatch"][-1]
    assert second.value["input_overhead"] == 900
    first_cost = next(e for e in await engine.inspect("r") if e.kind == "agent" and e.ref is not None).cost_usd
    assert first_cost is not None
    est = second.value["est_input"] + 900  # the second clamp priced the estimate plus what was learned
    assert asked[-1] == affordable_output_tokens(PRICE, est, budget - first_cost)
    assert second.value["worst_usd"] == pytest.approx((est * PRICE.input + asked[-1] * PRICE.output) / 1e6)


async def test_a_resolution_waits_for_a_driver_that_is_letting_the_lease_go(tmp_path: Path) -> None:
    from tether.stores.leases import current_owner

    url = f"sqlite:///{tmp_path}/t.db"
    engine = engine_on(url, priced())

    @tether.workflow(name="w")
    async def w(ctx: tether.Ctx) -> Any:
        return await ctx.await_external("go")

    assert (await engine.run(w, run_id="r")).status == "suspended"
    other = open_store(url)
    held = await other.acquire("r", current_owner("a worker about to hand back"), 30.0)  # type: ignore[attr-defined]

    async def hand_back() -> None:
        await asyncio.sleep(0.3)
        await other.release(held)  # type: ignore[attr-defined]

    releasing = asyncio.create_task(hand_back())
    started = time.monotonic()
    assert await engine.resolve_external("r", "go", "yes")  # no LeaseHeldError: it waited for the release
    assert 0.25 < time.monotonic() - started < 5.0
    await releasing
    assert (await engine.resume("r", w)).value == "yes"
    await other.close()
    await engine.close()
