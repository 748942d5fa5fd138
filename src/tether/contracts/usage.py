"""Token usage of a model call; input counts include cache reads and writes."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, SerializerFunctionWrapHandler, model_serializer


class Usage(BaseModel):
    """Tokens a call consumed. `approximate` marks partial usage of a cut or crashed stream."""

    model_config = ConfigDict(frozen=True)

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    reasoning_tokens: int = 0
    """The part of `output_tokens` spent on reasoning (thinking); already in `output_tokens`, never billed twice."""
    approximate: bool = False

    @model_serializer(mode="wrap")
    def _sparse(self, handler: SerializerFunctionWrapHandler) -> Any:
        # Zero reasoning is left out, so usage without reasoning serializes as it did before the field.
        data = handler(self)
        if isinstance(data, dict) and data.get("reasoning_tokens") == 0:
            del data["reasoning_tokens"]
        return data

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            cache_read_tokens=self.cache_read_tokens + other.cache_read_tokens,
            cache_write_tokens=self.cache_write_tokens + other.cache_write_tokens,
            reasoning_tokens=self.reasoning_tokens + other.reasoning_tokens,
            approximate=self.approximate or other.approximate,
        )

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    def is_zero(self) -> bool:
        return self.input_tokens == 0 and self.output_tokens == 0


def sum_usage(items: list[Usage]) -> Usage:
    total = Usage()
    for u in items:
        total = total + u
    return total
