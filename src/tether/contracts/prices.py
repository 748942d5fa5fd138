"""Price rows: USD per million tokens, with long-context tiers that re-price the whole request."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class Tier(BaseModel):
    """Above `above_input_tokens` input tokens the *whole* request is priced at these rates."""

    model_config = ConfigDict(frozen=True)

    above_input_tokens: int
    input: float
    output: float
    cache_read: float | None = None
    cache_write: float | None = None


class Price(BaseModel):
    """One model's price row in USD per million tokens; a missing cache rate bills at the input rate."""

    model_config = ConfigDict(frozen=True)

    input: float
    output: float
    cache_read: float | None = None
    cache_write: float | None = None
    tiers: tuple[Tier, ...] = Field(default=())

    def __init__(
        self,
        input: float,
        output: float,
        cache_read: float | None = None,
        cache_write: float | None = None,
        tiers: tuple[Tier, ...] | list[Tier] = (),
    ) -> None:
        super().__init__(
            input=input,
            output=output,
            cache_read=cache_read,
            cache_write=cache_write,
            tiers=tuple(tiers),
        )

    @classmethod
    def free(cls) -> Price:
        """The row of a model nobody bills (a local server): its calls cost 0 USD, journaled as priced.

        A USD ceiling admits it (only an unpriced model is refused there); token ceilings still bound it.
        """
        return cls(input=0.0, output=0.0)

    @property
    def is_free(self) -> bool:
        """Every rate is zero, tiers included: no call of this model can spend."""
        rates = [self.input, self.output, self.cache_read or 0.0, self.cache_write or 0.0]
        rates += [r or 0.0 for t in self.tiers for r in (t.input, t.output, t.cache_read, t.cache_write)]
        return not any(rates)
