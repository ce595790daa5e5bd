"""A known answer for the trust rule: every (model, gradient mode) of some records judged by a checklist that
passed, with the marks a test plants (:class:`robustbench_wave.evaluation.trust.Trust`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

import pandas as pd

from robustbench_wave.evaluation.trust import Trust


def checked(
    records: pd.DataFrame | Sequence[pd.DataFrame], marks: Mapping[tuple[str, str], str] | None = None
) -> Trust:
    """Every (model, mode) of ``records`` judged and passed, except the ``marks`` (upper bounds)."""
    frames = [records] if isinstance(records, pd.DataFrame) else list(records)
    rows = pd.concat(frames, ignore_index=True)
    modes = {
        str(m): tuple(dict.fromkeys(map(str, g))) for m, g in rows.groupby("model", sort=False)["grad_mode"]
    }
    return dataclasses.replace(Trust.passed(modes), marks=dict(marks or {}))


def with_checklist(judge):  # type: ignore[no-untyped-def]
    """``judge`` / ``verdict`` with ``trust`` defaulting to :func:`checked` of its records (a checklist that
    passed everything): the tests of the numbers' rules state the checklist's answer they assume."""

    def call(records, *args, **kwargs):  # type: ignore[no-untyped-def]
        kwargs.setdefault("trust", checked(records))
        return judge(records, *args, **kwargs)

    return call
