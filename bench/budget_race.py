"""Many agents race one USD ceiling: tether vs pydantic-ai vs LiteLLM, all offline.

Scenario (identical for every system): N=200 agents, at most 50 running at once, one shared ceiling of
1.00 USD. Each agent makes up to 3 model turns (two tool-calling turns that call a `noop` tool, then a final
text turn). Every turn is 1,000 input + 500 output tokens at 10 USD/M input and 20 USD/M output, so one turn
costs 0.02 USD, and takes ~10 ms. Unbounded, the scenario would spend 200 * 3 * 0.02 = 12.00 USD.

For each system the bench prints the ceiling, the total spend, spend/ceiling, how many model calls were made,
and whether the system itself stopped the work (rather than the bench's glue code).

    .venv/bin/python bench/budget_race.py

No provider is ever called: tether uses its scripted fake model, pydantic-ai a `FunctionModel`, LiteLLM
`mock_response=`. LiteLLM is optional (`pip install litellm`); without it that row is skipped.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import os
import sys
import tempfile
import time
import traceback
import warnings
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

# LiteLLM fetches its model price map from the network at import unless told to use the bundled copy.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

AGENTS = 200
CONCURRENCY = 50
CEILING_USD = 1.00
TURNS = 3
IN_TOKENS, OUT_TOKENS = 1_000, 500
IN_USD_PER_M, OUT_USD_PER_M = 10.0, 20.0
LATENCY_S = 0.01
TURN_USD = (IN_TOKENS * IN_USD_PER_M + OUT_TOKENS * OUT_USD_PER_M) / 1e6  # 0.02


def scenario_cost(input_tokens: int, output_tokens: int) -> float:
    """The scenario's price for a token count (used to cross-check what each system reports)."""
    return (input_tokens * IN_USD_PER_M + output_tokens * OUT_USD_PER_M) / 1e6


@dataclass
class Result:
    system: str
    spend_usd: float | None = None
    model_calls: int | None = None
    stopped_itself: bool | None = None
    how: str = ""
    notes: list[str] = field(default_factory=list)
    error: str | None = None
    seconds: float = 0.0
    crash_usd: float | None = None
    """tether only: the largest cost any prefix of the journal reports (what a crash there would leave)."""
    run_seconds: float | None = None
    """The race alone, when the runner does more afterwards (tether folds every journal prefix)."""


# --------------------------------------------------------------------------------------------------------------
# 1. tether: the `race(...)` helper of tests/budget/test_race.py, reimplemented here, in either overshoot mode.
# --------------------------------------------------------------------------------------------------------------
PADDING = " the quick brown fox jumps over the lazy dog" * 88
"""Makes each prompt about the 1,000 input tokens every call bills, so tether's input estimate (chars/4) holds:
the one assumption of its bound (docs/budgets.md). The other systems do not estimate input at all."""


async def run_tether(overshoot: str = "hard") -> Result:
    import tether
    from tether.journal.cost import fold_cost
    from tether.pricing import cost_usd
    from tether.testing import Reply

    res = Result("tether" if overshoot == "hard" else f"tether ({overshoot})")
    price = tether.Price(input=IN_USD_PER_M, output=OUT_USD_PER_M)
    turn_cost = cost_usd(tether.Usage(input_tokens=IN_TOKENS, output_tokens=OUT_TOKENS), price)

    def script(request: Any) -> Reply:
        done = sum(1 for m in request.messages if m.role == "assistant")
        if done + 1 < TURNS:
            return Reply(text="", tool_calls=[tether.testing.ToolCall("noop", {"i": done})],
                         input_tokens=IN_TOKENS, output_tokens=OUT_TOKENS, latency_s=LATENCY_S, chunks=4)
        return Reply(text="done", input_tokens=IN_TOKENS, output_tokens=OUT_TOKENS, latency_s=LATENCY_S, chunks=4)

    @tether.tool(parallel_safe=True)
    def noop(i: int) -> int:
        """Do nothing."""
        return i

    model = tether.models.fake("fake", script=script, prices={"m": price})

    async def no_sleep(_: float) -> None:
        return None

    with tempfile.TemporaryDirectory(prefix="tether-bench-") as tmp:
        engine = tether.Engine(models=[model], routing={"loop": "fake:m"}, store=f"sqlite:///{tmp}/race.db",
                               concurrency=CONCURRENCY, sleep=no_sleep)

        @tether.workflow(name="race")
        async def flow(ctx: tether.Ctx) -> list[Any]:
            async def one(i: int) -> Any:
                return await ctx.agent(f"task {i}{PADDING}", tools=[noop], est_cost=turn_cost / 10,
                                       max_output_tokens=OUT_TOKENS)

            return await ctx.parallel([functools.partial(one, i) for i in range(AGENTS)])

        try:
            started = time.perf_counter()
            outcome = await engine.run(flow, run_id="race", budget_usd=CEILING_USD, overshoot=overshoot)  # type: ignore[arg-type]
            res.run_seconds = time.perf_counter() - started
            entries = await engine.inspect("race")
        finally:
            await engine.close()
    # What a crash could leave: the cost of each prefix of the journal (its cut calls at their worst case).
    crash_usd = max(fold_cost(entries[:n]).total_usd for n in range(1, len(entries) + 1))

    res.spend_usd = outcome.cost.total_usd
    res.model_calls = model.calls
    res.stopped_itself = outcome.status == "exhausted"
    res.how = f"run status {outcome.status!r}"
    if outcome.status not in ("ok", "exhausted"):
        res.notes.append(f"run ended {outcome.status!r}: {outcome.error}")
    res.notes.append(f"provider_calls journaled={outcome.cost.provider_calls}, "
                     f"approximate (streams cut mid-turn)={outcome.cost.approximate}, "
                     f"tokens in/out={outcome.cost.usage.input_tokens}/{outcome.cost.usage.output_tokens}")
    res.notes.append(f"worst cost a crash could leave (any journal prefix, cut calls at worst) = {crash_usd:.4f} USD")
    res.crash_usd = crash_usd
    return res


# --------------------------------------------------------------------------------------------------------------
# 2. pydantic-ai: one shared RunUsage + UsageLimits(cost_limit=...) across 200 concurrent agent.run() calls.
# --------------------------------------------------------------------------------------------------------------
async def run_pydantic_ai() -> Result:
    from pydantic_ai import Agent
    from pydantic_ai.exceptions import UsageLimitExceeded
    from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel
    from pydantic_ai.usage import RequestUsage, RunUsage, UsageLimits

    res = Result("pydantic-ai")
    calls = 0
    # pydantic-ai prices a response with genai-prices only when `usage.cost` is unset (`fill_response_cost`);
    # a cost already on the response (as the Pydantic AI Gateway reports it) is kept. So each fake response
    # carries the scenario's exact price, attached at the same point a real provider's would be.
    turn_cost = Decimal(str(TURN_USD))

    async def fake_llm(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        nonlocal calls
        calls += 1
        done = sum(1 for m in messages if isinstance(m, ModelResponse))
        await asyncio.sleep(LATENCY_S)
        usage = RequestUsage(input_tokens=IN_TOKENS, output_tokens=OUT_TOKENS, cost=turn_cost)
        if done + 1 < TURNS:
            return ModelResponse(parts=[ToolCallPart("noop", {"i": done})], usage=usage)
        return ModelResponse(parts=[TextPart("done")], usage=usage)

    agent = Agent(FunctionModel(fake_llm, model_name="bench-model"))

    @agent.tool_plain
    def noop(i: int) -> int:
        """Do nothing."""
        return i

    shared = RunUsage()  # the one budget every agent draws on
    # request_limit defaults to 50 and would be counted on the shared usage too (50 requests * 0.02 = 1.00 USD,
    # which would masquerade as the cost limit working); switch it off so only `cost_limit` is in play.
    limits = UsageLimits(cost_limit=Decimal(str(CEILING_USD)), request_limit=None)
    sem = asyncio.Semaphore(CONCURRENCY)
    outcomes = {"ok": 0, "limit": 0, "error": 0}
    first_error: list[str] = []

    async def one(i: int) -> None:
        async with sem:
            try:
                await agent.run(f"task {i}", usage=shared, usage_limits=limits)
                outcomes["ok"] += 1
            except UsageLimitExceeded:
                outcomes["limit"] += 1
            except Exception as e:  # report, don't crash the bench
                outcomes["error"] += 1
                if not first_error:
                    first_error.append(f"{type(e).__name__}: {e}")

    await asyncio.gather(*(one(i) for i in range(AGENTS)))

    if shared.cost is None:
        raise RuntimeError("pydantic-ai computed no cost, so cost_limit was never enforced")
    res.spend_usd = float(shared.cost)
    res.model_calls = calls
    res.stopped_itself = outcomes["limit"] > 0
    res.how = f"{outcomes['limit']} runs raised UsageLimitExceeded"
    check = scenario_cost(shared.input_tokens, shared.output_tokens)
    res.notes.append(f"runs ok/limit/error={outcomes['ok']}/{outcomes['limit']}/{outcomes['error']}, "
                     f"shared usage requests={shared.requests}, tokens in/out={shared.input_tokens}/"
                     f"{shared.output_tokens} (= {check:.2f} USD at scenario prices)")
    if first_error:
        res.notes.append(f"first error: {first_error[0]}")
    return res


# --------------------------------------------------------------------------------------------------------------
# 3. LiteLLM: BudgetManager, checked before each call and updated after it, as its docs show.
# --------------------------------------------------------------------------------------------------------------
async def run_litellm() -> Result:
    import litellm

    logging.getLogger("LiteLLM").setLevel(logging.ERROR)
    litellm.suppress_debug_info = True
    res = Result("litellm")
    model = "openai/bench-model"
    litellm.register_model({model: {
        "input_cost_per_token": IN_USD_PER_M / 1e6,
        "output_cost_per_token": OUT_USD_PER_M / 1e6,
        "litellm_provider": "openai",
        "mode": "chat",
        "max_tokens": 8192,
    }})

    class InMemoryBudgetManager(litellm.BudgetManager):
        """The local BudgetManager writes ./user_cost.json from a thread on every update; keep it in memory."""

        def _save_data_thread(self) -> None:
            return None

    user = "shared-ceiling"
    with tempfile.TemporaryDirectory(prefix="litellm-bench-") as tmp:
        cwd = os.getcwd()
        os.chdir(tmp)  # `load_data` reads ./user_cost.json if present; make sure it finds none of ours
        try:
            budget = InMemoryBudgetManager(project_name="budget-race")
        finally:
            os.chdir(cwd)
    budget.create_budget(total_budget=CEILING_USD, user=user)

    # A prompt of ~1,000 tokens, so `projected_cost` (current spend + this prompt's input price) is realistic.
    prompt = {"role": "user", "content": "hello " * (IN_TOKENS - 6)}

    def mock(turn: int) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": "done"}
        finish = "stop"
        if turn + 1 < TURNS:
            message = {"role": "assistant", "content": None, "tool_calls": [{
                "id": f"call_{turn}", "type": "function",
                "function": {"name": "noop", "arguments": f'{{"i": {turn}}}'}}]}
            finish = "tool_calls"
        return {"model": model, "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                "usage": {"prompt_tokens": IN_TOKENS, "completion_tokens": OUT_TOKENS,
                          "total_tokens": IN_TOKENS + OUT_TOKENS}}

    def noop(i: int) -> int:
        return i

    # Warm the tokenizer once so its load time doesn't sit inside the race.
    budget.projected_cost(model, [prompt], user)

    calls = 0
    refused = 0
    sem = asyncio.Semaphore(CONCURRENCY)

    async def one(i: int) -> None:
        nonlocal calls, refused
        async with sem:
            messages: list[dict[str, Any]] = [prompt]
            for turn in range(TURNS):
                # Documented pattern: only call if the budget allows it (here the stricter projected_cost,
                # i.e. spend so far + this prompt's input price), then record the real cost afterwards.
                if budget.projected_cost(model, [prompt], user) > budget.get_total_budget(user):
                    refused += 1
                    return
                calls += 1
                response = await litellm.acompletion(model=model, messages=messages, mock_response=mock(turn),
                                                     mock_delay=LATENCY_S)
                budget.update_cost(user=user, completion_obj=response)
                msg = response.choices[0].message
                if not msg.tool_calls:
                    return
                messages = [*messages, {"role": "assistant", "content": "", "tool_calls": [
                    tc.model_dump() for tc in msg.tool_calls]}]
                for tc in msg.tool_calls:
                    messages.append({"role": "tool", "tool_call_id": tc.id,
                                     "content": str(noop(**json.loads(tc.function.arguments)))})

    await asyncio.gather(*(one(i) for i in range(AGENTS)))

    res.spend_usd = float(budget.get_current_cost(user))
    res.model_calls = calls
    res.stopped_itself = False  # BudgetManager only keeps the tally; the bench's own check refused the calls
    res.how = f"bench-side check stopped {refused} agents"
    res.notes.append(f"litellm {package_version('litellm')}; calls*0.02 = {calls * TURN_USD:.2f} USD")
    return res


# --------------------------------------------------------------------------------------------------------------
RUNNERS: tuple[tuple[str, Callable[[], Awaitable[Result]]], ...] = (
    ("tether", run_tether),
    ("tether (bounded)", functools.partial(run_tether, "bounded")),
    ("pydantic-ai", run_pydantic_ai),
    ("litellm", run_litellm),
)


async def timed(runner: Callable[[], Awaitable[Result]], name: str) -> Result:
    start = time.perf_counter()
    try:
        res = await runner()
    except ImportError as e:
        res = Result(name, error=f"not installed ({e}); skipped")
    except Exception as e:
        res = Result(name, error=f"{type(e).__name__}: {e}")
        if os.environ.get("BENCH_TRACEBACK"):
            traceback.print_exc()
    res.seconds = res.run_seconds if res.run_seconds is not None else time.perf_counter() - start
    return res


def package_version(name: str) -> str:
    try:
        from importlib.metadata import version

        return version(name)
    except Exception:
        return "?"


def main() -> int:
    warnings.simplefilter("ignore")
    print(f"Scenario: {AGENTS} agents, concurrency {CONCURRENCY}, ceiling {CEILING_USD:.2f} USD, up to {TURNS} "
          f"turns/agent of {IN_TOKENS} in + {OUT_TOKENS} out tokens @ {IN_USD_PER_M:g}/{OUT_USD_PER_M:g} USD/M "
          f"= {TURN_USD:.2f} USD/turn, ~{LATENCY_S * 1000:.0f} ms/turn (unbounded: "
          f"{AGENTS * TURNS * TURN_USD:.2f} USD)\n")

    results: list[Result] = []
    for name, runner in RUNNERS[:3]:
        results.append(asyncio.run(timed(runner, name)))
    try:
        import litellm  # noqa: F401
    except Exception as e:
        print(f"LiteLLM: cannot import ({type(e).__name__}: {e}); skipped.\n")
    else:
        results.append(asyncio.run(timed(run_litellm, "litellm")))

    header = (f"{'system':<16} {'ceiling':>8} {'spend':>8} {'spend/ceil':>10} {'calls':>6}  "
              f"{'stopped on its own':<44} {'secs':>5}")
    print(header)
    print("-" * len(header))
    for r in results:
        if r.error is not None:
            print(f"{r.system:<16} ERROR: {r.error}")
            continue
        spend = r.spend_usd or 0.0
        stopped = f"yes ({r.how})" if r.stopped_itself else f"no ({r.how})"
        print(f"{r.system:<16} {CEILING_USD:>8.2f} {spend:>8.4f} {spend / CEILING_USD:>10.3f} {r.model_calls:>6}  "
              f"{stopped:<44} {r.seconds:>5.1f}")
    print()
    for r in results:
        for note in r.notes:
            print(f"  {r.system}: {note}")
    return 0 if all(r.error is None for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
