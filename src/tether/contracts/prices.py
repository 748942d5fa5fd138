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
