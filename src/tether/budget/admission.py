"""Layer 1, projected admission: hold a reserve for an invocation before any entry or network call."""

from __future__ import annotations

from tether.budget.accounts import EPSILON, Account, Hold
from tether.contracts.errors import AdmissionRejectedError, BudgetExhaustedError
from tether.contracts.money import usd
from tether.contracts.prices import Price
from tether.contracts.stops import StopReason
from tether.contracts.usage import Usage
from tether.pricing import cost_usd

LIFETIME_SPAWNS = 500


def reserve_usd(
    est_cost: float | None, profile_est: float | None, price: Price | None, est_input: int, max_output: int
) -> float:
    """`est_cost` ?? profile estimate ?? one priced turn of `max_output` tokens (0 for an unpriced model).

    An unpriced model reaches admission only where its spend is not counted against a ceiling (no
    ceiling, or `allow_unpriced=True`), so it holds nothing.
    """
    if est_cost is not None:
        return est_cost
    if profile_est is not None:
        return profile_est
    if price is not None:
        return cost_usd(Usage(input_tokens=est_input, output_tokens=max_output), price)
    return 0.0


def admit(
    account: Account, reserve: float, *, what: str, run_id: str, hint: str = "", free: bool = False
) -> Hold:
    """Hold `reserve` iff every capped account has `spent + held < ceiling` and room for it (exact fill ok).

    What dispatches in flight hold beyond their reserves (the hard ceiling's exposure) is left out: it is
    released when they settle, so it makes a dispatch wait, never an admission refuse for good. A `free`
    invocation (every model it may call priced at zero) reserving nothing is admitted even at the ceiling
    (`budget_usd=0` included): it cannot spend, and only a token ceiling bounds it.
    """
    for acct in account.capped():
        assert acct.ceiling is not None
        committed = acct.spent + acct.held - acct.exposed
        at_ceiling = committed >= acct.ceiling - EPSILON and not (free and reserve <= EPSILON)
        if at_ceiling or committed + reserve > acct.ceiling + EPSILON:
            remaining = max(0.0, acct.ceiling - committed)
            message = (
                f"budget exhausted: run {run_id!r} account {acct.name!r} has {acct.spent_phrase(run_id)} and holds "
                f"{usd(acct.held - acct.exposed)} of {usd(acct.ceiling)} USD; the reserve of {usd(reserve)} for {what} "
                f"does not fit. {hint or raise_hint(run_id)}"
            )
            acct.stop(message, what=what, reserve_usd=reserve, remaining_usd=remaining)
            raise BudgetExhaustedError(
                message,
                run_id=run_id, account=acct.name, spent=acct.spent, orphaned=acct.orphaned,
                held=acct.held - acct.exposed, ceiling=acct.ceiling, reserve=reserve, remaining=remaining, what=what,
                reason=StopReason.USD_CEILING,
            )
    return account.hold(reserve)


def raise_hint(run_id: str) -> str:
    """What to do about a ceiling that stopped a run: raise it for this run, or make calls cheaper."""
    return (f"Raise the ceiling with `tether resume {run_id} --raise-budget USD` (engine.resume(..., "
            f"raise_budget_usd=...)), or lower max_output_tokens= (or pass est_cost=) for cheaper calls.")


def check_spawn_cap(agents_so_far: int, cap: int, run_id: str) -> None:
    """The lifetime cap on agent invocations per run (a runaway loop stops here, not at the bill)."""
    if agents_so_far >= cap:
        raise AdmissionRejectedError(
            f"admission refused: run {run_id!r} has started {agents_so_far} agents, the lifetime cap is {cap}. "
            f"Look for a loop that spawns agents without end, or raise Engine(max_spawns=...).",
            run_id=run_id, agents=agents_so_far, cap=cap,
        )
