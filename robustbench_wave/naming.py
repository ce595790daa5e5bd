"""Names a user types (a zoo model, a suite, a data set): the close matches of a misspelt one, so an error
can say "did you mean 'wavelet'?" instead of sending the user to train or download something else."""

from __future__ import annotations

import difflib
from collections.abc import Iterable

#: How alike a known name must be to be suggested (difflib's ratio; 0.6 is its default).
CUTOFF = 0.6


def close_matches(name: str, known: Iterable[str], n: int = 3) -> list[str]:
    """The known names most like ``name`` (case-insensitive), best first; empty when none is close."""
    by_key = {k.lower(): k for k in known}
    return [by_key[m] for m in difflib.get_close_matches(str(name).lower(), list(by_key), n=n, cutoff=CUTOFF)]


def did_you_mean(name: str, known: Iterable[str]) -> str:
    """``"; did you mean 'wavelet'?"`` (or ``'a' or 'b'``) to append to an error, ``""`` without a match."""
    matches = close_matches(name, known)
    return f"; did you mean {' or '.join(repr(m) for m in matches)}?" if matches else ""
