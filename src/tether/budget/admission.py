"""Layer 1, projected admission: hold a reserve for an invocation before any entry or network call."""

from __future__ import annotations

from tether.budget.accounts import EPSILON, Account, Hold
from tether.contracts.errors import AdmissionRejectedError, BudgetExhaustedError
from tether.contracts.prices import Price
from tether.contracts.usage import Usage
from tether.pricing import cost_usd

FLAT_RESERVE_USD = 0.50
LIFETIME_SPAWNS = 500


def reserve_usd(
    est_cost: float | None, profile_est: float | None, price: Price | None, est_input: int, max_output: int
) -> float:
    """`est_cost` ?? profile estimate ?? one priced worst-case turn ?? the flat 0.50 USD."""
    if est_cost is not None:
        return est_cost
    if profile_est is not None:
        return profile_est
    if price is not None:
        return cost_usd(Usage(input_tokens=est_input, output_tokens=max_output), price)
    return FLAT_RESERVE_USD


def admit(account: Account, reserve: float, *, what: str, run_id: str) -> Hold:
    """Hold `reserve` iff every capped account has `spent + held < ceiling` and room for it (exact fill ok)."""
    for acct in account.capped():
        assert acct.ceiling is not None
        committed = acct.spent + acct.held
        if committed >= acct.ceiling - EPSILON or committed + reserve > acct.ceiling + EPSILON:
            acct.stop(f"admission refused {what}")
            raise BudgetExhaustedError(
                f"budget exhausted: run {run_id!r} account {acct.name!r} has spent {acct.spent:.4f} and holds "
                f"{acct.held:.4f} of {acct.ceiling:.4f} USD; the reserve of {reserve:.4f} for {what} does not fit. "
                f"Raise budget_usd for the next run, or pass est_cost= for cheaper calls.",
                run_id=run_id, account=acct.name, spent=acct.spent, held=acct.held, ceiling=acct.ceiling,
                reserve=reserve,
            )
    return account.hold(reserve)


def check_spawn_cap(agents_so_far: int, cap: int, run_id: str) -> None:
    """The lifetime cap on agent invocations per run (a runaway loop stops here, not at the bill)."""
    if agents_so_far >= cap:
        raise AdmissionRejectedError(
            f"admission refused: run {run_id!r} has started {agents_so_far} agents, the lifetime cap is {cap}. "
            f"Look for a loop that spawns agents without end, or raise Engine(max_spawns=...).",
            run_id=run_id, agents=agents_so_far, cap=cap,
        )
