"""Pricing: price rows per `adapter:model` and the one price function every budget path uses."""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from typing import Any

from tether.contracts.prices import Price, Tier
from tether.contracts.usage import Usage

# Adapter ids people use for a provider, where they differ from genai-prices' own provider id.
_PROVIDER_ALIASES = {
    "xai": "x-ai", "grok": "x-ai", "gemini": "google", "vertex": "google", "bedrock": "aws",
    "fireworks-ai": "fireworks", "togetherai": "together", "moonshot": "moonshotai", "zhipu": "zhipuai",
}


def genai_provider(adapter_or_provider: str) -> str | None:
    """The genai-prices provider id for a tether adapter id (`groq`, `xai`, `openrouter`, ...), if any."""
    from genai_prices import data

    name = _PROVIDER_ALIASES.get(adapter_or_provider, adapter_or_provider)
    return name if any(p.id == name for p in data.providers) else None


WILDCARD = "*"
"""`adapter:*` in a `PriceTable` prices every model of that adapter that has no row of its own."""


class PriceTable:
    """Price rows keyed by `adapter:model` (or `adapter:*` for all of an adapter's models); rows given win over
    the bundled genai-prices data, an exact row over a wildcard."""

    def __init__(self, rows: Mapping[str, Price] | None = None, *, bundled: bool = True) -> None:
        self._rows: dict[str, Price] = dict(rows or {})
        self._bundled = bundled
        self._cache: dict[str, Price | None] = {}

    def with_rows(self, rows: Mapping[str, Price]) -> PriceTable:
        """A new table with `rows` added on top of this one."""
        merged = PriceTable({**self._rows, **rows}, bundled=self._bundled)
        return merged

    def __contains__(self, ref: str) -> bool:
        return self.get(ref) is not None

    def __iter__(self) -> Iterator[str]:
        return iter(self._rows)

    def get(self, ref: str) -> Price | None:
        """The row for `adapter:model`, or None when nobody knows its price."""
        try:
            return self._cache[ref]  # the answer for a ref never changes: the rows are fixed (`with_rows` copies)
        except KeyError:
            pass
        adapter, _, model = ref.partition(":")
        found = self._rows.get(ref) or self._rows.get(f"{adapter}:{WILDCARD}")
        if found is None and self._bundled:
            found = bundled_price(adapter, model)
        self._cache[ref] = found
        return found


def bundled_price(adapter: str, model: str) -> Price | None:
    """The price row genai-prices has for this model today, converted to a tether `Price`.

    `adapter` is an adapter id or a genai-prices provider id (see `genai_provider`).
    """
    provider_id = genai_provider(adapter) if model else None
    if provider_id is None:
        return None
    info = bundled_model_info(provider_id, model)
    if info is None:
        return None
    try:
        mp = info.get_prices(datetime.now(UTC))
    except Exception:  # a data shape this version does not understand: unpriced, never zero
        return None
    return _from_genai(mp)


def bundled_model_info(provider_id: str, model: str) -> Any:
    from genai_prices import data

    for provider in data.providers:
        if provider.id == provider_id:
            return provider.find_model(model)
    return None


def _rate_and_tiers(value: Any) -> tuple[float | None, dict[int, float]]:
    if value is None:
        return None, {}
    base = getattr(value, "base", None)
    if base is None:
        return float(value), {}
    return float(base), {int(t.start): float(t.price) for t in value.tiers}


def _from_genai(mp: Any) -> Price | None:
    inp, in_t = _rate_and_tiers(mp.input_mtok)
    out, out_t = _rate_and_tiers(mp.output_mtok)
    if inp is None or out is None:
        return None
    cr, cr_t = _rate_and_tiers(mp.cache_read_mtok)
    cw, cw_t = _rate_and_tiers(mp.cache_write_mtok)
    tiers = [
        Tier(
            above_input_tokens=start,
            input=rate,
            output=out_t.get(start, out),
            cache_read=cr_t.get(start, cr),
            cache_write=cw_t.get(start, cw),
        )
        for start, rate in sorted(in_t.items())
    ]
    return Price(input=inp, output=out, cache_read=cr, cache_write=cw, tiers=tiers)


def rates_for(price: Price, input_tokens: int) -> tuple[float, float, float, float]:
    """(input, output, cache_read, cache_write) USD/M for a request of `input_tokens` (tier-aware)."""
    inp, out, cr, cw = price.input, price.output, price.cache_read, price.cache_write
    for tier in sorted(price.tiers, key=lambda t: t.above_input_tokens):
        if input_tokens > tier.above_input_tokens:
            inp, out = tier.input, tier.output
            cr = tier.cache_read if tier.cache_read is not None else cr
            cw = tier.cache_write if tier.cache_write is not None else cw
    return inp, out, (cr if cr is not None else inp), (cw if cw is not None else inp)


def cost_usd(usage: Usage, price: Price) -> float:
    """The one price function: USD for a call's whole usage; a crossed tier re-prices all of it."""
    inp, out, cr, cw = rates_for(price, usage.input_tokens)
    uncached = max(0, usage.input_tokens - usage.cache_read_tokens - usage.cache_write_tokens)
    micro = (
        uncached * inp
        + usage.cache_read_tokens * cr
        + usage.cache_write_tokens * cw
        + usage.output_tokens * out
    )
    return micro / 1_000_000


def affordable_output_tokens(price: Price, est_input: int, usd: float) -> int | None:
    """Output tokens `usd` buys after paying for `est_input` input tokens; None when output is free."""
    inp, out, _, _ = rates_for(price, est_input)
    if out <= 0:
        return None
    left = usd - est_input * inp / 1_000_000
    if left <= 0:
        return 0
    return max(0, math.floor(left * 1_000_000 / out + 1e-6))  # float sums of USD must not lose a token
