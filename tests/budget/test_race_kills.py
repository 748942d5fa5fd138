"""The 200-agent race on 0.50 USD, SIGKILLed at random moments and resumed in new processes (the soak harness).

Each kill cuts every in-flight call; the provider bills those anyway. Under the hard ceiling (the default) the
run never reports more than the ceiling after any segment, its orphans at their worst case included, and what
the fake provider's request log says was billed never exceeds what the run reports. Under the bounded mode
billed spend stays inside ceiling + one clamped turn per concurrently running agent (0.50 + 50 x 0.006 USD).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
CEILING_USD, BOUNDED_USD = 0.50, 50 * 0.006


def soak(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], list[dict[str, Any]]]:
    """Run `python -m soak` on a SQLite store and return its per-run verdicts."""
    out = tmp_path / "verdicts.json"
    proc = subprocess.run(
        [sys.executable, "-m", "soak", "--stores", "sqlite", "--jobs", "1", "--workdir", str(tmp_path / "work"),
         "--json", str(out), *args],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
    )
    assert out.exists(), proc.stdout + proc.stderr
    [store] = json.loads(out.read_text())
    return proc, store["verdicts"]


def test_a_killed_race_never_reports_more_than_the_hard_ceiling_and_is_never_billed_more_than_it_reports(
    tmp_path: Path,
) -> None:
    proc, verdicts = soak(tmp_path, "--scenarios", "race", "--kills", "8", "--seed", "17")
    killed = [v for v in verdicts if v["kills"] > 0]
    assert sum(v["kills"] for v in killed) >= 8 and killed, proc.stdout
    for v in verdicts:
        assert v["overshoot"] == "hard"
        assert v["reported_usd"] <= CEILING_USD + 1e-9, f"{v['run_id']}: reported {v['reported_usd']:.4f} USD"
        assert v["billed_usd"] <= CEILING_USD + 1e-9, f"{v['run_id']}: billed {v['billed_usd']:.4f} USD"
    assert [x for v in verdicts for x in v["violations"]] == [], proc.stdout  # g and i among them
    assert proc.returncode == 0, proc.stdout


def test_billed_spend_stays_inside_the_bounded_modes_bound_when_the_race_is_killed_and_resumed(
    tmp_path: Path,
) -> None:
    proc, verdicts = soak(tmp_path, "--scenarios", "race-bounded", "--kills", "8", "--seed", "17")
    killed = [v for v in verdicts if v["kills"] > 0]
    assert sum(v["kills"] for v in killed) >= 8 and killed, proc.stdout
    for v in verdicts:
        assert abs(v["bound_usd"] - (CEILING_USD + BOUNDED_USD)) < 1e-9  # the harness priced the turn right
        assert v["billed_usd"] <= CEILING_USD + BOUNDED_USD + 1e-9, (
            f"{v['run_id']}: billed {v['billed_usd']:.4f} USD after {v['kills']} kills, "
            f"bound {CEILING_USD + BOUNDED_USD:.4f}"
        )
    assert [x for v in verdicts for x in v["violations"]] == [], proc.stdout
    assert proc.returncode == 0, proc.stdout
