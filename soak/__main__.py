"""`python -m soak`: SIGKILL workflows at random moments on each store, resume them, check every run.

Exits 1 when any check found a violation (the work directory is then kept for inspection).
"""

from __future__ import annotations

import argparse
import asyncio
import random
import shutil
import sys
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path
from typing import get_args

from soak import report
from soak.child import Sabotage
from soak.runner import StoreResult, process_context, soak_store
from soak.scenarios import SCENARIOS, Scenario, scenario_named
from soak.stores import DEFAULT_PG_DSN, STORE_KINDS, StoreKind
from tether import TetherError


def _names(text: str, known: Iterable[str], what: str) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in known]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"unknown {what} {', '.join(unknown)!r}; use some of {', '.join(known)}")
    return names


def _stores(text: str) -> list[StoreKind]:
    names = _names(text, STORE_KINDS, "store")
    return [k for k in STORE_KINDS if k in names]


def _scenarios(text: str) -> list[Scenario]:
    return [scenario_named(n) for n in _names(text, SCENARIOS, "scenario")]


def _empty_dir(text: str) -> Path:
    path = Path(text)
    if path.exists() and any(path.iterdir()):
        raise argparse.ArgumentTypeError(f"{path} is not empty; a soak needs a fresh directory")
    return path


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m soak", description=__doc__)
    parser.add_argument("--kills", type=int, default=100, help="SIGKILLs per store, at least (default 100)")
    parser.add_argument("--stores", type=_stores, default=list(STORE_KINDS), help="comma-separated store kinds")
    parser.add_argument("--scenarios", type=_scenarios, default=list(SCENARIOS.values()),
                        help=f"comma-separated scenarios (default {','.join(SCENARIOS)})")
    parser.add_argument("--jobs", type=int, default=2, help="runs driven at once (default 2)")
    parser.add_argument("--seed", type=int, default=None, help="seed of the kill moments (default: random)")
    parser.add_argument("--pg-dsn", default=DEFAULT_PG_DSN, help="PostgreSQL server for the postgresql store")
    parser.add_argument("--workdir", type=_empty_dir, default=None,
                        help="keep journals, request logs (and the PostgreSQL schema) here")
    parser.add_argument("--sabotage", choices=get_args(Sabotage), default=None,
                        help="inject a fault into the children, to see the checks catch it")
    parser.add_argument("--json", type=Path, default=None, help="write every run's verdict to this file")
    return parser.parse_args(argv)


async def soak(args: argparse.Namespace, workdir: Path) -> list[StoreResult]:
    scenarios: list[Scenario] = args.scenarios
    processes = process_context()
    results: list[StoreResult] = []
    for kind in args.stores:
        rng = random.Random(f"{args.seed}:{kind}")
        print(f"soak: {kind}: {args.kills} kills over {', '.join(s.name for s in scenarios)} ...", flush=True)
        results.append(await soak_store(kind, scenarios, kills=args.kills, jobs=args.jobs, rng=rng,
                                        workdir=workdir / kind, processes=processes, pg_dsn=args.pg_dsn,
                                        keep=args.workdir is not None, sabotage=args.sabotage))
    return results


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    if args.seed is None:
        args.seed = random.randrange(1 << 32)
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="tether-soak-"))
    started = time.monotonic()
    try:
        results = asyncio.run(soak(args, workdir))
    except TetherError as exc:  # a store that cannot be opened, say: one line, not a traceback
        print(f"soak: {exc}", file=sys.stderr)
        return 2
    found = report.violations(results)
    print()
    print(report.table(results))
    print()
    print(report.legend())
    print(f"\nseed {args.seed}; {time.monotonic() - started:.0f} s in all")
    if args.json is not None:
        report.write_json(args.json, results)
    if found:
        print(f"\n{len(found)} violations; first examples:")
        print(report.examples(results))
        print(f"journals and request logs kept in {workdir}")
        return 1
    if args.workdir is None:
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
