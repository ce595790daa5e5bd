"""The verdict on the wavelet tokenizer's claim ("naturally resistant to adversarial attacks"), from numbers.

The source paper (Zhu & Soricut 2024) argues that fixed kernels leave "no gradient" to attack. A model's
robustness supports that claim only if it survives attacks that do differentiate the front-end (exact
autograd, BPDA; Athalye et al. 2018), gradient-free attacks (Square) and transfer -- the per-example worst
case over all of them (Croce & Hein 2020) -- and exceeds that of a patch-tokenizer baseline evaluated the
same way (Carlini et al. 2019).

Everything here is computed from per-example records in two layers: :func:`claim_numbers` (accuracies
from :mod:`robustbench_wave.evaluation.metrics`) and :func:`categorize` (a category from those numbers and
two paired comparisons on the same images, seeds pooled with the image as the unit,
:func:`metrics.paired_over_seeds`: candidate vs baseline worst case, and the candidate's blocked white-box
vs its worst case -- the masking gap). "More robust" needs the difference's 95% interval to clear
:data:`MINIMUM_EFFECT`, "no more robust" the equivalence test within it, a significant difference inside it
is a *small difference*; masking needs the gap's interval to clear ``gap_tol``; with several training seeds
"more robust" also needs the per-seed differences' t interval to clear the minimum effect (the claim is
about an architecture, :func:`architecture`); every kind of claim is Holm-adjusted across every candidate,
threat and budget of the grid (:func:`holm_families`), and the grid says where the advantage ends.
:func:`judge` gathers them, with the energy and diagnostics findings, into a :class:`Judgement`. The words
are :mod:`robustbench_wave.reporting.verdict_text`'s, which renders a judgement and decides nothing. No
verdict is given on a model not worth attacking (clean accuracy under :func:`clean_floor`) or when the
comparison cannot decide (neither clearing the minimum effect nor within it): the category is then
:data:`INCONCLUSIVE`, with the reason. Model *names* are only labels in the text. A model's role follows its
measurements: models evaluated under several gradient modes (a fixed front-end) are the candidates, models
evaluated only with exact gradients are the baselines -- or pass ``baseline=`` explicitly.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from robustbench_wave.analysis.formatting import as_float, interval, number, percent, points
from robustbench_wave.attacks import AttackKind, Threat, Trait, families_with
from robustbench_wave.evaluation.metrics import (
    PairedComparison,
    check_on_grid,
    clean_correct,
    holm_adjusted,
    paired_over_seeds,
    reference_eps,
    robust_accuracy,
    robust_flags,
    seed_interval,
    seed_spread,
    shared_status,
    threat_eps,
)
from robustbench_wave.evaluation.trust import Standing, Trust
from robustbench_wave.models.frontend import GradMode

log = logging.getLogger(__name__)

MASKING = "gradient masking"
NOT_ROBUST = "no natural robustness"
ROBUST = "robust under all attacks"
MASKING_BUT_ROBUST = "partly gradient masking, still more robust"
SMALL_DIFFERENCE = "small difference"
ROBUST_THESE_NETWORKS = "more robust for these networks, not confirmed across training seeds"
NO_BASELINE = "no baseline"
INCONCLUSIVE = "inconclusive"
MASKING_INCONCLUSIVE = "gradient masking, comparison with the baseline inconclusive"
UNVERIFIED = "unverified (no gradient mode trusted: upper bounds)"
UNCHECKED = "unchecked (no gradient checklist ran)"
#: The categories of a candidate whose numbers are upper bounds (:class:`~robustbench_wave.evaluation.trust.
#: Standing`): they state only what an upper bound can say, never robustness.
UPPER_BOUND_CATEGORIES = {Standing.UNVERIFIED: UNVERIFIED, Standing.UNCHECKED: UNCHECKED}

MIN_ARCHITECTURE_SEEDS = 2
"""Training seeds a claim about the architecture needs (:func:`architecture`): with one, any advantage is a
finding about these networks only; each seed must also clear the minimum effect on its own, so a verdict
never weakens when a seed that clears it is added."""

CLEAN_FLOOR_SHARE = 1 / 3
"""A model is worth attacking only if its clean accuracy covers at least this share of the way from chance
(1 / num_classes) to 100%: 40% for 10 classes, 50% for 4 (:func:`clean_floor`).

Robust accuracy never exceeds clean accuracy, so below this floor a model's robust accuracy mostly says how
little it learned, and two such models differ by how far training got, not by how robust their tokenizers
are: at 12% on CIFAR-10 (chance 10%) every attack "wins" and no robustness claim is tested. A third of the
way is far above chance (4x chance's distance for 10 classes) yet below what the recipe reaches on every
data set it was tuned for, so only a model that failed to train is refused.
"""

MINIMUM_EFFECT = 0.10
"""The smallest difference of worst-case accuracy the verdict calls a difference: 10 points, one constant for
both directions (:func:`comparison_outcome`).

"More robust" needs the paired difference's 95% interval to clear +10 points (one-sided test of
H0: diff <= 10 points at ``alpha / 2``); "no more robust" needs positive evidence of no worthwhile difference:
two one-sided tests (TOST, Schuirmann 1987) at ``alpha`` each that the difference lies inside (-10, +10)
points, i.e. the 90% interval inside the margin (:meth:`metrics.PairedComparison.equivalence`); between the
two, a difference significantly above zero that stays inside the margin is a *small difference*. 10 points
because the claim under test is a large effect ("naturally resistant"): an advantage under 10 points of
worst-case accuracy is within the seed-to-seed spread of these small models' accuracies and is no
resistance a reader would act on. An interval such as [-1, +19] or [+5, +15] is then inconclusive (attack
more examples).
"""
EQUIVALENCE_MARGIN = (
    MINIMUM_EFFECT  # the equivalence test's margin is the minimum effect (claims.py reads it)
)

#: Outcomes of one paired comparison (:func:`comparison_outcome`).
MORE = "more robust"
MORE_NETWORKS = "more robust for these networks only"
SMALL = "small difference"
NO_DIFFERENCE = "no more robust"
LESS = "less robust"
UNDECIDED = "undecided"
ADVANTAGE = (MORE, MORE_NETWORKS)
#: Outcomes an upper bound can support (a candidate that is not verified): no advantage, when even its upper
#: bound is within the minimum effect of (or below) a verified baseline; else nothing.
NO_ADVANTAGE = "no advantage (even the upper bound is within the minimum effect of the baseline, or below it)"
BOUND_UNDECIDED = "undecided (an upper bound above the baseline establishes no advantage)"
#: Outcomes that rule an advantage out; with a verified baseline they stand on a candidate's upper bound.
RULES_OUT = (SMALL, NO_DIFFERENCE, LESS)

#: The Holm families (:func:`holm_families`): each kind of claim is one family over every candidate, threat
#: and budget the verdict states.
TESTS = ("more", "less", "equivalent", "difference", "masking", "no_masking")


def wb_column(mode: GradMode | str) -> str:
    """Column of :func:`claim_numbers` with the white-box robust accuracy under gradient mode ``mode``."""
    return f"wb_{GradMode.parse(mode).value}"


_COLUMNS = (
    "model",
    "seed",
    "threat",
    "eps",
    "n",
    "modes",
    "clean",
    *(wb_column(m) for m in GradMode),
    "gradient_free",
    "transfer",
    "lowfreq",
    "lowfreq_alone",
    "noise",
    "worst_case",
    "cumulative",
)
#: Columns of :func:`claim_numbers` that may count breaks of the attacks run before them (skip-broken).
SHARED_COLUMNS = {
    "gradient_free": AttackKind.BLACK_BOX.value,
    "transfer": AttackKind.TRANSFER.value,
    "noise": AttackKind.NOISE.value,
}


@dataclass(frozen=True)
class VerdictSettings:
    """How big a difference must be before the text calls it one."""

    gap_tol: float = 0.10  # blocked minus worst case: robustness that only blocked gradients show (its
    # paired 95% interval must clear it for "masking", lie below it for "no masking")
    chance_margin: float = 0.05  # "at chance" = within this of 1/num_classes
    energy_gap: float = 0.10  # noise minus adversarial energy removed: the mechanism filters noise only
    alpha: float = 0.05  # level of the two-sided exact test of candidate vs baseline, and of each TOST side
    clean_floor_share: float = CLEAN_FLOOR_SHARE  # see CLEAN_FLOOR_SHARE
    minimum_effect: float = MINIMUM_EFFECT  # see MINIMUM_EFFECT

    @property
    def equivalence_margin(self) -> float:
        """The equivalence test's margin: the minimum effect."""
        return self.minimum_effect


def clean_floor(num_classes: int, share: float = CLEAN_FLOOR_SHARE) -> float:
    """The clean accuracy below which a model is not worth attacking: chance + ``share`` x (1 - chance)."""
    if num_classes < 2:
        raise ValueError(f"num_classes must be >= 2, got {num_classes}")
    chance = 1.0 / num_classes
    return chance + share * (1.0 - chance)


@dataclass(frozen=True)
class GridNumbers:
    """One candidate's blocked white-box and worst-case accuracy (and the baseline's worst case) at every
    budget of a threat's grid, averaged over runs; per budget the outcome of the paired comparison with the
    baseline (:func:`comparison_outcome`, Holm-adjusted with every other) and whether masking is shown
    (True), excluded (False) or undecided (None); the budgets where masking is shown."""

    threat: str
    candidate: str
    baseline: str | None
    eps: list[float]
    blocked: list[float]
    worst: list[float]
    base_worst: list[float]
    masking_eps: list[float]
    outcomes: list[str] = field(default_factory=list)
    masking: list[bool | None] = field(default_factory=list)

    @property
    def advantage_eps(self) -> list[float]:
        """The budgets where the candidate is more robust than the baseline (by the minimum effect)."""
        return [e for e, o in zip(self.eps, self.outcomes) if o in ADVANTAGE]


@dataclass(frozen=True)
class CandidateJudgement:
    """One candidate at one threat's budget: its numbers (mean over seeds), the baseline's, everything
    :func:`categorize` found (``facts``), the spread over seeds and the grid."""

    key: str  # "<model>@<threat>"
    cand: dict[str, Any]
    base: dict[str, Any] | None
    facts: dict[str, Any]
    spread: dict[str, Any] | None
    n_seeds: int
    grid: GridNumbers | None

    @property
    def details(self) -> dict[str, Any]:
        """The facts as ``verdict.json`` saves them (NaN as None, nested ones too)."""
        return _no_nan(self.facts)


def _no_nan(value: Any) -> Any:
    """``value`` with every float NaN, in dicts and lists too, as None (JSON has no NaN)."""
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, Mapping):
        return {k: _no_nan(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_no_nan(v) for v in value]
    return value


#: What sparsification removes more of, by :attr:`VerdictSettings.energy_gap` (:func:`energy_contrast`).
FILTERS_NOISE, FILTERS_ADVERSARIAL, FILTERS_ALIKE = "noise", "adversarial", "alike"


@dataclass(frozen=True)
class EnergyContrast:
    """The mean share of coefficient energy sparsification removes from random noise, a PGD perturbation
    and the low-frequency attack's (NaN when not measured), and which of the first two loses more."""

    noise: float
    adversarial: float
    lowfreq: float
    removes_more: str


@dataclass
class Judgement:
    """The verdict's numbers and decisions: per-candidate categories and the facts behind them, the energy
    contrasts, the failed diagnostics and the models whose claimed robustness they put in doubt."""

    numbers: pd.DataFrame
    candidates: list[CandidateJudgement]
    energy: dict[str, EnergyContrast]
    diagnostics: dict[str, dict[str, list[str]]]
    caution: list[str]
    settings: VerdictSettings

    @property
    def categories(self) -> dict[str, str]:
        return {c.key: c.facts["category"] for c in self.candidates}

    @property
    def details(self) -> dict[str, Any]:
        return {c.key: c.details for c in self.candidates}


# --------------------------------------------------------------------------------------------------------
# numbers
# --------------------------------------------------------------------------------------------------------
def _acc(rows: pd.DataFrame, threat: str, eps: float) -> float | None:
    """Robust accuracy (clean AND every row at eps' <= eps) if any row of this threat exists, else None."""
    if rows[rows["threat"] == threat].empty:
        return None
    return robust_accuracy(rows, threat, eps)[0]


def _model_numbers(rows: pd.DataFrame, threat: str, eps: float) -> dict[str, Any]:
    """One model's row of :func:`claim_numbers` (without model and seed)."""
    clean_rows = rows[rows["kind"] == AttackKind.CLEAN.value].drop_duplicates("example_id")
    clean = clean_correct(clean_rows if not clean_rows.empty else rows)
    have = set(rows["grad_mode"])
    out: dict[str, Any] = {"threat": threat, "eps": float(eps), "n": len(clean), "clean": float(clean.mean())}
    out["modes"] = ",".join(m.value for m in GradMode if m.value in have)

    def acc_with_clean(sub: pd.DataFrame) -> float | None:
        return _acc(pd.concat([clean_rows, sub]), threat, eps) if not sub.empty else None

    lowfreq = rows["family"].isin(families_with(Trait.LOW_FREQUENCY))
    white = (rows["kind"] == AttackKind.WHITE_BOX.value) & ~lowfreq
    for mode in GradMode:
        out[wb_column(mode)] = acc_with_clean(rows[white & (rows["grad_mode"] == mode.value)])
    low = rows[lowfreq]
    out["gradient_free"] = acc_with_clean(rows[rows["kind"] == AttackKind.BLACK_BOX.value])
    out["transfer"] = acc_with_clean(rows[rows["kind"] == AttackKind.TRANSFER.value])
    out["lowfreq"] = acc_with_clean(low)
    out["noise"] = acc_with_clean(rows[rows["kind"] == AttackKind.NOISE.value])
    if not low.empty:  # standalone, or only run on points the suite had not broken?
        at = low[(low["threat"] == threat) & np.isclose(low["eps"], eps)]
        at = at[at["example_id"].isin(clean.index[clean.to_numpy()])]
        out["lowfreq_alone"] = bool(at["attacked"].astype(bool).all()) if not at.empty else None
    else:
        out["lowfreq_alone"] = None
    out["worst_case"] = _acc(rows, threat, eps)
    out["cumulative"] = ",".join(_cumulative(rows, clean, threat, eps))
    return out


def _cumulative(rows: pd.DataFrame, clean: pd.Series, threat: str, eps: float) -> list[str]:
    """The :data:`SHARED_COLUMNS` whose accuracy includes points an earlier attack broke: a clean-correct
    point their rows skipped (``skip_broken``) without breaking it themselves, so the number is the worst
    case of the attacks up to that one, not that attack's own."""
    correct = clean.index[clean.to_numpy()]
    out = []
    for col, kind in SHARED_COLUMNS.items():
        sub = rows[(rows["kind"] == kind) & (rows["threat"] == threat)]
        if sub.empty:
            continue
        status = shared_status(sub, threat, eps).reindex(correct)
        if status.isna().any():
            out.append(col)
    return out


def claim_numbers(
    records: pd.DataFrame,
    *,
    threat: str = Threat.LINF.value,
    eps: float | None = None,
    seed: int | None = None,
) -> pd.DataFrame:
    """One row per model at (threat, eps; default the grid's reference budget): clean accuracy, white-box
    robust accuracy per gradient mode, gradient-free, transfer, low-frequency and noise accuracy, and the
    per-example worst case over all of them. A budget the records did not attack is refused (ValueError
    naming the grid), never answered with the clean accuracy."""
    if eps is not None and not records[records["threat"] == threat].empty:
        eps = check_on_grid(records, threat, eps)
    eps = reference_eps(records, threat) if eps is None else eps
    if eps is None:
        return pd.DataFrame(columns=list(_COLUMNS))
    rows_out = [
        {"model": str(model), "seed": seed, **_model_numbers(rows, threat, eps)}
        for model, rows in records.groupby("model", sort=False)
    ]
    return pd.DataFrame(rows_out, columns=list(_COLUMNS))


FlagPair = tuple[pd.Series, pd.Series]


def worst_case_pair(records: pd.DataFrame, cand: str, base: str, threat: str, eps: float) -> FlagPair:
    """One seed's candidate and baseline per-example worst case (:func:`metrics.robust_flags`)."""
    a, b = (robust_flags(records[records["model"] == m], threat, eps) for m in (cand, base))
    return a, b


def white_box_rows(rows: pd.DataFrame, mode: GradMode | str | None = None) -> pd.DataFrame:
    """The white-box gradient attacks' rows (kind white-box, no low-frequency family: the ``wb_*`` columns of
    :func:`claim_numbers`), of gradient ``mode`` only when given. Gradient-free, transfer, noise and
    low-frequency rows are not among them (nor the escalation's, which are gradient-free and transfer): they
    are recorded under every gradient mode alike and would floor each mode's number at their own."""
    lowfreq = rows["family"].isin(families_with(Trait.LOW_FREQUENCY))
    white = (rows["kind"] == AttackKind.WHITE_BOX.value) & ~lowfreq
    if mode is not None:
        white &= rows["grad_mode"] == (mode.value if isinstance(mode, GradMode) else str(mode))
    return rows[white]


def white_box_flags(rows: pd.DataFrame, mode: GradMode | str, threat: str, eps: float) -> pd.Series | None:
    """One model's per-example robustness under its white-box gradient attacks in ``mode`` alone (its clean
    rows, one per example, and :func:`white_box_rows`); None without such rows at ``threat``."""
    white = white_box_rows(rows, mode)
    if white[white["threat"] == threat].empty:
        return None
    clean = rows[rows["kind"] == AttackKind.CLEAN.value].drop_duplicates("example_id")
    return robust_flags(pd.concat([clean, white]), threat, eps)


def masking_pair(records: pd.DataFrame, cand: str, threat: str, eps: float) -> FlagPair | None:
    """One seed's candidate per-example robustness under blocked white-box attacks (the ``wb_blocked``
    column of :func:`claim_numbers`, :func:`white_box_flags`) and under the worst case over everything: their
    paired difference is the masking gap. None without blocked white-box rows."""
    rows = records[records["model"] == cand]
    blocked = white_box_flags(rows, GradMode.BLOCKED, threat, eps)
    return None if blocked is None else (blocked, robust_flags(rows, threat, eps))


def paired_worst_case(
    records: pd.DataFrame | Sequence[pd.DataFrame], cand: str, base: str, threat: str, eps: float
) -> PairedComparison | None:
    """Candidate vs baseline per-example worst case on the images every run attacked both on, seeds
    pooled with the image as the unit (:func:`metrics.paired_over_seeds`); None when they share none."""
    runs = [records] if isinstance(records, pd.DataFrame) else list(records)
    return pooled([worst_case_pair(r, cand, base, threat, eps) for r in runs])


def paired_masking(
    records: pd.DataFrame | Sequence[pd.DataFrame], cand: str, threat: str, eps: float
) -> PairedComparison | None:
    """Blocked white-box vs worst case of one candidate on the same images, seeds pooled by image (the gap's
    paired comparison); None without blocked rows."""
    runs = [records] if isinstance(records, pd.DataFrame) else list(records)
    return pooled([masking_pair(r, cand, threat, eps) for r in runs])


def pooled(pairs: Sequence[FlagPair | None]) -> PairedComparison | None:
    """:func:`metrics.paired_over_seeds` of the seeds' flag pairs; None when a seed has none or the seeds
    share no image."""
    if not pairs or any(p is None for p in pairs):
        return None
    try:
        return paired_over_seeds([p for p in pairs if p is not None])
    except ValueError:
        return None


def _roles(numbers: pd.DataFrame, baseline: Sequence[str] | str | None) -> tuple[list[str], list[str]]:
    models = list(numbers["model"])
    if baseline is not None:
        base = [baseline] if isinstance(baseline, str) else list(baseline)
        unknown = sorted(set(base) - set(models))
        if unknown:
            raise ValueError(f"baseline model(s) {unknown} not in the records; models: {models}")
        return [m for m in models if m not in base], base
    several = numbers["modes"].str.count(",") > 0
    candidates = list(numbers.loc[several, "model"])
    baselines = list(numbers.loc[~several, "model"])
    if not candidates:  # nobody has a fixed front-end: compare everyone with everyone
        return models, []
    return candidates, baselines


# --------------------------------------------------------------------------------------------------------
# tests and categories
# --------------------------------------------------------------------------------------------------------
def _below_floor(row: Mapping[str, Any], role: str, floor: float, chance: float) -> str:
    """Why ``row``'s model is not worth attacking, or "" when it is."""
    clean = as_float(row.get("clean"))
    if math.isnan(clean) or clean >= floor:
        return ""
    return (
        f"the {role} {row['model']}'s clean accuracy {percent(clean)} is below the floor of {percent(floor)} "
        f"(chance {percent(chance)} plus a third of the way to 100%): a model that has barely learned the task "
        "tests no robustness claim"
    )


def p_values(
    paired: PairedComparison | None, masking: PairedComparison | None, settings: VerdictSettings
) -> dict[str, float]:
    """The raw p-value of every claim the verdict may make about one (candidate, threat, budget), by
    :data:`TESTS` family: "more" H0 diff <= +minimum effect, "less" H0 diff >= -minimum effect,
    "equivalent" TOST within ±minimum effect, "difference" the exact test of diff = 0, "masking" H0 gap <=
    ``gap_tol``, "no_masking" H0 gap >= ``gap_tol`` (NaN where there is no comparison)."""
    nan = math.nan
    out = dict.fromkeys(TESTS, nan)
    if paired is not None:
        d = settings.minimum_effect
        out["more"] = paired.one_sided_p(d, lower=True)
        out["less"] = paired.one_sided_p(-d, lower=False)
        out["equivalent"] = paired.equivalence(d, settings.alpha).p_value
        out["difference"] = paired.p_value
    if masking is not None:
        out["masking"] = masking.one_sided_p(settings.gap_tol, lower=True)
        out["no_masking"] = masking.one_sided_p(settings.gap_tol, lower=False)
    return out


def _rejects(p: Mapping[str, float], test: str, settings: VerdictSettings) -> bool:
    """Whether claim ``test`` is made: one-sided claims read the 95% interval (``alpha / 2``), the TOST
    and the exact test their level ``alpha``."""
    level = settings.alpha if test in ("equivalent", "difference") else settings.alpha / 2
    value = p.get(test, math.nan)
    return not math.isnan(value) and value < level


def architecture(
    seed_diffs: Sequence[float], settings: VerdictSettings, seed_lows: Sequence[float] | None = None
) -> dict[str, Any]:
    """The claim about the architecture, the training seed as the unit: it needs
    :data:`MIN_ARCHITECTURE_SEEDS` seeds, each of whose own paired 95% interval (lower ends ``seed_lows``)
    clears the minimum effect -- a rule no seed that clears the effect can weaken. ``confirmed`` is None with
    fewer seeds (a finding about these networks only); the seeds' t interval
    (:func:`metrics.seed_interval`) is reported beside it."""
    iv = seed_interval(seed_diffs, 1 - settings.alpha)
    out: dict[str, Any] = {"n_seeds": iv.n_seeds, "diffs": [float(d) for d in seed_diffs]}
    if iv.n_seeds < MIN_ARCHITECTURE_SEEDS:
        return out | {"confirmed": None, "min_seeds": MIN_ARCHITECTURE_SEEDS}
    lows = [float(v) for v in (seed_lows if seed_lows is not None else seed_diffs)]
    return out | {
        "mean": iv.mean,
        "sd": iv.sd,
        "ci": [iv.ci_low, iv.ci_high],
        "level": iv.level,
        "seed_ci_low": lows,
        "min_seeds": MIN_ARCHITECTURE_SEEDS,
        "confirmed": bool(min(lows) > settings.minimum_effect),
    }


def comparison_outcome(
    paired: PairedComparison,
    p: Mapping[str, float],
    settings: VerdictSettings,
    seed_diffs: Sequence[float] = (),
    seed_lows: Sequence[float] | None = None,
) -> str:
    """:data:`MORE` when the 95% interval clears the minimum effect and the architecture claim is confirmed
    (:func:`architecture`: at least two seeds, each clearing it; else :data:`MORE_NETWORKS`, one seed
    included), :data:`LESS` when it clears it the other way,
    :data:`SMALL` when the TOST places the difference inside ±minimum effect and the exact test puts it
    above zero, :data:`NO_DIFFERENCE` when inside without that, else :data:`UNDECIDED`. ``p`` are the
    (Holm-adjusted) p-values of :func:`p_values`."""
    if _rejects(p, "more", settings):
        confirmed = architecture(seed_diffs or [paired.diff], settings, seed_lows)["confirmed"]
        return MORE if confirmed else MORE_NETWORKS
    if _rejects(p, "less", settings):
        return LESS
    if _rejects(p, "equivalent", settings):
        return SMALL if _rejects(p, "difference", settings) and paired.diff > 0 else NO_DIFFERENCE
    return UNDECIDED


def masking_decision(p: Mapping[str, float], settings: VerdictSettings) -> bool | None:
    """True when the gap's 95% interval clears ``gap_tol`` (Holm-adjusted), False when it lies below it,
    None when it straddles it (undecided) or there is no blocked mode to compare."""
    if _rejects(p, "masking", settings):
        return True
    if _rejects(p, "no_masking", settings):
        return False
    return None


def _record_comparison(
    out: dict[str, Any], paired: PairedComparison, p: Mapping[str, float], settings: VerdictSettings
) -> None:
    """The paired comparison's numbers, as ``verdict.json`` saves them."""
    eq = paired.equivalence(settings.minimum_effect, settings.alpha)
    significant = _rejects(p, "difference", settings)
    out.update(
        diff=paired.diff,
        diff_ci=[paired.ci_low, paired.ci_high],
        p_value=paired.p_value,
        n_paired=paired.n,
        n_seeds=paired.n_seeds,
        unit=paired.unit,
        minimum_effect=settings.minimum_effect,
        discordant={"only_candidate": paired.only_a, "only_baseline": paired.only_b},
        equivalence={
            "margin": eq.margin,
            "p_value": eq.p_value,
            "ci": [eq.ci_low, eq.ci_high],
            "level": 1 - 2 * eq.alpha,
            "equivalent": _rejects(p, "equivalent", settings),
        },
        above_baseline=bool(significant and paired.diff > 0),
        below_baseline=bool(significant and paired.diff < 0),
    )


def categorize(
    cand: Mapping[str, Any],
    base: Mapping[str, Any] | None,
    *,
    chance: float,
    settings: VerdictSettings,
    paired: PairedComparison | None = None,
    masking: PairedComparison | None = None,
    adjusted: Mapping[str, float] | None = None,
    seed_diffs: Sequence[float] = (),
    seed_lows: Sequence[float] | None = None,
    standing: Standing = Standing.VERIFIED,
    base_standing: Standing = Standing.VERIFIED,
) -> dict[str, Any]:
    """The category of one candidate (a dict row of :func:`claim_numbers`) against one baseline row.

    ``paired`` (:func:`paired_worst_case`: both models' worst case on the same images) gives the
    comparison's outcome (:func:`comparison_outcome`); ``masking`` (:func:`paired_masking`: blocked
    white-box vs worst case on the same images) whether masking is shown, excluded or undecided
    (:func:`masking_decision`; None when undecided or not measured, ``gap_ci`` then says which); ``adjusted`` are the Holm-adjusted p-values of this comparison among the
    verdict's others (default: its raw p-values, a family of one); ``seed_diffs`` the per-seed paired
    differences the architecture claim rests on. :data:`INCONCLUSIVE` (with ``inconclusive_reason``) when
    either model's clean accuracy is under :func:`clean_floor`, when there is no paired comparison, or when
    an unmasked candidate's comparison is undecided. Masking is a finding about the candidate alone and
    stands; the comparison's outcome is then noted as ``comparison``, and decides what the claim may say:
    :data:`MASKING` ("not supported") only where the comparison rules an advantage out (equivalence, or
    significantly less), :data:`MASKING_BUT_ROBUST` where it is confirmed, else :data:`MASKING_INCONCLUSIVE`.

    ``standing`` / ``base_standing`` (:meth:`Trust.standing <robustbench_wave.evaluation.trust.Trust.standing>`):
    a candidate that is not verified gets its :data:`UPPER_BOUND_CATEGORIES` category and an outcome an upper
    bound can support (:func:`bounded_outcome`); a baseline that is not verified leaves only an advantage
    standing (its number overstates it, so an advantage over it is a lower bound, and nothing else is).
    """
    p = dict(adjusted) if adjusted is not None else p_values(paired, masking, settings)
    worst = as_float(cand["worst_case"])
    blocked = as_float(cand.get(wb_column(GradMode.BLOCKED)))
    gap = blocked - worst if not math.isnan(blocked) else float("nan")
    # None without a paired masking comparison (no blocked-gradient records: not measured), or undecided
    shown = masking_decision(p, settings) if masking is not None else None
    out: dict[str, Any] = {"gap": gap, "masking": shown, "above_baseline": None, "p_adjusted": p}
    if masking is not None:
        out["gap_ci"] = [masking.ci_low, masking.ci_high]
    reasons = _inconclusive_reasons(cand, base, paired, chance, settings)
    if not standing.trusted:
        out["category"] = UPPER_BOUND_CATEGORIES[standing]
        out["upper_bound"] = True
    if reasons:
        out.setdefault("category", INCONCLUSIVE)
        out["inconclusive_reason"] = "; ".join(reasons)
        return out
    if base is None or paired is None:  # (a baseline without a paired comparison is a reason above)
        at_chance = worst <= chance + settings.chance_margin
        out.setdefault("category", MASKING if shown else (NOT_ROBUST if at_chance else NO_BASELINE))
        return out
    _record_comparison(out, paired, p, settings)
    outcome = judged_outcome(
        comparison_outcome(paired, p, settings, seed_diffs, seed_lows), standing, base_standing
    )
    if not standing.trusted:  # an upper bound: only what it can say, and no architecture claim
        out.update(outcome=outcome, comparison=outcome, above_baseline=None)
        out["below_baseline"] = out["below_baseline"] if base_standing.trusted else None
        return out
    out["outcome"] = outcome
    out["architecture"] = architecture(seed_diffs or [paired.diff], settings, seed_lows)
    if not base_standing.trusted and outcome == UNDECIDED:
        out.update(comparison=UNDECIDED, above_baseline=None, below_baseline=None)
        out.update(
            category=MASKING_INCONCLUSIVE if shown else INCONCLUSIVE,
            inconclusive_reason=f"the baseline {base['model']} is {base_standing.value}: its number is an upper "
            "bound, so only an advantage over it can be shown",
        )
    elif shown:
        out["category"] = MASKING_CATEGORY.get(outcome, MASKING_INCONCLUSIVE)
        out["comparison"] = outcome
    elif outcome in OUTCOME_CATEGORY:
        out["category"] = OUTCOME_CATEGORY[outcome]
    else:
        out.update(
            category=INCONCLUSIVE, inconclusive_reason=_undecided(str(base["model"]), paired, p, settings)
        )
    return out


def judged_outcome(outcome: str, standing: Standing, base_standing: Standing) -> str:
    """A comparison's outcome as the two standings let it stand: a candidate that is not verified says only
    what an upper bound can (:func:`bounded_outcome`); against a baseline that is not verified only an
    advantage stands (the baseline's number overstates it), anything else is :data:`UNDECIDED`."""
    if not standing.trusted:
        return bounded_outcome(outcome, base_standing)
    if not base_standing.trusted and outcome not in ADVANTAGE:
        return UNDECIDED
    return outcome


def bounded_outcome(outcome: str, base_standing: Standing) -> str:
    """What a comparison says when the candidate's number is an upper bound: :data:`NO_ADVANTAGE` where it
    rules an advantage out (:data:`RULES_OUT`) against a verified baseline, else :data:`BOUND_UNDECIDED`
    (an upper bound above the baseline shows nothing; against an upper-bound baseline nothing is shown)."""
    return NO_ADVANTAGE if outcome in RULES_OUT and base_standing.trusted else BOUND_UNDECIDED


#: A masking candidate's category by its comparison's outcome (the others: :data:`MASKING_INCONCLUSIVE`):
#: "not supported" only where the comparison rules an advantage out, never by masking alone.
MASKING_CATEGORY = {MORE: MASKING_BUT_ROBUST, SMALL: MASKING, NO_DIFFERENCE: MASKING, LESS: MASKING}

#: The category of an unmasked candidate whose comparison decided (an undecided one is inconclusive).
OUTCOME_CATEGORY = {
    MORE: ROBUST,
    MORE_NETWORKS: ROBUST_THESE_NETWORKS,
    SMALL: SMALL_DIFFERENCE,
    NO_DIFFERENCE: NOT_ROBUST,
    LESS: NOT_ROBUST,
}


def _inconclusive_reasons(
    cand: Mapping[str, Any],
    base: Mapping[str, Any] | None,
    paired: PairedComparison | None,
    chance: float,
    settings: VerdictSettings,
) -> list[str]:
    """Why nothing can be decided whatever the numbers: a clean accuracy under the floor, or a baseline
    that was not attacked on the same examples."""
    floor = chance + settings.clean_floor_share * (1 - chance)
    reasons = [_below_floor(cand, "candidate", floor, chance)]
    if base is not None:
        reasons.append(_below_floor(base, "baseline", floor, chance))
        if paired is None:
            reasons.append(f"{cand['model']} and {base['model']} were not attacked on the same examples")
    return [r for r in reasons if r]


def _undecided(base: str, paired: PairedComparison, p: Mapping[str, float], settings: VerdictSettings) -> str:
    """Why a comparison that neither clears the minimum effect nor lies within it decides nothing."""
    margin = number(settings.minimum_effect, scale=100.0, digits=0, unit=" points")
    eq = paired.equivalence(settings.minimum_effect, settings.alpha)
    return (
        f"the paired difference to {base} is {points(paired.diff)} with 95% interval "
        f"{interval(paired.ci_low, paired.ci_high)} ({paired.unit}): it neither clears the minimum effect of "
        f"{margin} (p = {p['more']:.2g}) nor lies within ±{margin} by the equivalence test "
        f"({100 * (1 - 2 * eq.alpha):.0f}% interval {interval(eq.ci_low, eq.ci_high)}, TOST p = "
        f"{p['equivalent']:.2g}; Holm-adjusted where several comparisons are judged): attack more examples"
    )


def _seed_categories(
    per_seed: Sequence[tuple[pd.DataFrame, FlagPair | None, FlagPair | None]],
    cand: str,
    base: str | None,
    chance: float,
    settings: VerdictSettings,
    standings: tuple[Standing, Standing] = (Standing.VERIFIED, Standing.VERIFIED),
) -> list[str]:
    """Each seed's category on its own (that seed's numbers and its own paired comparisons, a family of
    one), for the seeds that have the candidate (and the baseline); ``standings``: the candidate's and the
    baseline's (:meth:`Trust.standing <robustbench_wave.evaluation.trust.Trust.standing>`)."""
    cats = []
    for p, paired, mask in per_seed:
        c_row = p[p["model"] == cand]
        b_row = p[p["model"] == base] if base else None
        if c_row.empty or (b_row is not None and b_row.empty):
            continue
        b = {"model": base, **b_row.iloc[0].to_dict()} if b_row is not None else None
        cat = categorize(
            c_row.iloc[0].to_dict(),
            b,
            chance=chance,
            settings=settings,
            paired=pooled([paired]),
            masking=pooled([mask]) if mask is not None else None,
            standing=standings[0],
            base_standing=standings[1],
        )
        cats.append(str(cat["category"]))
    return cats


# --------------------------------------------------------------------------------------------------------
# the judgement
# --------------------------------------------------------------------------------------------------------
@dataclass
class _Unit:
    """One candidate at one budget of one threat: the seeds' numbers and flag pairs, the pooled paired
    comparisons and the raw and Holm-adjusted p-values (:func:`holm_families`)."""

    eps: float
    cand: dict[str, Any]
    base: dict[str, Any] | None
    pairs: list[FlagPair | None]
    masks: list[FlagPair | None]
    paired: PairedComparison | None
    masking: PairedComparison | None
    raw: dict[str, float]
    adjusted: dict[str, float] = field(default_factory=dict)
    facts: dict[str, Any] = field(default_factory=dict)

    @property
    def seed_comparisons(self) -> list[PairedComparison]:
        """Each seed's own paired comparison (with two or more seeds)."""
        if len(self.pairs) < 2:
            return []
        return [c for c in (pooled([p]) for p in self.pairs) if c is not None]

    @property
    def seed_diffs(self) -> list[float]:
        """Each seed's own paired difference (with two or more seeds)."""
        return [c.diff for c in self.seed_comparisons]

    @property
    def seed_lows(self) -> list[float]:
        """The lower end of each seed's own 95% interval (with two or more seeds)."""
        return [c.ci_low for c in self.seed_comparisons]


@dataclass
class _Pending:
    """One candidate at one threat before the Holm adjustment: its reference unit and its grid."""

    threat: str
    name: str
    units: list[_Unit]
    ref: int  # index of the reference budget in ``units``
    seeded: list[tuple[pd.DataFrame, pd.DataFrame]]
    spread: dict[str, Any] | None


@dataclass
class _ThreatJudgement:
    """One threat model's share of the judgement."""

    numbers: pd.DataFrame
    pending: list[_Pending] = field(default_factory=list)


def _mean_rows(
    nums: pd.DataFrame, cand: str, base: str | None
) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """The candidate's and the baseline's rows of :func:`claim_numbers`, mean over seeds."""
    mean = _combine(nums)
    c = {"model": cand, **mean.loc[cand].to_dict()}
    b = {"model": base, **mean.loc[base].to_dict()} if base and base in mean.index else None
    return c, b


def _unit(
    runs: Sequence[pd.DataFrame],
    cand: str,
    base: str | None,
    threat: str,
    eps: float,
    nums: pd.DataFrame,
    settings: VerdictSettings,
) -> _Unit:
    c, b = _mean_rows(nums, cand, base)
    pairs = [worst_case_pair(r, cand, base, threat, eps) if base else None for r in runs]
    masks = [masking_pair(r, cand, threat, eps) for r in runs]
    paired = pooled(pairs) if base else None
    masking = pooled(masks)
    return _Unit(eps, c, b, pairs, masks, paired, masking, p_values(paired, masking, settings))


def _judge_threat(
    runs: Sequence[pd.DataFrame],
    seeds: Sequence[int],
    threat: str,
    eps: float | None,
    baseline: Sequence[str] | str | None,
    settings: VerdictSettings,
) -> _ThreatJudgement | None:
    """Numbers, flag pairs and raw p-values of every candidate at every budget of one threat's grid, the
    reference budget marked (None: not evaluated); categorized after the Holm adjustment (:func:`judge`)."""
    if eps is not None and not runs[0][runs[0]["threat"] == threat].empty:
        eps = check_on_grid(runs[0], threat, eps)  # refused, never replaced
    eps = eps or reference_eps(runs[0], threat)
    if eps is None:
        return None
    seeded = [(claim_numbers(r, threat=threat, eps=eps, seed=s), r) for r, s in zip(runs, seeds)]
    seeded = [(p, r) for p, r in seeded if not p.empty]
    if not seeded:
        return None
    out = _ThreatJudgement(pd.concat([p for p, _ in seeded], ignore_index=True))
    candidates, baselines = _roles(_combine(out.numbers).reset_index(), baseline)
    base_name = baselines[0] if baselines else None
    seeded_runs = [r for _, r in seeded]
    grid = sorted({e for e in threat_eps(runs[0], threat) if e > 0} | {float(eps)})
    per_eps = {
        e: (
            out.numbers
            if math.isclose(e, eps)
            else pd.concat([claim_numbers(r, threat=threat, eps=e) for r in seeded_runs], ignore_index=True)
        )
        for e in grid
    }
    for cand_name in candidates:
        units = [_unit(seeded_runs, cand_name, base_name, threat, e, per_eps[e], settings) for e in grid]
        ref = next(i for i, e in enumerate(grid) if math.isclose(e, eps))
        spread = _spread(out.numbers, cand_name, base_name) if len(seeded) > 1 else None
        out.pending.append(_Pending(threat, cand_name, units, ref, list(seeded), spread))
    return out


def holm_families(units: Sequence[_Unit]) -> int:
    """Holm-adjust every kind of claim (:data:`TESTS`) across ``units`` (every candidate, threat and budget
    the verdict states), in place; returns the family size (the comparisons with a paired test)."""
    for test in TESTS:
        for unit, p in zip(units, holm_adjusted([u.raw[test] for u in units])):
            unit.adjusted[test] = p
    return sum(u.paired is not None for u in units)


def _standings(pend: _Pending, trust: Trust) -> tuple[Standing, Standing]:
    """The candidate's and the baseline's standing over the modes they were attacked under."""
    ref = pend.units[pend.ref]
    cand = trust.standing(pend.name, _modes(ref.cand))
    base = trust.standing(str(ref.base["model"]), _modes(ref.base)) if ref.base else Standing.VERIFIED
    return cand, base


def _modes(row: Mapping[str, Any]) -> list[str]:
    """The gradient modes of a :func:`claim_numbers` row."""
    return [m for m in str(row.get("modes") or "").split(",") if m]


def _finish(
    pend: _Pending,
    chance: float,
    settings: VerdictSettings,
    family: int,
    self_transfer: Collection[str],
    trust: Trust,
) -> CandidateJudgement:
    """The candidate's categories at every budget (adjusted p-values), its grid and its facts."""
    standings = _standings(pend, trust)
    for u in pend.units:
        u.facts = categorize(
            u.cand,
            u.base,
            chance=chance,
            settings=settings,
            paired=u.paired,
            masking=u.masking,
            adjusted=u.adjusted,
            seed_diffs=u.seed_diffs,
            seed_lows=u.seed_lows,
            standing=standings[0],
            base_standing=standings[1],
        )
    ref = pend.units[pend.ref]
    facts = dict(ref.facts)
    facts["holm_family"] = family
    seed_cats = _seed_categories(
        [(p, pair, mask) for (p, _), pair, mask in zip(pend.seeded, ref.pairs, ref.masks)],
        pend.name,
        ref.base["model"] if ref.base else None,
        chance,
        settings,
        standings,
    )
    if len(seed_cats) >= 2:
        facts["seed_categories"] = seed_cats
        agree = sum(_agrees(c, str(facts["category"])) for c in seed_cats)
        facts["seed_agreement"] = f"{agree}/{len(seed_cats)} seeds"
        diffs = seed_spread(ref.seed_diffs)
        if diffs.n_seeds > 1:
            facts["seed_diff_mean"], facts["seed_diff_sd"] = diffs.mean, diffs.sd
    grid = _grid(pend) if len(pend.units) >= 2 else None
    facts["masking_eps"] = grid.masking_eps if grid else ([ref.eps] if facts["masking"] else [])
    if grid is not None and ref.base is not None:
        facts["advantage_eps"] = grid.advantage_eps
        facts["grid_outcomes"] = {f"{e:.4g}": o for e, o in zip(grid.eps, grid.outcomes)}
    facts["self_transfer"] = pend.name in self_transfer  # its transfer rows are white-box restarts
    why = trust.why(pend.name, _modes(ref.cand))
    if why:
        facts["unverified_modes"] = why  # mode -> why it is no measure of robustness
    return CandidateJudgement(
        f"{pend.name}@{pend.threat}",
        ref.cand,
        ref.base,
        facts,
        pend.spread,
        len(pend.seeded),
        grid,
    )


#: What one seed can say at most of a pooled category that needs several (:data:`MIN_ARCHITECTURE_SEEDS`).
_ONE_SEED = {ROBUST: ROBUST_THESE_NETWORKS, MASKING_BUT_ROBUST: MASKING_INCONCLUSIVE}


def _agrees(seed_category: str, pooled: str) -> bool:
    """Whether one seed's own category agrees with the pooled one (as far as one seed can say it)."""
    return seed_category in (pooled, _ONE_SEED.get(pooled))


def _grid(pend: _Pending) -> GridNumbers:
    """The grid's numbers and per-budget decisions of one candidate (categorized units)."""
    units = pend.units
    base = units[pend.ref].base
    masking = [u.facts.get("masking") for u in units]
    return GridNumbers(
        pend.threat,
        pend.name,
        base["model"] if base else None,
        [u.eps for u in units],
        [as_float(u.cand.get(wb_column(GradMode.BLOCKED))) for u in units],
        [as_float(u.cand["worst_case"]) for u in units],
        [as_float(u.base["worst_case"]) for u in units] if base else [],
        [u.eps for u, m in zip(units, masking) if m is True],
        [str(u.facts.get("outcome", UNDECIDED if u.base else "")) for u in units],
        masking,
    )


def energy_contrast(energy: Mapping[str, Any], settings: VerdictSettings) -> EnergyContrast | None:
    """What sparsification removes more of, from one model's mean removed shares {"noise", "pgd",
    "lowfreq_pgd"} (``energy.describe_energy``); None without both noise and PGD."""
    noise, adv = as_float(energy.get("noise")), as_float(energy.get("pgd"))
    if math.isnan(noise) or math.isnan(adv):
        return None
    if noise - adv >= settings.energy_gap:
        more = FILTERS_NOISE
    elif adv - noise >= settings.energy_gap:
        more = FILTERS_ADVERSARIAL
    else:
        more = FILTERS_ALIKE
    return EnergyContrast(noise, adv, as_float(energy.get("lowfreq_pgd")), more)


def failed_checks(fails: Mapping[str, Sequence[str]]) -> dict[str, list[str]]:
    """Failed check names by gradient mode, each once, modes without a failure left out."""
    return {m: list(dict.fromkeys(v)) for m, v in fails.items() if v}


def doubts_evaluation(failed: Mapping[str, Sequence[str]]) -> bool:
    """True when checks fail outside ``blocked``: there the evaluation may overstate robustness (under
    blocked gradients failures are the expected signature of the source paper's premise, no gradient)."""
    return any(mode != GradMode.BLOCKED.value for mode in failed)


def _all_numbers(parts: Sequence[_ThreatJudgement], self_transfer: Collection[str]) -> pd.DataFrame:
    """Every threat's numbers in one table, each model marked when its transfer rows are white-box restarts."""
    numbers = (
        pd.concat([j.numbers for j in parts], ignore_index=True)
        if parts
        else pd.DataFrame(columns=list(_COLUMNS))
    )
    numbers["self_transfer"] = numbers["model"].isin(set(self_transfer))
    return numbers


def judge(
    records: pd.DataFrame | Sequence[pd.DataFrame],
    *,
    num_classes: int,
    threats: Sequence[str] = (Threat.LINF.value, Threat.L2.value),
    eps: Mapping[str, float] | None = None,
    baseline: Sequence[str] | str | None = None,
    energy: Mapping[str, Mapping[str, Any]] | None = None,
    diagnostics_failures: Mapping[str, Mapping[str, Sequence[str]]] | None = None,
    seeds: Sequence[int] | None = None,
    settings: VerdictSettings | None = None,
    self_transfer: Collection[str] = (),
    trust: Trust | None = None,
) -> Judgement:
    """The judgement at each threat's reference eps, and at every budget of its grid (where the advantage
    ends).  ``records`` may be a list (one frame per training seed): numbers then combine into mean ±
    standard deviation, the category is decided on the seeds pooled with the image as the unit, a claim of
    "more robust" also needs the per-seed differences' t interval to clear the minimum effect (the
    architecture claim, :func:`architecture`), and each seed's own category is reported beside it
    (``seed_agreement``). Every kind of claim is Holm-adjusted across candidates, threats and budgets
    (:func:`holm_families`).

    ``energy``: per model {"noise", "pgd", "lowfreq_pgd"} mean removed shares (``energy.describe_energy``);
    ``diagnostics_failures``: per model, failed check names by gradient mode (``"all"`` for mode-free
    checks); failures outside ``blocked`` qualify any "robust" category (robustness may be overestimated);
    ``self_transfer``: models whose transfer attacks were crafted on themselves (``checks.compare.
    self_transfer_models`` of meta.json), whose "transfer" numbers are then white-box restarts;
    ``trust``: the runs' :class:`~robustbench_wave.evaluation.trust.Trust` (the checklist, the scan, the
    escalation); a candidate with no trusted mode is :data:`UNVERIFIED` (marked) or :data:`UNCHECKED` (no
    checklist judged it: the default, ``trust`` None), never a robustness category.
    """
    settings = settings or VerdictSettings()
    runs = [records] if isinstance(records, pd.DataFrame) else list(records)
    if not runs:
        raise ValueError("no records to judge")
    seeds = list(seeds) if seeds is not None else list(range(len(runs)))
    judged = [_judge_threat(runs, seeds, t, (eps or {}).get(t), baseline, settings) for t in threats]
    parts = [j for j in judged if j is not None]
    pending = [p for j in parts for p in j.pending]
    family = holm_families([u for p in pending for u in p.units])
    chance = 1.0 / num_classes
    candidates = [_finish(p, chance, settings, family, self_transfer, trust or Trust()) for p in pending]
    contrasts = {m: energy_contrast(row, settings) for m, row in (energy or {}).items()}
    failed = {m: failed_checks(f) for m, f in (diagnostics_failures or {}).items()}
    failed = {m: f for m, f in failed.items() if f}
    out = Judgement(
        numbers=_all_numbers(parts, self_transfer),
        candidates=candidates,
        energy={m: c for m, c in contrasts.items() if c is not None},
        diagnostics=failed,
        caution=[],
        settings=settings,
    )
    claimed = {k.split("@")[0] for k, c in out.categories.items() if c in CLAIMS_ROBUSTNESS}
    out.caution = sorted(claimed & {m for m, f in failed.items() if doubts_evaluation(f)})
    return out


#: Categories that say the candidate is more robust than the baseline (qualified by failed diagnostics).
CLAIMS_ROBUSTNESS = (ROBUST, MASKING_BUT_ROBUST, ROBUST_THESE_NETWORKS)


def _combine(allnum: pd.DataFrame) -> pd.DataFrame:
    """Mean over seeds per model (index model); n is the smallest per-seed n."""
    text = ("model", "seed", "threat", "eps", "modes", "n", "lowfreq_alone", "cumulative")
    numeric = [c for c in _COLUMNS if c not in text]
    grouped = allnum.groupby("model", sort=False)
    mean = grouped[numeric].agg(lambda s: pd.to_numeric(s, errors="coerce").mean())
    mean["n"] = grouped["n"].min()
    for col in ("modes", "lowfreq_alone", "threat", "eps"):
        mean[col] = grouped[col].first()
    mean["cumulative"] = grouped["cumulative"].agg(_union)
    return mean


def _spread(allnum: pd.DataFrame, cand: str, base: str | None) -> dict[str, Any]:
    """Standard deviation over seeds of the candidate's accuracies (and the baseline's worst case)."""

    def sd(model: str, col: str) -> float:
        vals = pd.to_numeric(allnum.loc[allnum["model"] == model, col], errors="coerce").dropna()
        return float(vals.std(ddof=1)) if len(vals) > 1 else float("nan")

    out = {
        c: sd(cand, c)
        for c in _COLUMNS
        if c.startswith(("wb_", "clean", "gradient", "transfer", "low", "worst"))
    }
    if base is not None:
        out["base_worst_case"] = sd(base, "worst_case")
    return out


def _union(values: pd.Series) -> str:
    """The comma-separated names of any seed (each once, in order)."""
    return ",".join(dict.fromkeys(c for v in values for c in str(v).split(",") if c))
