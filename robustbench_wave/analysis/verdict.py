"""The verdict on the wavelet tokenizer's claim ("naturally resistant to adversarial attacks"), from numbers.

The source paper (Zhu & Soricut 2024) argues that fixed kernels leave "no gradient" to attack. A model's
robustness supports that claim only if it survives attacks that do differentiate the front-end (exact
autograd, BPDA; Athalye et al. 2018), gradient-free attacks (Square) and transfer -- the per-example worst
case over all of them (Croce & Hein 2020) -- and exceeds that of a patch-tokenizer baseline evaluated the
same way (Carlini et al. 2019).

Everything here is computed from per-example records in two layers: :func:`claim_numbers` (accuracies
from :mod:`robustbench_wave.evaluation.metrics`) and :func:`categorize` (a category from those numbers and
the paired comparison of candidate and baseline on the same examples: the exact McNemar test on the
discordant pairs and Newcombe's interval of the difference, seeds pooled with the image as the unit,
:func:`metrics.paired_over_seeds`);
:func:`judge` gathers them, with the energy and diagnostics findings, into a :class:`Judgement`. The words
are :mod:`robustbench_wave.reporting.verdict_text`'s, which renders a judgement and decides nothing. No
verdict is given on a model not worth attacking (clean accuracy under :func:`clean_floor`) or when the
comparison cannot decide (neither significant nor equivalent within :data:`EQUIVALENCE_MARGIN`): the
category is then :data:`INCONCLUSIVE`, with the reason. Model *names* are only labels in the text. A model's
role follows its measurements: models evaluated under several gradient modes (a fixed front-end) are the
candidates, models evaluated only with exact gradients are the baselines -- or pass ``baseline=`` explicitly.
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
from robustbench_wave.evaluation.escalation import path_reason
from robustbench_wave.evaluation.metrics import (
    PairedComparison,
    clean_correct,
    paired_over_seeds,
    reference_eps,
    robust_accuracy,
    robust_flags,
    seed_spread,
    shared_status,
    threat_eps,
)
from robustbench_wave.models.frontend import GradMode

log = logging.getLogger(__name__)

MASKING = "gradient masking"
NOT_ROBUST = "no natural robustness"
ROBUST = "robust under all attacks"
MASKING_BUT_ROBUST = "partly gradient masking, still more robust"
NO_BASELINE = "no baseline"
INCONCLUSIVE = "inconclusive"
UNVERIFIED = "unverified (gradient checks failed)"
ALL_MODES = "all"  # key of mode-free checks in ``diagnostics_failures``

CLEAN_FLOOR_SHARE = 1 / 3
"""A model is worth attacking only if its clean accuracy covers at least this share of the way from chance
(1 / num_classes) to 100%: 40% for 10 classes, 50% for 4 (:func:`clean_floor`).

Robust accuracy never exceeds clean accuracy, so below this floor a model's robust accuracy mostly says how
little it learned, and two such models differ by how far training got, not by how robust their tokenizers
are: at 12% on CIFAR-10 (chance 10%) every attack "wins" and no robustness claim is tested. A third of the
way is far above chance (4x chance's distance for 10 classes) yet below what the recipe reaches on every
data set it was tuned for, so only a model that failed to train is refused.
"""

EQUIVALENCE_MARGIN = 0.10
"""The margin of the equivalence test that decides "no more robust than the baseline" (and every "not
supported" of a paired comparison in :mod:`.claims`): 10 points of worst-case accuracy.

A non-significant test says the data do not show a difference, not that there is none. "Not supported"
needs positive evidence of no worthwhile difference: two one-sided tests (TOST, Schuirmann 1987) at
``alpha`` each that the paired difference lies inside (-10, +10) points, i.e. the 90% interval inside the
margin (:meth:`metrics.PairedComparison.equivalence`). 10 points because the claim under test is a large
effect ("naturally resistant"): an advantage under 10 points of worst-case accuracy is within the seed-to-seed
spread of these small models' accuracies and is no resistance a reader would act on. An interval such as
[-1, +19] is then inconclusive (attack more examples), not "not supported"; a significant test decides
whatever the interval (the sign is then known).
"""


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

    gap_tol: float = 0.10  # blocked minus worst case: robustness that only blocked gradients show
    chance_margin: float = 0.05  # "at chance" = within this of 1/num_classes
    energy_gap: float = 0.10  # noise minus adversarial energy removed: the mechanism filters noise only
    alpha: float = 0.05  # level of the two-sided exact test of candidate vs baseline, and of each TOST side
    clean_floor_share: float = CLEAN_FLOOR_SHARE  # see CLEAN_FLOOR_SHARE
    equivalence_margin: float = EQUIVALENCE_MARGIN  # see EQUIVALENCE_MARGIN


def clean_floor(num_classes: int, share: float = CLEAN_FLOOR_SHARE) -> float:
    """The clean accuracy below which a model is not worth attacking: chance + ``share`` x (1 - chance)."""
    if num_classes < 2:
        raise ValueError(f"num_classes must be >= 2, got {num_classes}")
    chance = 1.0 / num_classes
    return chance + share * (1.0 - chance)


@dataclass(frozen=True)
class GridNumbers:
    """One candidate's blocked white-box and worst-case accuracy (and the baseline's worst case) at every
    budget of a threat's grid, averaged over runs, and the budgets where blocked gradients show masking."""

    threat: str
    candidate: str
    baseline: str | None
    eps: list[float]
    blocked: list[float]
    worst: list[float]
    base_worst: list[float]
    masking_eps: list[float]


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
        """The facts as ``verdict.json`` saves them (NaN as None)."""
        return {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in self.facts.items()}


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
    per-example worst case over all of them."""
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


def paired_worst_case(
    records: pd.DataFrame | Sequence[pd.DataFrame], cand: str, base: str, threat: str, eps: float
) -> PairedComparison | None:
    """Candidate vs baseline per-example worst case on the images every run attacked both on, seeds
    pooled with the image as the unit (:func:`metrics.paired_over_seeds`); None when they share none."""
    runs = [records] if isinstance(records, pd.DataFrame) else list(records)
    return pooled([worst_case_pair(r, cand, base, threat, eps) for r in runs])


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
# categories
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


def _compare(out: dict[str, Any], paired: PairedComparison, settings: VerdictSettings) -> bool:
    """Record the paired comparison in ``out``; True when it decides (significant, or equivalent within the
    margin by two one-sided tests)."""
    eq = paired.equivalence(settings.equivalence_margin, settings.alpha)
    out.update(
        diff=paired.diff,
        diff_ci=[paired.ci_low, paired.ci_high],
        p_value=paired.p_value,
        n_paired=paired.n,
        n_seeds=paired.n_seeds,
        unit=paired.unit,
        discordant={"only_candidate": paired.only_a, "only_baseline": paired.only_b},
        equivalence={
            "margin": eq.margin,
            "p_value": eq.p_value,
            "ci": [eq.ci_low, eq.ci_high],
            "level": 1 - 2 * eq.alpha,
            "equivalent": eq.equivalent,
        },
    )
    significant = paired.p_value < settings.alpha
    out["above_baseline"] = bool(significant and paired.diff > 0)
    out["below_baseline"] = bool(significant and paired.diff < 0)
    return significant or eq.equivalent


def categorize(
    cand: Mapping[str, Any],
    base: Mapping[str, Any] | None,
    *,
    chance: float,
    settings: VerdictSettings,
    paired: PairedComparison | None = None,
) -> dict[str, Any]:
    """The category of one candidate (a dict row of :func:`claim_numbers`) against one baseline row.

    ``gap`` = blocked white-box minus worst case (masking when >= ``gap_tol``; ``masking`` is None when the
    candidate has no blocked-gradient records: not measured). Against a baseline,
    ``paired`` (:func:`paired_worst_case`: both models' worst case on the same examples) decides:
    ``above_baseline`` / ``below_baseline`` = the two-sided exact McNemar test significant at ``alpha``.
    :data:`INCONCLUSIVE` (with ``inconclusive_reason``) when either model's clean accuracy is under
    :func:`clean_floor`, when there is no paired comparison, or when an unmasked candidate's comparison is
    neither significant nor equivalent (TOST within ``equivalence_margin``). Masking is a finding about the
    candidate alone and stands; an undecided comparison is then noted as ``comparison = "inconclusive"``.
    """
    worst = as_float(cand["worst_case"])
    blocked = as_float(cand.get(wb_column(GradMode.BLOCKED)))
    gap = blocked - worst if not math.isnan(blocked) else float("nan")
    # None, not False, without blocked-gradient records: no attack ran under that mode, so nothing is said of it
    masking = None if math.isnan(blocked) else bool(gap >= settings.gap_tol)
    out: dict[str, Any] = {"gap": gap, "masking": masking, "above_baseline": None}
    floor = chance + settings.clean_floor_share * (1 - chance)
    reasons = [_below_floor(cand, "candidate", floor, chance)]
    if base is not None:
        reasons.append(_below_floor(base, "baseline", floor, chance))
        if paired is None:
            reasons.append(f"{cand['model']} and {base['model']} were not attacked on the same examples")
    reasons = [r for r in reasons if r]
    if reasons:
        out.update(category=INCONCLUSIVE, inconclusive_reason="; ".join(reasons))
        return out
    if base is None or paired is None:  # (a baseline without a paired comparison is a reason above)
        at_chance = worst <= chance + settings.chance_margin
        out["category"] = MASKING if masking else (NOT_ROBUST if at_chance else NO_BASELINE)
        return out
    decided = _compare(out, paired, settings)
    if masking:
        out["category"] = MASKING_BUT_ROBUST if out["above_baseline"] else MASKING
        out["comparison"] = "decided" if decided else INCONCLUSIVE
    elif out["above_baseline"]:
        out["category"] = ROBUST
    elif decided:
        out["category"] = NOT_ROBUST
    else:
        out.update(
            category=INCONCLUSIVE, inconclusive_reason=_undecided(str(base["model"]), paired, settings)
        )
    return out


def _undecided(base: str, paired: PairedComparison, settings: VerdictSettings) -> str:
    """Why a comparison that is neither significant nor equivalent decides nothing."""
    margin = number(settings.equivalence_margin, scale=100.0, digits=0, unit=" points")
    eq = paired.equivalence(settings.equivalence_margin, settings.alpha)
    return (
        f"the paired difference to {base} is {points(paired.diff)} with 95% interval "
        f"{interval(paired.ci_low, paired.ci_high)} ({paired.unit}): the exact test is not significant "
        f"(p = {paired.p_value:.2g}) and the equivalence test does not place it within ±{margin} "
        f"({100 * (1 - 2 * eq.alpha):.0f}% interval {interval(eq.ci_low, eq.ci_high)}, TOST p = "
        f"{eq.p_value:.2g}): attack more examples"
    )


def _seed_categories(
    per_seed: Sequence[tuple[pd.DataFrame, FlagPair | None]],
    cand: str,
    base: str | None,
    chance: float,
    settings: VerdictSettings,
) -> list[str]:
    """Each seed's category on its own (that seed's numbers and its own paired comparison), for the seeds
    that have the candidate (and the baseline)."""
    cats = []
    for p, paired in per_seed:
        c_row = p[p["model"] == cand]
        b_row = p[p["model"] == base] if base else None
        if c_row.empty or (b_row is not None and b_row.empty):
            continue
        b = {"model": base, **b_row.iloc[0].to_dict()} if b_row is not None else None
        cat = categorize(
            c_row.iloc[0].to_dict(), b, chance=chance, settings=settings, paired=pooled([paired])
        )
        cats.append(str(cat["category"]))
    return cats


# --------------------------------------------------------------------------------------------------------
# the judgement
# --------------------------------------------------------------------------------------------------------
@dataclass
class _ThreatJudgement:
    """One threat model's share of the judgement."""

    numbers: pd.DataFrame
    candidates: list[CandidateJudgement] = field(default_factory=list)


def _judge_threat(
    runs: Sequence[pd.DataFrame],
    seeds: Sequence[int],
    threat: str,
    eps: float | None,
    baseline: Sequence[str] | str | None,
    chance: float,
    settings: VerdictSettings,
    self_transfer: Collection[str] = (),
    marks: Marks | None = None,
) -> _ThreatJudgement | None:
    """Numbers and categories of every candidate at one threat's budget (None: not evaluated)."""
    eps = eps or reference_eps(runs[0], threat)
    if eps is None:
        return None
    seeded = [(claim_numbers(r, threat=threat, eps=eps, seed=s), r) for r, s in zip(runs, seeds)]
    seeded = [(p, r) for p, r in seeded if not p.empty]
    if not seeded:
        return None
    out = _ThreatJudgement(pd.concat([p for p, _ in seeded], ignore_index=True))
    mean = _combine(out.numbers)
    candidates, baselines = _roles(mean.reset_index(), baseline)
    base_name = baselines[0] if baselines else None
    base = {"model": base_name, **mean.loc[base_name].to_dict()} if base_name else None
    for cand_name in candidates:
        cand = {"model": cand_name, **mean.loc[cand_name].to_dict()}
        pairs = [
            worst_case_pair(r, cand_name, base_name, threat, eps) if base_name else None for _, r in seeded
        ]
        facts = _judge_candidate(cand, base, pairs, seeded, chance, settings)
        spread = _spread(out.numbers, cand_name, base_name) if len(seeded) > 1 else None
        grid = grid_numbers(runs, cand_name, base_name, threat, settings)
        facts["masking_eps"] = grid.masking_eps if grid else []
        facts["self_transfer"] = cand_name in self_transfer  # its transfer rows are white-box restarts
        facts |= _unverified_facts(cand_name, str(cand.get("modes") or ""), marks or {})
        judged = CandidateJudgement(f"{cand_name}@{threat}", cand, base, facts, spread, len(seeded), grid)
        out.candidates.append(judged)
    return out


def _unverified_facts(model: str, modes: str, marks: Marks) -> dict[str, Any]:
    """``unverified_modes`` (mode -> why) of a candidate with marked modes; when every mode it was attacked
    under is marked, its category becomes :data:`UNVERIFIED` (the number is no robustness, whatever the
    comparison said: an upper bound from attacks that could not use the gradient)."""
    attacked = [m for m in modes.split(",") if m]
    why = {m: marks[(model, m)] for m in attacked if (model, m) in marks}
    if not why:
        return {}
    out: dict[str, Any] = {"unverified_modes": why}
    if len(why) == len(attacked):
        out["category"] = UNVERIFIED
    return out


def _judge_candidate(
    cand: Mapping[str, Any],
    base: Mapping[str, Any] | None,
    pairs: Sequence[FlagPair | None],
    seeded: Sequence[tuple[pd.DataFrame, pd.DataFrame]],
    chance: float,
    settings: VerdictSettings,
) -> dict[str, Any]:
    """One candidate's category, decided on the seeds pooled with the image as the unit (:func:`pooled`:
    every seed attacked the same images, so this is the one comparison with the right unit). With two or
    more seeds the per-seed categories are reported beside it -- ``seed_categories`` and ``seed_agreement``
    ("k/n seeds": how many reach the pooled category on their own) -- and never replace it: a majority of
    per-seed tests on a third of the data each can be undecided where the pooled test decides, or decide
    where it cannot. Also the spread of the per-seed paired differences (mean ± sd)."""
    base_name = base["model"] if base else None
    cat = categorize(cand, base, chance=chance, settings=settings, paired=pooled(pairs))
    per_seed = [(p, pair) for (p, _), pair in zip(seeded, pairs)]
    seed_cats = _seed_categories(per_seed, str(cand["model"]), base_name, chance, settings)
    if len(seed_cats) < 2:
        return cat
    agree = sum(c == cat["category"] for c in seed_cats)
    cat["seed_categories"] = seed_cats
    cat["seed_agreement"] = f"{agree}/{len(seed_cats)} seeds"
    one_seed = [pooled([p]) for p in pairs]
    diffs = seed_spread([p.diff for p in one_seed if p is not None])
    if diffs.n_seeds > 1:
        cat["seed_diff_mean"], cat["seed_diff_sd"] = diffs.mean, diffs.sd
    return cat


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


#: (model, gradient mode) -> why that model's cells in that mode are no measure of robustness.
Marks = dict[tuple[str, str], str]


def unverified_cells(meta: Mapping[str, Any], diagnostics: Sequence[Mapping[str, Any]]) -> Marks:
    """The (model, gradient mode) pairs whose robust accuracies the tables mark and the verdict never quotes
    as robustness: the mode failed a check of the gradient-masking checklist (``diagnostics``: diagnostics.json's
    entries; a mode-free failure, e.g. ``deterministic``, fails every mode), or the model's scan found its
    gradient lost or unhandled (meta.json's ``gradient_path``) and no escalation ran (its ``escalation``)."""
    models = meta.get("models") or {}
    out: Marks = {}
    for d in diagnostics:
        model = str(d["model"])
        modes = (models.get(model) or {}).get("grad_modes") or sorted(
            {c["grad_mode"] for c in d.get("checks", []) if c.get("grad_mode")}
        )
        fails: dict[str, list[str]] = {}
        for c in d.get("checks", []):
            if c.get("passed") is False:
                for mode in [c["grad_mode"]] if c.get("grad_mode") else modes:
                    fails.setdefault(mode, []).append(str(c["name"]))
        for mode, names in fails.items():
            out[(model, mode)] = "failed gradient checks: " + ", ".join(dict.fromkeys(names))
    for model, m in models.items():
        reason = path_reason(m["gradient_path"]) if m.get("gradient_path") else None
        if reason is not None and not m.get("escalation"):
            for mode in m.get("grad_modes") or []:
                out.setdefault((str(model), str(mode)), f"{reason}; not escalated")
    return out


def failed_checks(fails: Mapping[str, Sequence[str]]) -> dict[str, list[str]]:
    """Failed check names by gradient mode, each once, modes without a failure left out."""
    return {m: list(dict.fromkeys(v)) for m, v in fails.items() if v}


def doubts_evaluation(failed: Mapping[str, Sequence[str]]) -> bool:
    """True when checks fail outside ``blocked``: there the evaluation may overstate robustness (under
    blocked gradients failures are the expected signature of the source paper's premise, no gradient)."""
    return any(mode != GradMode.BLOCKED.value for mode in failed)


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
    unverified: Marks | None = None,
) -> Judgement:
    """The judgement at each threat's reference eps.  ``records`` may be a list (one frame per training
    seed): numbers then combine into mean ± standard deviation and the category is decided on the seeds
    pooled with the image as the unit, each seed's own category reported beside it (``seed_agreement``).

    ``energy``: per model {"noise", "pgd", "lowfreq_pgd"} mean removed shares (``energy.describe_energy``);
    ``diagnostics_failures``: per model, failed check names by gradient mode (``"all"`` for mode-free
    checks); failures outside ``blocked`` qualify any "robust" category (robustness may be overestimated);
    ``self_transfer``: models whose transfer attacks were crafted on themselves (``checks.compare.
    self_transfer_models`` of meta.json), whose "transfer" numbers are then white-box restarts;
    ``unverified``: :func:`unverified_cells` of the runs -- a candidate every one of whose modes is marked is
    :data:`UNVERIFIED`, never a robustness category.
    """
    settings = settings or VerdictSettings()
    runs = [records] if isinstance(records, pd.DataFrame) else list(records)
    if not runs:
        raise ValueError("no records to judge")
    seeds = list(seeds) if seeds is not None else list(range(len(runs)))
    judged = [
        _judge_threat(
            runs,
            seeds,
            t,
            (eps or {}).get(t),
            baseline,
            1.0 / num_classes,
            settings,
            self_transfer,
            unverified,
        )
        for t in threats
    ]
    parts = [j for j in judged if j is not None]
    contrasts = {m: energy_contrast(row, settings) for m, row in (energy or {}).items()}
    failed = {m: failed_checks(f) for m, f in (diagnostics_failures or {}).items()}
    failed = {m: f for m, f in failed.items() if f}
    numbers = (
        pd.concat([j.numbers for j in parts], ignore_index=True)
        if parts
        else pd.DataFrame(columns=list(_COLUMNS))
    )
    numbers["self_transfer"] = numbers["model"].isin(set(self_transfer))
    out = Judgement(
        numbers=numbers,
        candidates=[c for j in parts for c in j.candidates],
        energy={m: c for m, c in contrasts.items() if c is not None},
        diagnostics=failed,
        caution=[],
        settings=settings,
    )
    claimed = {k.split("@")[0] for k, c in out.categories.items() if c in (ROBUST, MASKING_BUT_ROBUST)}
    out.caution = sorted(claimed & {m for m, f in failed.items() if doubts_evaluation(f)})
    return out


def grid_numbers(
    runs: Sequence[pd.DataFrame], cand: str, base: str | None, threat: str, settings: VerdictSettings
) -> GridNumbers | None:
    """Blocked vs worst case (and the baseline's) at every budget of the grid, averaged over runs, so that
    masking at budgets other than the reference one is not hidden; None with fewer than two budgets."""
    grid = [e for e in threat_eps(runs[0], threat) if e > 0]
    if len(grid) < 2:
        return None
    nums = pd.concat([claim_numbers(r, threat=threat, eps=e) for r in runs for e in grid], ignore_index=True)
    blocked_col = wb_column(GradMode.BLOCKED)
    mean = nums.groupby(["model", "eps"])[[blocked_col, "worst_case"]].agg(
        lambda v: pd.to_numeric(v, errors="coerce").mean()
    )

    def series(model: str, col: str) -> list[float]:
        return [as_float(mean.loc[(model, e), col]) if (model, e) in mean.index else math.nan for e in grid]

    blocked, worst = series(cand, blocked_col), series(cand, "worst_case")
    masking_eps = [
        e for e, b, w in zip(grid, blocked, worst) if not math.isnan(b) and b - w >= settings.gap_tol
    ]
    base_worst = series(base, "worst_case") if base is not None else []
    return GridNumbers(threat, cand, base, grid, blocked, worst, base_worst, masking_eps)


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
