"""Per-example comparisons between groups of attack records, the core of the record-based checks.

A masking check asks "did the *weaker* evidence (FGSM, noise, Square, another gradient mode) break a point
that the *stronger* attack held?" -- per example, never by comparing two accuracies (Croce & Hein 2020).
This module selects the rows a gradient mode sees (:func:`mode_view`) and counts such violations
(:func:`compare_groups`), telling apart a point an attack held from one it skipped under ``skip_broken``.
The per-example statuses themselves come from :mod:`robustbench_wave.evaluation.metrics`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from robustbench_wave.attacks import Threat, family_spec, list_families
from robustbench_wave.evaluation.metrics import clean_correct, example_status, threat_eps

from .base import CheckResult

RECORD_THREATS = (Threat.LINF.value, Threat.L2.value)  # the norms the pairwise checks compare
_NEEDED = (
    "model",
    "grad_mode",
    "attack",
    "family",
    "kind",
    "threat",
    "eps",
    "example_id",
    "correct",
    "attacked",
)


def mode_free_kinds() -> set[str]:
    """Kinds of the families that never differentiate the target (run once, shared by every mode)."""
    return {family_spec(f).kind.value for f in list_families() if not family_spec(f).grad_dependent}


def iterative_families() -> set[str]:
    """Families whose records carry the last iterate (``correct_last``)."""
    return {f for f in list_families() if family_spec(f).iterative}


def check_records(records: pd.DataFrame, *, one_model: bool = True) -> pd.DataFrame:
    """Validate the columns the checks read and, with ``one_model``, that one model's rows are given
    (example ids are only comparable within a model)."""
    missing = sorted(set(_NEEDED) - set(records.columns))
    if missing:
        raise ValueError(
            f"records lack columns {missing}; produce them with robustbench_wave.evaluation.evaluate"
        )
    if one_model and records["model"].nunique() > 1:
        raise ValueError(
            f"records hold several models {sorted(records['model'].unique())}: pass one model's rows "
            "(records[records.model == name])"
        )
    return records


def mode_view(records: pd.DataFrame, mode: str, model: str | None = None) -> pd.DataFrame:
    """Rows seen by gradient mode ``mode``: its own rows plus mode-free rows (clean, noise, black-box,
    transfer) stored under another mode, de-duplicated -- replicated per mode by the evaluation or not."""
    rows = records if model is None else records[records["model"] == model]
    own = rows[rows["grad_mode"] == mode]
    other = rows[(rows["grad_mode"] != mode) & rows["kind"].isin(mode_free_kinds())]
    if not other.empty:
        have = set(zip(own["attack"], own["eps"].round(12)))
        keep = [(a, round(e, 12)) not in have for a, e in zip(other["attack"], other["eps"])]
        other = other[np.asarray(keep, dtype=bool)].drop_duplicates(["attack", "eps", "example_id"])
    return pd.concat([own, other], ignore_index=True)


def attacked_eps(rows: pd.DataFrame, threat: str) -> list[float]:
    """The positive budgets of ``threat`` in ``rows`` (eps = 0 changes nothing, so there is nothing to compare)."""
    return [e for e in threat_eps(rows, threat) if e > 0]


def compare_groups(
    rows: pd.DataFrame, strong: pd.Series, weak: pd.Series, threat: str, eps: float
) -> tuple[int, int] | None:
    """Clean-correct examples where the *weak* group broke the point but the *strong* group held it.

    Returns (violations, compared) -- compared = examples whose status is known for both groups -- or None
    when the comparison is impossible: the weak group broke points, but the strong group skipped every one
    of them (``skip_broken`` with the weak attack first in the suite).
    """
    clean = clean_correct(rows)
    ids = clean.index[clean.to_numpy()]
    s = example_status(rows[strong], threat, eps).reindex(ids)
    w = example_status(rows[weak], threat, eps).reindex(ids)
    known = s.notna() & w.notna()
    if int(((w == 1) & s.notna()).sum()) == 0 and int((w == 1).sum()) > 0:
        return None
    if int(known.sum()) == 0:
        return None
    return int(((s == 0) & (w == 1) & known).sum()), int(known.sum())


@dataclass(frozen=True)
class Pairing:
    """Words for one strong-vs-weak comparison: what is compared and what a pass / failure means."""

    what: str
    meaning_fail: str
    meaning_pass: str


def pairwise_result(
    name: str,
    records: pd.DataFrame,
    mode: str,
    strong: pd.Series,
    weak: pd.Series,
    tol: float,
    words: Pairing,
    threats: Sequence[str] = RECORD_THREATS,
) -> CheckResult:
    """The share of compared examples the weak group broke but the strong group held, worst over every
    (threat, eps) the weak group ran at; passes when it is at most ``tol``."""
    numbers: dict[str, Any] = {}
    worst = 0.0
    compared_any = False
    for threat in threats:
        for eps in attacked_eps(records[weak], threat):
            if records[strong & (records["threat"] == threat)].empty:
                continue
            res = compare_groups(records, strong, weak, threat, eps)
            if res is None:
                continue
            v, n = res
            compared_any = True
            worst = max(worst, v / n)
            numbers[f"{threat}@{eps:.4g}"] = f"{v}/{n}"
    if not compared_any:
        return CheckResult(
            name,
            None,
            numbers,
            f"not measurable: no examples attacked by both {words.what} (run with skip_broken=False)",
            mode,
        )
    numbers["worst_share"] = worst
    numbers["tolerance"] = tol
    passed = worst <= tol
    return CheckResult(name, passed, numbers, words.meaning_pass if passed else words.meaning_fail, mode)
