"""How a cost report reads on the shell: one phrasing of spent, orphaned, reused and the ceiling for every command,
and the one way a USD amount is printed (`usd`: to its precision, never a 0.001 ceiling as 0.00)."""

from __future__ import annotations

import shlex
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from tether.contracts.money import usd

if TYPE_CHECKING:
    from tether.journal.cost import CostReport


def total_phrase(report: CostReport, ceiling: float | None = None) -> str:
    """`0.165 USD of 0.20 USD ceiling (0.0008 spent + 0.1642 orphaned)`."""
    ceiling = report.ceiling_usd if report.ceiling_usd is not None else ceiling
    against = f" of {usd(ceiling)} USD ceiling" if ceiling is not None else " (no ceiling)"
    split = (f" ({usd(report.spent_usd)} spent + {usd(report.orphaned_usd)} orphaned)"
             if report.orphaned_calls or report.orphaned_usd else "")
    return f"{usd(report.total_usd)} USD{against}{split}"


def orphan_line(report: CostReport, run_id: str) -> str | None:
    """What the orphaned figure is and what to do about it; None when no call was cut off."""
    if not report.orphaned_calls and not report.orphaned_usd:
        return None
    calls = f"{report.orphaned_calls} call{'s' if report.orphaned_calls != 1 else ''} cut off by a crash"
    settled = report.settlement
    if settled is not None:
        when = datetime.fromtimestamp(settled.at, tz=UTC).strftime("%Y-%m-%d %H:%M UTC") if settled.at else ""
        why = f": {settled.reason}" if settled.reason else ""
        return (f"{usd(report.orphaned_usd)} USD for {calls}, settled by {settled.by or 'an operator'} {when} "
                f"(was {usd(settled.old_usd)} at their worst case{why})")
    return (f"{usd(report.orphaned_usd)} USD for {calls}, charged at their worst case; once the provider's usage "
            f"records show what they cost: tether settle-orphans {shlex.quote(run_id)} --usd X")


def reused_line(report: CostReport, source: str | None = None) -> str | None:
    """A fork's reuse: what its source paid for the calls it reused (not billed again); None for other runs."""
    if not report.reused_calls and not report.reused_usd:
        return None
    s = "s" if report.reused_calls != 1 else ""
    by = f" {source}" if source else " the source"
    return (f"{usd(report.reused_usd)} USD for {report.reused_calls} agent call{s} ({report.reused_provider_calls} "
            f"provider calls) reused from{by}, which paid for them (not billed again, not in the total)")


def lost_lines(report: CostReport) -> list[str]:
    """Each call paid and lost to a kill, and how it is charged (its recorded usage, or its worst case)."""
    how = {"recorded": "at its recorded usage (in spent: the turn was sent again)",
           "worst-case": "at its worst case (in orphaned)", "settled": "as the operator settled it (in orphaned)"}
    out = []
    for lost in report.lost:
        calls = ", ".join(str(c) for c in lost.calls)
        out.append(f"agent #{lost.agent_id} call{'s' if len(lost.calls) != 1 else ''} {calls} on {lost.model}: "
                   f"{usd(lost.usd)} USD, charged {how[lost.charged]}")
    return out
