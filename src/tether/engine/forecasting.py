"""Run forecasts: what a run of a workflow will likely cost (USD, provider calls, tokens) before it starts.

`engine.forecast` is `tether.engine.forecast`; this module is what it, the gate and the settle share.

A forecast rests on the workflow's past runs that settled `ok` with the same code (the genesis journals the body's
`code_hash`): the figures each run's settle put in its meta (its cost report's, never recomputed), read from the
store's run listing, so no journal is loaded but those of runs settled before this version. With too few runs of
the current code, the newest run of an older version is previewed as a fork under the new code (the fork
preview's per-call forecast) and that version's spread is scaled by what the preview says changed. The
`forecast_gate=` run option judges a new run by its P95 (docs/budgets.md, *Forecasts*).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict

from tether.contracts.budgets import BudgetLedger
from tether.contracts.errors import TetherError
from tether.contracts.money import usd
from tether.contracts.protocols import JournalStore
from tether.journal.canonical import to_jsonable
from tether.journal.cost import CostReport, fold_cost
from tether.journal.keys import args_hash, external_key

if TYPE_CHECKING:
    from tether.engine.options import SegmentOptions
    from tether.engine.segment import Segment
    from tether.engine.services import RunServices
    from tether.engine.workflow import Workflow
    from tether.journal.matching import JournalIndex

SETTLED_COST = "settled_cost"
"""The member of a settled run's meta holding its cost report's figures (`total_usd`, `provider_calls`, `tokens`)."""
MIN_RUNS = 5
"""Fewer settled runs of the same code than this is "not enough history"."""
DEFAULT_RUNS = 40
"""How many of the newest matching runs a forecast rests on by default."""
SCAN_LIMIT = 2_000
"""How many of the store's newest runs a forecast lists (one read of the run listing)."""
CONFIDENCE = 0.90
"""P90 and P95 are upper bounds that many runs stay under with this confidence (a small history widens them)."""

Basis = Literal["history", "preview", "none"]
"""What a forecast rests on: runs of the same code, an older version's runs scaled by a fork preview, or nothing."""


class Percentiles(BaseModel):
    """One figure's forecast: the median and the upper bounds 90% and 95% of runs stay under."""

    model_config = ConfigDict(frozen=True)

    p50: float
    p90: float
    p95: float


class Forecast(BaseModel):
    """What a run of `workflow` will likely cost, from its past settled runs (`engine.forecast`)."""

    model_config = ConfigDict(frozen=True)

    workflow: str
    code_hash: str
    """The code the forecast is for (the workflow body's hash, as the genesis journals it)."""
    runs: int = 0
    """The settled runs it rests on."""
    min_runs: int = MIN_RUNS
    enough: bool = False
    """False: "not enough history" (fewer than `min_runs` runs and no older version to preview); no figures."""
    basis: Basis = "none"
    same_args: bool = False
    """The runs all had these args (used when at least `min_runs` did)."""
    cost_usd: Percentiles | None = None
    calls: Percentiles | None = None
    """Provider calls."""
    tokens: Percentiles | None = None
    """Input plus output tokens."""
    other_code_runs: int = 0
    """Settled runs of other versions of the code: left out, or (basis `preview`) scaled."""
    previewed_run: str | None = None
    """The older version's run previewed under the new code (basis `preview`)."""
    scale: float | None = None
    """What the preview says the new code costs, over what that run cost (basis `preview`)."""

    @property
    def p95_usd(self) -> float | None:
        return self.cost_usd.p95 if self.cost_usd is not None else None

    def summary(self) -> str:
        """One line for people: the figures and what they rest on, or why there are none."""
        if not self.enough or self.cost_usd is None:
            return (f"not enough history: {self.runs} settled run(s) of this code of {self.workflow!r} "
                    f"(at least {self.min_runs} needed)")
        c = self.cost_usd
        rest = f"{self.runs} runs" + (f", scaled x{self.scale:.3g} by a preview of {self.previewed_run}"
                                      if self.basis == "preview" else "")
        return f"P50 {usd(c.p50)} / P90 {usd(c.p90)} / P95 {usd(c.p95)} USD (from {rest})"


class JudgedForecast(BaseModel):
    """The forecast a `forecast_gate` judged a run by (journaled in its genesis, kept in its meta): `tether runs`
    and the inspector show it beside the ceiling."""

    model_config = ConfigDict(frozen=True)

    gate: str
    over: bool
    """Its P95 was over `limit_usd` (under "suspend" the run parked for an operator's approval)."""
    limit_usd: float | None = None
    p50_usd: float | None = None
    p90_usd: float | None = None
    p95_usd: float | None = None
    runs: int = 0
    enough: bool = False

    @classmethod
    def of(cls, genesis_value: Any) -> JudgedForecast | None:
        """The judged forecast in a genesis value (None: the run had no `forecast_gate`)."""
        f = genesis_value.get("forecast") if isinstance(genesis_value, dict) else None
        if not isinstance(f, dict):
            return None
        raw = f.get("cost_usd")
        cost: dict[str, Any] = raw if isinstance(raw, dict) else {}
        return cls(gate=str(f.get("gate")), over=bool(f.get("over")), limit_usd=f.get("limit_usd"),
                   p50_usd=cost.get("p50"), p90_usd=cost.get("p90"), p95_usd=cost.get("p95"),
                   runs=int(f.get("runs") or 0), enough=bool(f.get("enough")))


def forecast_meta(index: JournalIndex) -> dict[str, Any]:
    """What a run's meta keeps of the forecast its genesis was judged by (`{"forecast": ...}`, or nothing)."""
    from tether.engine.options import genesis_of

    genesis = genesis_of(index.entries[:1])
    judged = JudgedForecast.of(genesis.value) if genesis is not None else None
    return {"forecast": judged.model_dump(mode="json")} if judged is not None else {}


class ForecastRefusedError(TetherError):
    """`forecast_gate="refuse"`: the run's forecast P95 exceeds what it may spend; nothing was written."""

    code = "forecast-refused"


@dataclass(frozen=True, slots=True)
class _Sample:
    run_id: str
    code_hash: str | None
    args_hash: str | None
    total_usd: float
    calls: float
    tokens: float


def settled_cost(cost: CostReport) -> dict[str, Any]:
    """The figures a settle keeps in the run's meta for forecasts: its cost report's."""
    return {"total_usd": cost.total_usd, "provider_calls": cost.provider_calls,
            "tokens": cost.usage.input_tokens + cost.usage.output_tokens}


def started_code(index: JournalIndex, wf: Workflow) -> str:
    """The code hash the run's genesis journaled (a resume under edited code keeps its run's), else `wf`'s."""
    from tether.engine.options import genesis_of

    genesis = genesis_of(index.entries[:1])
    code = genesis.value.get("code_hash") if genesis is not None and isinstance(genesis.value, dict) else None
    return code if isinstance(code, str) else wf.code_hash


async def forecast_from(store: JournalStore, services: RunServices, wf: Workflow, args: Mapping[str, Any] | None,
                        *, runs: int = DEFAULT_RUNS) -> Forecast:
    """The forecast of a run of `wf` from the runs in `store` (reads only; a preview runs in a scratch store)."""
    if runs < 1:
        raise ValueError(f"runs must be at least 1, got {runs}")
    code, a_hash = wf.code_hash, args_hash(to_jsonable(dict(args or {}), what="workflow args"))
    samples = await _samples(store, wf.name, runs)
    same = [s for s in samples if s.code_hash == code]
    other = [s for s in samples if s.code_hash != code]
    base = Forecast(workflow=wf.name, code_hash=code, runs=len(same), other_code_runs=len(other))
    if len(same) >= MIN_RUNS:
        by_args = [s for s in same if s.args_hash == a_hash]
        chosen, same_args = (by_args, True) if len(by_args) >= MIN_RUNS else (same, False)
        chosen = chosen[:runs]
        return base.model_copy(update={"runs": len(chosen), "enough": True, "basis": "history",
                                       "same_args": same_args, **_figures(chosen, 1.0)})
    if len(other) < MIN_RUNS:
        return base
    newest, preview = other[0], services.forecast_preview
    scale = None if preview is None or newest.total_usd <= 0 else await preview(store, services, wf, args,
                                                                                newest.run_id)
    if scale is None:
        return base
    scale /= newest.total_usd
    chosen = other[:runs]
    return base.model_copy(update={"runs": len(chosen), "enough": True, "basis": "preview",
                                   "previewed_run": newest.run_id, "scale": scale, **_figures(chosen, scale)})


async def _samples(store: JournalStore, workflow: str, runs: int) -> list[_Sample]:
    """The workflow's runs that settled `ok` (no forks), newest first, from the run listing; a run settled before
    its meta kept figures has its journal folded (at most `runs` of them)."""
    out: list[_Sample] = []
    folded = 0
    for meta in await store.list_runs(limit=SCAN_LIMIT):
        if meta.workflow != workflow or meta.status != "ok" or meta.parent_run_id is not None:
            continue
        extra = meta.model_extra or {}
        figures, code = extra.get(SETTLED_COST), extra.get("code_hash")
        if not isinstance(figures, dict):
            if folded >= runs:
                continue
            folded += 1
            entries = await store.load(meta.run_id)
            first = entries[0].value if entries and isinstance(entries[0].value, dict) else {}
            code, figures = first.get("code_hash"), settled_cost(fold_cost(entries))
        out.append(_Sample(meta.run_id, code if isinstance(code, str) else None, meta.args_hash,
                           float(figures.get("total_usd") or 0.0), float(figures.get("provider_calls") or 0),
                           float(figures.get("tokens") or 0)))
    return out


def _figures(samples: Sequence[_Sample], scale: float) -> dict[str, Percentiles]:
    return {"cost_usd": _percentiles([s.total_usd * scale for s in samples], whole=False),
            "calls": _percentiles([s.calls * scale for s in samples], whole=True),
            "tokens": _percentiles([s.tokens * scale for s in samples], whole=True)}


def _percentiles(values: Sequence[float], *, whole: bool) -> Percentiles:
    p50, p90, p95 = statistics.median(values), upper_bound(values, 0.90), upper_bound(values, 0.95)
    if whole:
        return Percentiles(p50=float(math.ceil(p50)), p90=float(math.ceil(p90)), p95=float(math.ceil(p95)))
    return Percentiles(p50=round(p50, 10), p90=round(p90, 10), p95=round(p95, 10))


def upper_bound(values: Sequence[float], q: float, confidence: float = CONFIDENCE) -> float:
    """A value at least `q` of runs stay under, with `confidence`: the larger of the empirical quantile and a
    log-normal tolerance bound (Natrella's factor), so a small or skewed history is not read as a tight one."""
    ordered = sorted(values)
    n = len(ordered)
    empirical = ordered[min(n, math.ceil(q * n)) - 1]
    positive = [v for v in ordered if v > 0]
    if len(positive) < 3 or len(positive) < n:
        return empirical
    logs = [math.log(v) for v in positive]
    z_p, z_g = statistics.NormalDist().inv_cdf(q), statistics.NormalDist().inv_cdf(confidence)
    a = 1 - z_g**2 / (2 * (n - 1))
    b = z_p**2 - z_g**2 / n
    k = (z_p + math.sqrt(max(z_p**2 - a * b, 0.0))) / a
    return max(empirical, math.exp(statistics.fmean(logs) + k * statistics.stdev(logs)))


# -- the gate ------------------------------------------------------------------------------------
async def gate(store: JournalStore, services: RunServices, run_id: str, wf: Workflow, args: Mapping[str, Any] | None,
               opts: SegmentOptions) -> dict[str, Any] | None:
    """Judge a new run by its forecast (`forecast_gate=`): None for a run that exists already (its genesis says
    how it was judged); `ForecastRefusedError` under "refuse" when its P95 is over the limit; else what the
    genesis journals (the forecast, the limit, and whether it was over: under "suspend" it then parks)."""
    if opts.forecast_gate is None or await store.get_meta(run_id) is not None or await store.load(run_id):
        return None
    f = await forecast_from(store, services, wf, args)
    limit, against = await _limit(store, services, opts)
    p95 = f.p95_usd
    over = p95 is not None and limit is not None and p95 > limit
    if over and opts.forecast_gate == "refuse":
        assert p95 is not None and limit is not None
        raise ForecastRefusedError(
            f"forecast refused run {run_id!r}: {wf.name!r} is forecast at {f.summary()}, and its P95 of {usd(p95)} "
            f"USD exceeds {against} of {usd(limit)} USD; nothing was written. Raise budget_usd= (or the budget), "
            f"or start it with forecast_gate=\"suspend\" to ask an operator.",
            run_id=run_id, workflow=wf.name, p95_usd=p95, limit_usd=limit, against=against, runs=f.runs,
        )
    return {"gate": opts.forecast_gate, "over": over, "limit_usd": limit, "against": against,
            **f.model_dump(mode="json")}


async def _limit(store: JournalStore, services: RunServices, opts: SegmentOptions) -> tuple[float | None, str]:
    """What the run may spend: its ceiling, or a budget's remaining USD in its current window when less."""
    limit, against = opts.ceiling, "its ceiling"
    if opts.budgets and isinstance(store, BudgetLedger):
        now = services.clock()
        for b in opts.budgets:
            start = b.window_start(now)
            used = next((u for u in await store.budget_usage(b.scope) if u.window_start == start), None)
            left = b.usd - (used.charged_usd + used.held_usd if used is not None else 0.0)
            if limit is None or left < limit:
                limit, against = max(left, 0.0), f"what budget scope {b.scope!r} has left"
    return limit, against


FORECAST_KEY = "forecast"
"""The key of the suspension a run parks on under `forecast_gate="suspend"` (`tether resolve RUN forecast approve`)."""
APPROVE = "approve"


async def hold(seg: Segment) -> None:
    """Before the body runs: park on the `forecast` suspension when the genesis says the run was over its limit
    under `forecast_gate="suspend"` (its value carries the forecast); returns once an operator approved it."""
    from tether.contracts.entries import JournalEntry
    from tether.contracts.events import ExternalWaiting
    from tether.engine.options import genesis_of

    genesis = genesis_of(seg.index.entries[:1])
    judged = genesis.value.get("forecast") if genesis is not None and isinstance(genesis.value, dict) else None
    if not isinstance(judged, dict) or not judged.get("over") or judged.get("gate") != "suspend":
        return
    k = external_key(FORECAST_KEY)
    found = seg.replay.lookup("", k)
    if found.match is not None:
        entry = found.match.entry
    else:
        seg.replay.require_live(f"the {FORECAST_KEY} approval", "")
        schema = {"type": "string", "enum": [APPROVE]}
        entry = await seg.journal.append(JournalEntry(
            kind="external", key=k, ordinal=seg.index.next_ordinal("", k), status="suspended", label=FORECAST_KEY,
            started_at=seg.services.clock(), value={"key": FORECAST_KEY, "schema": schema, "forecast": judged}))
    await seg.waits.suspend("", entry, FORECAST_KEY, ExternalWaiting(key=FORECAST_KEY))
