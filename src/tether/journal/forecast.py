"""Spend forecasts: what a new agent call will likely cost, from what calls like it cost before.

The samples are a run's settled agent invocations (their recorded usage and cost). A call is forecast
from the samples with its label, else its agent type, else every sample of the run: min, mean and max
of what each would cost on the model the new call runs on (the recorded cost when the model is the
same, else its usage priced by the one price function). See docs/forks.md.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict

from tether.contracts.entries import JournalEntry
from tether.contracts.prices import Price
from tether.contracts.usage import Usage
from tether.pricing import cost_usd

Basis = Literal["label", "agent_type", "run", "none"]
"""Which samples a forecast came from: the call's label, its agent type, the whole run, or none at all."""


class Forecast(BaseModel):
    """A USD range for one call (or a sum of them): `expected_usd` is the mean of the samples."""

    model_config = ConfigDict(frozen=True)

    min_usd: float = 0.0
    expected_usd: float = 0.0
    max_usd: float = 0.0
    basis: Basis = "none"
    samples: int = 0
    unpriced: bool = False
    """The model has no price row: the figures leave it out."""


@dataclass(frozen=True, slots=True)
class Sample:
    """One settled agent invocation of the source: who it was, what served it, what it used and cost."""

    label: str | None
    agent_type: str | None
    served_by: str | None
    usage: Usage
    cost_usd: float


def samples_of(entries: Iterable[JournalEntry]) -> list[Sample]:
    """Every settled agent invocation (its terminal) with usage, as a forecast sample."""
    out: list[Sample] = []
    for e in entries:
        if e.kind == "agent" and e.ref is not None and e.usage is not None:
            cost = e.cost_usd if e.cost_usd is not None else sum((e.costs or {}).values())
            out.append(Sample(e.label, e.agent_type, e.served_by, e.usage, float(cost)))
    return out


def forecast_call(
    samples: Sequence[Sample], *, label: str | None, agent_type: str | None, model: str,
    price_of: Callable[[str], Price | None],
) -> Forecast:
    """The forecast of one new call on `model` from the samples most like it."""
    basis: Basis = "label"
    chosen = [s for s in samples if label is not None and s.label == label]
    if not chosen:
        basis, chosen = "agent_type", [s for s in samples if agent_type is not None and s.agent_type == agent_type]
    if not chosen:
        basis, chosen = "run", list(samples)
    if not chosen:
        return Forecast()
    price = price_of(model)
    costs: list[float] = []
    for s in chosen:
        if s.served_by == model:
            costs.append(s.cost_usd)
        elif price is not None:
            costs.append(cost_usd(s.usage, price))
    if not costs:
        return Forecast(basis=basis, samples=len(chosen), unpriced=True)
    return Forecast(min_usd=min(costs), expected_usd=sum(costs) / len(costs), max_usd=max(costs), basis=basis,
                    samples=len(chosen), unpriced=len(costs) < len(chosen))


def total(forecasts: Iterable[Forecast]) -> Forecast:
    """The sum of several calls' forecasts."""
    items = list(forecasts)
    return Forecast(
        min_usd=round(sum(f.min_usd for f in items), 10), expected_usd=round(sum(f.expected_usd for f in items), 10),
        max_usd=round(sum(f.max_usd for f in items), 10), basis="run", samples=sum(f.samples for f in items),
        unpriced=any(f.unpriced for f in items),
    )
