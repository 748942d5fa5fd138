"""The soak's summary: one table row per store and scenario, then the first example of each violation."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from soak.checks import CHECKS, Verdict, Violation
from soak.runner import StoreResult

COLUMNS = ("store", "scenario", "runs", "kills", "resumes", "re-sent", "re-run", "max billed/bound",
           "over ceiling", *CHECKS, "secs")


def _row(store: str, scenario: str, verdicts: list[Verdict], seconds: str) -> list[str]:
    counts = {check: 0 for check in CHECKS}
    for v in verdicts:
        for violation in v.violations:
            counts[violation.check] += 1
    worst = max((v.billed_usd / v.bound_usd for v in verdicts if v.bound_usd > 0), default=0.0)
    return [store, scenario, str(len(verdicts)), str(sum(v.kills for v in verdicts)),
            str(sum(v.resumes for v in verdicts)), str(sum(v.resent_in_flight for v in verdicts)),
            str(sum(v.rerun_in_flight for v in verdicts)), f"{worst:.3f}", str(sum(v.over_ceiling for v in verdicts)),
            *(str(counts[c]) for c in CHECKS), seconds]


def table(results: Iterable[StoreResult]) -> str:
    rows: list[list[str]] = [list(COLUMNS)]
    for result in results:
        scenarios = sorted({v.scenario for v in result.verdicts})
        for scenario in scenarios:
            rows.append(_row(result.store, scenario, [v for v in result.verdicts if v.scenario == scenario], ""))
        rows.append(_row(result.store, "all", result.verdicts, f"{result.seconds:.0f}"))
    widths = [max(len(r[i]) for r in rows) for i in range(len(COLUMNS))]
    lines = ["  ".join(c.rjust(w) if i > 1 else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True)))
             for r in rows]
    return "\n".join([lines[0], "-" * len(lines[0]), *lines[1:]])


def legend() -> str:
    parts = ["re-sent: model calls sent again after a crash whose reply was not yet durable (allowed re-pay)",
             "re-run: tools/steps run again whose result was not yet durable",
             "max billed/bound: the largest billed spend / (ceiling + bound) of any run",
             "over ceiling: runs whose reported cost (orphans at their worst case included) passed the ceiling after "
             "a segment (a violation, g, under the hard ceiling)"]
    parts += [f"{check}: {text}" for check, text in CHECKS.items()]
    return "\n".join(parts)


def violations(results: Iterable[StoreResult]) -> list[Violation]:
    return [violation for r in results for v in r.verdicts for violation in v.violations]


def examples(results: list[StoreResult], per_check: int = 2) -> str:
    lines: list[str] = []
    for result in results:
        found = [violation for v in result.verdicts for violation in v.violations]
        for check in CHECKS:
            of_check = [v for v in found if v.check == check]
            for v in of_check[:per_check]:
                lines.append(f"  {result.store} {check} ({len(of_check)}x): {v.run_id}: {v.detail}")
    return "\n".join(lines)


def write_json(path: Path, results: list[StoreResult]) -> None:
    data: list[dict[str, Any]] = [
        {"store": r.store, "workdir": str(r.workdir), "seconds": r.seconds, "kills": r.kills,
         "verdicts": [asdict(v) for v in r.verdicts]}
        for r in results
    ]
    path.write_text(json.dumps(data, indent=1))
