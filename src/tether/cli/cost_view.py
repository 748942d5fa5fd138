"""How a cost report reads on the shell: one phrasing of spent, orphaned and the ceiling for every command."""

from __future__ import annotations

import shlex
from datetime import UTC, datetime

from tether.journal.cost import CostReport


def total_phrase(report: CostReport, ceiling: float | None = None) -> str:
    """`0.165000 USD of 0.20 USD ceiling (0.000800 spent + 0.164200 orphaned)`."""
    ceiling = report.ceiling_usd if report.ceiling_usd is not None else ceiling
    against = f" of {ceiling:.2f} USD ceiling" if ceiling is not None else " (no ceiling)"
    split = (f" ({report.spent_usd:.6f} spent + {report.orphaned_usd:.6f} orphaned)"
             if report.orphaned_calls or report.orphaned_usd else "")
    return f"{report.total_usd:.6f} USD{against}{split}"


def orphan_line(report: CostReport, run_id: str) -> str | None:
    """What the orphaned figure is and what to do about it; None when no call was cut off."""
    if not report.orphaned_calls and not report.orphaned_usd:
        return None
    calls = f"{report.orphaned_calls} call{'s' if report.orphaned_calls != 1 else ''} cut off by a crash"
    settled = report.settlement
    if settled is not None:
        when = datetime.fromtimestamp(settled.at, tz=UTC).strftime("%Y-%m-%d %H:%M UTC") if settled.at else ""
        why = f": {settled.reason}" if settled.reason else ""
        return (f"{report.orphaned_usd:.6f} USD for {calls}, settled by {settled.by or 'an operator'} {when} "
                f"(was {settled.old_usd:.6f} at their worst case{why})")
    return (f"{report.orphaned_usd:.6f} USD for {calls}, charged at their worst case; once the provider's usage "
            f"records show what they cost: tether settle-orphans {shlex.quote(run_id)} --usd X")
