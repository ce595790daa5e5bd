"""Numbers as the package's texts show them: one formatter, so that an accuracy, a difference of
accuracies or an interval reads the same in the verdict, the claims, the report, the tables and the export.

Accuracies are fractions in the records and percentages in every text (``scale=100``); differences of two
accuracies are signed percentage points; a spread over seeds or a half-width follows the value after
" ± ". A missing number (None, NaN, not a number) is written as the caller's ``missing`` marker: "n/a"
in prose, "--" in table cells, "" in exported JSON fields. It lives in the lowest layer whose texts need
it (the verdict's and the claims' reasons are decided in ``analysis/``).
"""

from __future__ import annotations

import math
from typing import Any

NA = "n/a"
"""The missing-number marker of prose (verdict, claims)."""
DASH = "--"
"""The missing-number marker of table cells (Markdown, terminal and LaTeX tables)."""
PM = " ± "


def as_float(value: Any) -> float:
    """``value`` as a float, NaN for None (a number a row or a dict does not hold)."""
    return math.nan if value is None else float(value)


def _number_or_nan(value: Any) -> float:
    try:
        return as_float(value)
    except (TypeError, ValueError):
        return math.nan


def number(
    value: Any,
    spread: Any = None,
    *,
    scale: float = 1.0,
    digits: int = 1,
    signed: bool = False,
    unit: str = "",
    pm: str = PM,
    missing: str = NA,
) -> str:
    """``scale * value`` with ``digits`` decimals (a sign on positive values too when ``signed``), then
    ``pm`` and ``scale * spread`` when a spread is given and is a number, then ``unit``; ``missing`` when
    ``value`` is None, NaN or not a number."""
    v = _number_or_nan(value)
    if math.isnan(v):
        return missing
    text = f"{scale * v:{'+' if signed else ''}.{digits}f}"
    s = _number_or_nan(spread)
    if not math.isnan(s):
        text += f"{pm}{scale * s:.{digits}f}"
    return text + unit


def percent(value: Any, spread: Any = None, *, digits: int = 1, unit: str = "%", missing: str = NA) -> str:
    """A fraction as a percentage: '12.3%', '12.3 ± 1.0%' with a spread."""
    return number(value, spread, scale=100.0, digits=digits, unit=unit, missing=missing)


def points(diff: Any, spread: Any = None, *, unit: str = " points", digits: int = 1) -> str:
    """A difference of two fractions in signed percentage points: '+1.5 points', '-2.0 ± 1.0 points'."""
    return number(diff, spread, scale=100.0, digits=digits, signed=True, unit=unit)


def interval(low: Any, high: Any) -> str:
    """A 95% interval of a difference in signed percentage points: '[-1.5, +12.0]'."""
    return f"[{points(low, unit='')}, {points(high, unit='')}]"
