"""A token count past 2**53 is a typed validation error, never a raw OverflowError in the pricing (issue 43)."""

from __future__ import annotations

from typing import Any

import pydantic
import pytest

import tether
from tether.contracts.usage import MAX_TOKENS
from tether.testing import Reply


def test_usage_past_max_tokens_is_a_validation_error() -> None:
    with pytest.raises(pydantic.ValidationError, match="less than or equal to"):
        tether.Usage(input_tokens=10**400)
    assert tether.Usage(input_tokens=MAX_TOKENS).input_tokens == MAX_TOKENS


def test_a_containment_token_ceiling_of_10_to_the_400_is_a_config_error() -> None:
    with pytest.raises(tether.ConfigError, match="max_tokens must be a whole number"):
        tether.Containment(max_agents=2, max_concurrent=1, max_depth=1, max_tokens=10**400)


async def test_a_reply_claiming_10_to_the_400_tokens_ends_the_run_typed_not_overflowing() -> None:
    model = tether.models.fake("fake", script=lambda r: Reply(text="hi", input_tokens=10**400, output_tokens=1),
                               prices={"m": tether.Price(input=1.0, output=1.0)})
    engine = tether.Engine(models=[model], routing={"loop": "fake:m"}, store="memory://")

    @tether.workflow(name="huge")
    async def huge(ctx: tether.Ctx) -> Any:
        return await ctx.agent("x")

    try:
        out = await engine.run(huge, run_id="huge-1", budget_usd=1.0)
    finally:
        await engine.close()
    assert out.status == "error" and "OverflowError" not in str(out.error) and "input_tokens" in str(out.error)
