"""Per-example comparisons between groups of attack records, the core of the record-based checks.

A masking check asks "did the *weaker* evidence (FGSM, noise, Square, another gradient mode) break a point
that the *stronger* attack held?" -- per example, never by comparing two accuracies (Croce & Hein 2020).
This module selects the rows a gradient mode sees (:func:`mode_view`) and counts such violations among the
points the strong group held (:func:`compare_groups`), telling apart a point an attack held from one it skipped under
``skip_broken``; a check fires when the weak group breaks significantly more than a small tolerated rate of
the points the strong group held (:data:`PAIRED_ALPHA`, :func:`decide`). A transfer
attack crafted on the attacked model itself is a white-box restart, not a black-box attack
(:func:`self_transfer_models`, :func:`as_white_box_restarts`).
The per-example statuses themselves come from :mod:`robustbench_wave.evaluation.metrics`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from robustbench_wave.attacks import AttackKind, Threat, Trait, families_with, family_spec, list_families
from robustbench_wave.evaluation.meta_sections import ModelsMeta
from robustbench_wave.evaluation.metrics import (
    binomial_tail,
    clean_correct,
    example_status,
    threat_eps,
    worst_case_rows,
)
from robustbench_wave.models.frontend import GradMode

from .check import CheckResult

RECORD_THREATS = (Threat.LINF.value, Threat.L2.value)  # the norms the pairwise checks compare
PAIRED_ALPHA = 0.01
"""Level of the one-sided exact binomial test a pairwise check needs before it fires (per threat and budget).

The null is a small tolerated rate (the check's ``tol``): among the points the stronger attack held, the
weaker one breaks at most that share. Two honest attacks of one strength land on different sides of the
decision boundary near its edge now and then, so a rate of zero would fire on every honest model; a rate of
a few percent is what the field's checklists tolerate (Carlini et al. 2019, Croce & Hein 2020). The strong
attack's own exclusive breaks do not excuse the weak one's: they say the strong attack is strong elsewhere,
not that it found the points it missed. 0.01 rather than 0.05 because a check tests every budget of both
threats (up to ~10 tests per mode).
"""
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
    return set(families_with(Trait.LAST_ITERATE))


def check_records(records: pd.DataFrame, *, one_model: bool = True) -> pd.DataFrame:
    """Validate the columns the checks read and, with ``one_model``, that one model's rows are given
    (example ids are only comparable within a model); returns them without corruption rows (average case:
    no check reads them)."""
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
    return worst_case_rows(records)


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


@dataclass(frozen=True)
class Discordance:
    """One strong-vs-weak comparison at one (threat, eps), on the clean-correct points both groups judged.

    ``held``: the points the strong group held (and the weak group attacked); ``violations``: of those, the
    ones the weak group broke; ``reverse``: the strong group broke the point, the weak group held it (shown,
    not tested: the strong group's own breaks do not excuse the weak group's). ``hidden``: points the weak
    group broke whose strong-group status is unknown (``skip_broken`` ran the strong group only on what was
    left): possible violations these records cannot show.
    """

    violations: int
    held: int
    reverse: int = 0
    hidden: int = 0

    @property
    def share(self) -> float:
        """The weak group's exclusive breaks as a share of the points the strong group held."""
        return self.violations / self.held if self.held else 0.0

    def p_value(self, rate: float) -> float:
        """One-sided exact binomial: P(at least ``violations`` of the ``held`` points fall to the weak group)
        if it broke each point the strong group held with probability ``rate`` (the tolerated rate)."""
        return binomial_tail(self.violations, self.held, rate)

    def fires(self, rate: float, alpha: float) -> bool:
        """The weak group breaks significantly more than ``rate`` of the points the strong group held."""
        return self.p_value(rate) < alpha

    def text(self, rate: float) -> str:
        hidden = f", {self.hidden} unseen" if self.hidden else ""
        return (
            f"{self.violations}/{self.held} held (reverse {self.reverse}{hidden}, "
            f"p={self.p_value(rate):.2g} vs rate {rate:.0%})"
        )


def compare_groups(
    rows: pd.DataFrame, strong: pd.Series, weak: pd.Series, threat: str, eps: float
) -> Discordance | None:
    """Among the clean-correct examples the *strong* group held, those the *weak* group broke; and the
    reverse pairs and the weak group's breaks the strong group skipped (for the text).

    None when the comparison is impossible: the weak group broke points, but the strong group skipped every
    one of them (``skip_broken`` with the weak attack first in the suite), or no point is known to both. With
    no point held by the strong group there is nothing to violate: ``held`` = 0, p = 1.
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
    return Discordance(
        violations=int(((s == 0) & (w == 1) & known).sum()),
        held=int(((s == 0) & known).sum()),
        reverse=int(((s == 1) & (w == 0) & known).sum()),
        hidden=int(((w == 1) & s.isna()).sum()),
    )


def decide(
    found: dict[str, Discordance], tol: float, alpha: float
) -> tuple[bool | None, dict[str, Any], str]:
    """The verdict over every (threat, eps) compared: fails where any comparison :meth:`Discordance.fires`
    (the weak group breaks significantly more than ``tol`` of the points the strong group held).

    A pass is only as good as the pairs the records show: when ``skip_broken`` hid weak-group breaks from
    the strong group (``hidden``), nothing fired and the records cannot decide (None), so the check reads
    the diagnostics subset instead, whose attacks ran on every point (:class:`.check.RecordCheck`). A
    failure stands: the hidden points could only add violations.

    Returns (passed, numbers, a sentence naming the deciding comparison: the first that fired, or the one
    with the largest share when nothing fired).
    """
    fired = [k for k, d in found.items() if d.fires(tol, alpha)]
    numbers: dict[str, Any] = {
        "worst_share": max(d.share for d in found.values()),
        "tolerated_rate": tol,
        "alpha": alpha,
    }
    if fired:
        numbers["fired_at"] = ", ".join(fired)
        d = found[fired[0]]
        return (
            False,
            numbers,
            (
                f" (at {fired[0]}: {d.violations} of the {d.held} points the stronger attack held, "
                f"{d.share:.1%}; one-sided exact binomial p = {d.p_value(tol):.2g} < {alpha} against a "
                f"tolerated rate of {tol:.0%})"
            ),
        )
    key, d = max(found.items(), key=lambda kv: kv[1].share)
    if any(f.hidden for f in found.values()):
        return (
            None,
            numbers,
            (
                "; skip_broken hid whether the stronger attack holds some points the weaker one broke, so "
                "these records cannot show every violation"
            ),
        )
    return (
        True,
        numbers,
        (
            f"; at most {d.violations} of the {d.held} points the stronger attack held ({key}, {d.share:.1%}) "
            f"fall to the weaker evidence: not significantly above the tolerated rate of {tol:.0%} "
            f"(one-sided exact binomial p = {d.p_value(tol):.2g} >= {alpha})"
        ),
    )


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
    alpha: float = PAIRED_ALPHA,
) -> CheckResult:
    """Per (threat, eps) the weak group ran at: the points the weak group broke among those the strong group
    held (:class:`Discordance`); fails where the one-sided exact binomial test puts their rate significantly
    above the tolerated rate ``tol`` at ``alpha``; not measurable where skip-broken hid pairs and nothing
    fired (:func:`decide`)."""
    numbers: dict[str, Any] = {}
    found: dict[str, Discordance] = {}
    for threat in threats:
        for eps in attacked_eps(records[weak], threat):
            if records[strong & (records["threat"] == threat)].empty:
                continue
            res = compare_groups(records, strong, weak, threat, eps)
            if res is None:
                continue
            key = f"{threat}@{eps:.4g}"
            found[key] = res
            numbers[key] = res.text(tol)
    if not found:
        return CheckResult(
            name,
            None,
            numbers,
            f"not measurable: no examples attacked by both {words.what} (run with skip_broken=False)",
            mode,
        )
    passed, extra, note = decide(found, tol, alpha)
    numbers.update(extra)
    if passed is None:
        return CheckResult(name, None, numbers, f"not measurable on these records{note}", mode)
    meaning = (words.meaning_pass if passed else words.meaning_fail) + note
    return CheckResult(name, passed, numbers, meaning, mode)


# ------------------------------------------------------------------------------- transfer from a model to itself
def self_transfer_models(meta: Mapping[str, Any] | None) -> set[str]:
    """Models of a run whose transfer attacks were crafted on themselves (``meta.json``'s
    ``models[NAME].surrogate``): the same weights (``param_sha256``) when both hashes are recorded, else the
    same name."""
    out: set[str] = set()
    for entry in ModelsMeta.from_meta(meta or {}).values():
        surrogate = entry.surrogate
        if surrogate is None:
            continue
        own, theirs = entry.param_sha256, surrogate.param_sha256
        if (own and theirs and own == theirs) or (not (own and theirs) and surrogate.name == entry.name):
            out.add(entry.name)
    return out


def as_white_box_restarts(records: pd.DataFrame, models: Iterable[str]) -> pd.DataFrame:
    """``records`` with the transfer rows of ``models`` (their own surrogate) relabelled as what they are:
    white-box runs with exact gradients (the surrogate is always differentiated exactly), one row per
    (model, attack, eps, example) even where the evaluation replicated them to every gradient mode."""
    models = set(models)
    hit = records["model"].isin(models) & (records["kind"] == AttackKind.TRANSFER.value)
    if not hit.any():
        return records
    moved = records[hit].assign(kind=AttackKind.WHITE_BOX.value, grad_mode=GradMode.EXACT.value)
    moved = moved.drop_duplicates(["model", "attack", "eps", "example_id"])
    return pd.concat([records[~hit], moved], ignore_index=True)
