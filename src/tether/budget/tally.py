"""The tally: what one invocation's calls spent, as its checkpoints and its terminal journal it."""

from __future__ import annotations

from pydantic import BaseModel

from tether.contracts.usage import ZERO_USAGE, Usage


class Tally(BaseModel):
    """What an invocation's calls cost so far; checkpointed so a redispatch never loses it."""

    costs: dict[str, float] = {}
    unpriced: dict[str, Usage] = {}
    usage_by_model: dict[str, Usage] = {}
    provider_calls: int = 0
    through: int = 0
    """The highest journaled dispatch number whose spend this tally holds (see `journal.cost`)."""
    orphaned: dict[str, float] = {}
    """Spend of dispatches earlier crashes cut off (charged at their worst case), so a later crash keeps it."""
    cut: list[int] = []
    """The numbers of those dispatches."""


class SpendTally:
    """The live tally of one invocation: USD and usage per model, its provider calls, what crashes cut off, and
    what the next turn draw will journal. Only its own methods change it; everything else reads it."""

    __slots__ = ("costs", "cut", "orphaned", "provider_calls", "undrawn_costs", "undrawn_tokens", "undrawn_usage",
                 "unpriced", "usage_by_model")

    def __init__(self) -> None:
        self.costs: dict[str, float] = {}
        self.unpriced: dict[str, Usage] = {}
        self.usage_by_model: dict[str, Usage] = {}
        self.provider_calls = 0
        self.orphaned: dict[str, float] = {}
        """Spend of dispatches a crash cut off before they settled, per model (already on the accounts)."""
        self.cut: list[int] | tuple[()] = ()
        """The numbers of the dispatches `orphaned` charges (a list once a crash left some; an empty list made per
        invocation would be one more object per agent in flight)."""
        self.undrawn_tokens = 0
        self.undrawn_usage = ZERO_USAGE
        self.undrawn_costs: dict[str, float] = {}

    @property
    def cost_usd(self) -> float:
        return sum(self.costs.values())

    @property
    def orphaned_usd(self) -> float:
        return sum(self.orphaned.values())

    @property
    def usage(self) -> Usage:
        total = ZERO_USAGE
        for u in self.usage_by_model.values():
            total = total + u
        return total

    def snapshot(self, through: int = 0) -> Tally:
        """The checkpointed form, holding the spend of every dispatch up to `through`."""
        return Tally(costs=dict(self.costs), unpriced=dict(self.unpriced), usage_by_model=dict(self.usage_by_model),
                     provider_calls=self.provider_calls, through=through, orphaned=dict(self.orphaned),
                     cut=list(self.cut))

    def restore(self, tally: Tally) -> int:
        """Take a checkpoint's spend back (a redispatch); returns the tokens it holds."""
        self.costs = dict(tally.costs)
        self.unpriced = dict(tally.unpriced)
        self.usage_by_model = dict(tally.usage_by_model)
        self.provider_calls = tally.provider_calls
        return sum(u.input_tokens + u.output_tokens for u in tally.usage_by_model.values())

    def carry_lost(self, drawn: dict[str, float], orphaned: dict[str, float], cut: list[int], calls: int) -> None:
        """What a crash cut off after the checkpoint: turns drawn (paid; they count as spend), the dispatches no
        draw settled (at their worst case) with their numbers, and the provider calls made past the checkpoint."""
        for model, usd in drawn.items():
            self.costs[model] = self.costs.get(model, 0.0) + usd
        self.orphaned = dict(orphaned)
        self.cut = list(cut)
        self.provider_calls += calls

    def call_made(self) -> None:
        self.provider_calls += 1

    def call_unsent(self) -> None:
        """The last call's request never left (its connection failed): it is no provider call."""
        self.provider_calls = max(0, self.provider_calls - 1)

    def record(self, served_by: str, delta: Usage, inc_usd: float | None) -> None:
        """A call's usage increment and what it cost (`inc_usd`; None: the model is unpriced, so it is itemized)."""
        self.usage_by_model[served_by] = self.usage_by_model.get(served_by, ZERO_USAGE) + delta
        self.undrawn_tokens += delta.input_tokens + delta.output_tokens
        self.undrawn_usage = self.undrawn_usage + delta
        if inc_usd is None:
            self.unpriced[served_by] = self.unpriced.get(served_by, ZERO_USAGE) + delta
            return
        # A free (local) model is priced at 0: it still belongs in `by_model`, as 0, never missing.
        self.costs[served_by] = self.costs.get(served_by, 0.0) + inc_usd
        self.undrawn_costs[served_by] = self.undrawn_costs.get(served_by, 0.0) + inc_usd

    def take_draw(self) -> tuple[int, dict[str, float], Usage]:
        """Tokens, USD per model and usage drawn since the last call (one `budget_draw` per model turn)."""
        drawn = (self.undrawn_tokens, self.undrawn_costs, self.undrawn_usage)
        self.undrawn_tokens, self.undrawn_costs, self.undrawn_usage = 0, {}, ZERO_USAGE
        return drawn
