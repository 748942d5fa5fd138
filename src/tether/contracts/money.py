"""How a USD amount is written, everywhere tether writes one: to its precision, never a 0.001 ceiling as 0.00."""

from __future__ import annotations

import math

SIGNIFICANT = 6
"""Significant digits of a printed USD amount (micro-dollars on a sub-dollar figure)."""


def usd(value: float | None) -> str:
    """A USD amount to its precision: `SIGNIFICANT` significant digits, at least two decimals, no trailing zeros
    past them (0.2 -> 0.20, 0.001 -> 0.001, 0.005 -> 0.005, 0.0361200 -> 0.03612). The inspector's `usd()` in
    `server/static/app.js` follows the same rule."""
    if value is None:
        return "-"
    if value == 0 or not math.isfinite(value):
        return "0.00" if value == 0 else str(value)
    digits = max(2, SIGNIFICANT - 1 - math.floor(math.log10(abs(value))))
    whole, _, frac = f"{value:.{digits}f}".partition(".")
    return f"{whole}.{frac.rstrip('0').ljust(2, '0')}"
