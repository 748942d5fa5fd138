"""The soak's checks: pure functions of what the driver saw, the request log and the settled journal.

docs/reliability.md states each definition in prose; the code here is the definition.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal

from soak.driver import RunRecord, settle_decisions
from soak.requestlog import Done, Effect, Sent
from soak.scenarios import Scenario
from tether.contracts.entries import JournalEntry

EPSILON_USD = 1e-9

Check = Literal["a", "a1", "b", "c", "d", "e", "f", "g", "h", "i"]
CHECKS: Mapping[Check, str] = MappingProxyType({
    "a": "a journaled call (or tool/step) performed again",
    "a1": "more than one turn re-paid for one agent after one crash",
    "b": "settled value differs from a clean run's",
    "c": "journaled (settled) spend above the ceiling",
    "d": "billed spend above ceiling + bound",
    "e": "not exactly one terminal settle with the expected status",
    "f": "stored ceiling changed",
    "g": "hard ceiling: reported cost (orphans at worst included) above the ceiling after a segment",
    "h": "run did not settle (child error, hang, or too many segments)",
    "i": "hard ceiling: billed spend above the reported cost",
})


@dataclass(frozen=True)
class Violation:
    check: Check
    run_id: str
    detail: str


@dataclass(frozen=True)
class Baseline:
    """A clean (never killed) run of a scenario on this store."""

    status: str | None
    value: Any
    seconds: float


@dataclass(frozen=True)
class Verdict:
    """One run, checked."""

    scenario: str
    run_id: str
    kills: int
    resumes: int
    resent_in_flight: int
    """Model calls sent again whose reply was not durable when the previous segment died (allowed re-pay)."""
    rerun_in_flight: int
    """Tools and steps run again whose result was not durable when the previous segment died."""
    billed_usd: float
    journaled_usd: float
    bound_usd: float
    violations: tuple[Violation, ...] = field(default=())
    reported_usd: float = 0.0
    """The largest `cost.total_usd` the run reported after any of its segments (orphans at worst included)."""
    overshoot: str = "hard"
    ceiling_usd: float = 0.0

    @property
    def over_ceiling(self) -> bool:
        return self.reported_usd > self.ceiling_usd + EPSILON_USD


def check_run(
    record: RunRecord,
    scenario: Scenario,
    lines: list[Sent | Done | Effect],
    entries: list[JournalEntry],
    journaled_usd: float,
    stored_ceiling: float | None,
    baseline: Baseline,
) -> Verdict:
    """Every check on one settled (or abandoned) run."""
    found: list[Violation] = []
    resent, rerun = _repeats(record, lines, found)
    billed, worst_turn = billed_usd(lines)
    bound = scenario.budget_usd + scenario.agents_at_once * worst_turn
    run = record.run_id
    if record.error is not None or not record.settled:
        found.append(Violation("h", run, (record.error or "not settled").strip().splitlines()[-1]))
    settles = [s for s in settle_decisions(entries) if s.get("status") != "suspended"]
    statuses = [s.get("status") for s in settles]
    if statuses != [scenario.expect_status]:
        found.append(Violation("e", run, f"terminal settles {statuses}, expected [{scenario.expect_status!r}]"))
    if scenario.compare_value and settles and settles[-1].get("value") != baseline.value:
        found.append(Violation("b", run, f"value {_short(settles[-1].get('value'))} != clean "
                                         f"{_short(baseline.value)}"))
    if journaled_usd > scenario.budget_usd + EPSILON_USD:
        found.append(Violation("c", run, f"journaled {journaled_usd:.4f} USD > ceiling {scenario.budget_usd:.4f}"))
    if billed > bound + EPSILON_USD:
        found.append(Violation("d", run, f"billed {billed:.4f} USD > {scenario.budget_usd:.4f} + "
                                         f"{scenario.agents_at_once} x {worst_turn:.4f} = {bound:.4f} "
                                         f"({record.kills} kills)"))
    if stored_ceiling is None or abs(stored_ceiling - scenario.budget_usd) > EPSILON_USD:
        found.append(Violation("f", run, f"stored ceiling {stored_ceiling} != {scenario.budget_usd}"))
    reported = max((s.reported_usd for s in record.segments), default=0.0)
    if scenario.overshoot == "hard":
        over = [s for s in record.segments if s.reported_usd > scenario.budget_usd + EPSILON_USD]
        if over:
            found.append(Violation("g", run, f"reported {over[0].reported_usd:.4f} USD > ceiling "
                                             f"{scenario.budget_usd:.4f} after segment {over[0].number}"))
        final = record.segments[-1].reported_usd if record.segments else 0.0
        if billed > final + unestimated_usd(lines) + EPSILON_USD:
            found.append(Violation("i", run, f"billed {billed:.4f} USD > reported {final:.4f} ({record.kills} kills)"))
    return Verdict(scenario.name, run, record.kills, record.resumes, resent, rerun, billed, journaled_usd, bound,
                   tuple(found), reported, scenario.overshoot, scenario.budget_usd)


def billed_usd(lines: list[Sent | Done | Effect]) -> tuple[float, float]:
    """(what the provider billed, the priced worst-case turn): a reply at its usage, a killed one at its worst."""
    done = {(d.segment, d.n): d for d in lines if isinstance(d, Done)}
    sent = [s for s in lines if isinstance(s, Sent)]
    total = sum(done[(s.segment, s.n)].usd if (s.segment, s.n) in done else s.worst_usd for s in sent)
    return total, max((s.worst_usd for s in sent), default=0.0)


def unestimated_usd(lines: list[Sent | Done | Effect]) -> float:
    """What the requests killed before their reply ended billed beyond the engine's priced worst case of them: the
    input it did not foresee (the hard ceiling's one stated assumption, docs/budgets.md)."""
    done = {(d.segment, d.n) for d in lines if isinstance(d, Done)}
    return sum(s.unestimated_usd for s in lines if isinstance(s, Sent) and (s.segment, s.n) not in done)


def _repeats(record: RunRecord, lines: list[Sent | Done | Effect], found: list[Violation]) -> tuple[int, int]:
    """Checks (a) and (a1); returns the allowed re-sends of in-flight calls and re-runs of in-flight effects.

    An effect performed in segment j whose tag was already performed earlier is a *repeat*. A repeat whose
    tag was durable in the store when segment j-1 ended is violation (a): its completion was journaled.
    Any other repeat was in flight at a crash; more than one such model call for one agent in one segment
    is violation (a1), since the engine promises at most one partial turn per agent per crash.
    """
    performed: set[str] = set()
    journaled: list[str] = []
    resent_by_agent: Counter[tuple[int, str]] = Counter()
    rerun = 0
    for line in lines:
        if isinstance(line, Done):
            continue
        if line.tag not in performed:
            performed.add(line.tag)
            continue
        before = record.segments[line.segment - 2].durable if line.segment >= 2 else frozenset()
        if line.tag in before:
            what = "model call" if isinstance(line, Sent) else f"{line.kind} {line.name!r}"
            journaled.append(f"{what} {line.tag} in segment {line.segment}")
        elif isinstance(line, Sent):
            resent_by_agent[(line.segment, line.thread)] += 1
        else:
            rerun += 1
    if journaled:
        found.append(Violation("a", record.run_id, f"{len(journaled)} journaled effects performed again, first: "
                                                  f"{journaled[0]}"))
    over = [(segment, thread, n) for (segment, thread), n in resent_by_agent.items() if n > 1]
    if over:
        segment, thread, n = over[0]
        found.append(Violation("a1", record.run_id, f"{len(over)} agents re-paid more than one in-flight turn "
                                                   f"after one crash, first: agent {thread} re-sent {n} in "
                                                   f"segment {segment}"))
    return sum(resent_by_agent.values()), rerun


def _short(value: Any, limit: int = 100) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
