"""Token usage of a model call; input counts include cache reads and writes."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

MAX_TOKENS = 2**53
"""The largest token count tether takes (the largest integer a float, and so a price, holds exactly): a
count past it is a validation error, never an `OverflowError` in the pricing."""


class Usage(BaseModel):
    """Tokens a call consumed. `approximate` marks partial usage of a cut or crashed stream.

    Counts are never negative (a negative count is refused where usage is built, and the agent loop
    refuses a reply whose usage was built around validation): usage is never a credit."""

    model_config = ConfigDict(frozen=True)

    input_tokens: int = Field(0, ge=0, le=MAX_TOKENS)
    output_tokens: int = Field(0, ge=0, le=MAX_TOKENS)
    cache_read_tokens: int = Field(0, ge=0, le=MAX_TOKENS)
    cache_write_tokens: int = Field(0, ge=0, le=MAX_TOKENS)
    reasoning_tokens: int = Field(0, ge=0, le=MAX_TOKENS, exclude_if=lambda n: n == 0)
    """The part of `output_tokens` spent on reasoning (thinking); already in `output_tokens`, never billed twice.
    Left out when zero, so usage without reasoning serializes as it did before the field."""
    approximate: bool = False

    def __add__(self, other: Usage) -> Usage:
        # Usage is frozen, so a zero operand returns the other one as it is: the loop adds usage to
        # running totals many times per turn, and at 10,000 agents in flight every copy adds up.
        if other.is_empty():
            return self if other.approximate <= self.approximate else self.model_copy(update={"approximate": True})
        if self.is_empty() and self.approximate <= other.approximate:
            return other
        fields: dict[str, Any] = {}  # only what is set: a small `model_fields_set`, a cheaper validation
        for name in _COUNTS:
            n = getattr(self, name) + getattr(other, name)
            if n:
                fields[name] = n
        if self.approximate or other.approximate:
            fields["approximate"] = True
        return Usage(**fields)

    def minus(self, other: Usage) -> Usage:
        """What this usage adds over `other`, count by count, never negative (`approximate` is this one's)."""
        if other.is_empty():
            return self  # frozen: nothing was taken away, so this very instance is the answer
        fields: dict[str, Any] = {}  # only what is set, as in `__add__`
        for name in _COUNTS:
            n = getattr(self, name) - getattr(other, name)
            if n > 0:
                fields[name] = n
        if self.approximate:
            fields["approximate"] = True
        return Usage(**fields) if fields else ZERO_USAGE

    def is_empty(self) -> bool:
        """No tokens of any kind (`approximate` aside)."""
        return not (self.input_tokens or self.output_tokens or self.cache_read_tokens or self.cache_write_tokens
                    or self.reasoning_tokens)

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    def is_zero(self) -> bool:
        return self.input_tokens == 0 and self.output_tokens == 0


ZERO_USAGE = Usage()
"""No usage: one shared instance (Usage is frozen) for the many running totals that start at zero."""

_COUNTS = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens", "reasoning_tokens")


def sum_usage(items: Iterable[Usage]) -> Usage:
    """`items` added up (as `+` would), building one `Usage` rather than one per item."""
    input_tokens = output_tokens = cache_read = cache_write = reasoning = 0
    approximate = False
    for u in items:
        input_tokens += u.input_tokens
        output_tokens += u.output_tokens
        cache_read += u.cache_read_tokens
        cache_write += u.cache_write_tokens
        reasoning += u.reasoning_tokens
        approximate = approximate or u.approximate
    counts = (input_tokens, output_tokens, cache_read, cache_write, reasoning)
    fields: dict[str, Any] = {name: n for name, n in zip(_COUNTS, counts, strict=True) if n}
    if approximate:
        fields["approximate"] = True
    return Usage(**fields) if fields else ZERO_USAGE
