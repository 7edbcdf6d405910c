"""How the report writes a number and a number with its interval: one formatter for every table.

The styles differ only where the reader needs them to: accuracies with three decimals and their
intervals with two; small probabilities kept readable (4e-4 must not print as 0.000); shares as
percentages; effects signed.
"""

from __future__ import annotations

import math


def number(
    value: float | None, digits: int = 3, *, sign: bool = False, small: bool = False, missing: str = "n/a"
) -> str:
    """`value` to `digits` decimals (`missing` for None or NaN).

    Args:
        value: the number.
        digits: decimals.
        sign: always write the sign (an effect).
        small: a value too small for `digits` keeps two significant digits (4.0e-04).
        missing: the text for no value.
    """
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return missing
    style = ".1e" if small and 0 < abs(value) < 0.5 * 10**-digits else f".{digits}f"
    return f"{value:+{style}}" if sign else f"{value:{style}}"


def percent(value: float) -> str:
    """A share as a whole percentage."""
    return f"{value:.0%}"


def with_interval(
    value: float | None,
    low: float | None,
    high: float | None,
    *,
    digits: int = 2,
    interval_digits: int | None = None,
    sign: bool = False,
    small: bool = False,
    as_percent: bool = False,
    missing: str = "n/a",
) -> str:
    """`value [low, high]`; the value alone where the interval is missing.

    Args:
        value, low, high: the estimate and its interval's bounds.
        digits: decimals of the value.
        interval_digits: decimals of the bounds (default: `digits`).
        sign, small: as in `number`.
        as_percent: write value and bounds as whole percentages.
        missing: the text for no value.
    """
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return missing
    if as_percent:
        text = percent(value)
        return text if low is None or high is None else f"{text} [{percent(low)}, {percent(high)}]"
    bounds = digits if interval_digits is None else interval_digits
    text = number(value, digits, sign=sign, small=small)
    if low is None or high is None:
        return text
    return f"{text} [{number(low, bounds, sign=sign, small=small)}, {number(high, bounds, sign=sign, small=small)}]"
