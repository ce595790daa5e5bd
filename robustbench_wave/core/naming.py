"""Names a user types (a zoo model, a suite, a data set): the close matches of a misspelt one, so an error
can say "did you mean 'wavelet'?" instead of sending the user to train or download something else."""

from __future__ import annotations

import difflib
import numbers
from collections.abc import Iterable
from enum import Enum
from typing import TypeVar

E = TypeVar("E", bound=Enum)

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


def parse_enum(cls: type[E], value: str | E, what: str) -> E:
    """The member of ``cls`` whose value is ``value`` (or ``value`` itself); else a ValueError naming
    ``what`` it is, the choices and the closest one ("unknown gradient mode 'bdpa'; did you mean 'bpda'?")."""
    try:
        return cls(value)
    except ValueError:
        choices = [str(m.value) for m in cls]
        raise ValueError(
            f"unknown {what} {value!r}{did_you_mean(str(value), choices)} (choose one of: {', '.join(choices)})"
        ) from None


def check_whole(value: object, minimum: int, what: str) -> int:
    """``value`` as an int when it is a whole number >= ``minimum`` (a count, a seed, a batch size); else a
    ValueError naming ``what`` it is ("n_examples = 0 must be a whole number >= 1"). The one check of the
    settings' whole numbers, whichever door they come through (a dataclass, a stored meta.json)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        raise ValueError(f"{what} = {value!r} must be a whole number >= {minimum}")
    return int(value)
