"""The verdict in words: a :class:`~robustbench_wave.analysis.verdict.Judgement` rendered as the Markdown
paragraphs of ``report.md``, ``verdict.json`` and ``claims.md``.

Every number and every category comes from :mod:`robustbench_wave.analysis.verdict`; this module only
chooses the sentence that says them (one per candidate and threat, then the energy contrasts and the failed
diagnostics, under a one-line headline), so the same judgement always reads the same.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from robustbench_wave.analysis.formatting import as_float, interval, number, percent, points
from robustbench_wave.analysis.verdict import (
    ADVANTAGE,
    BOUND_UNDECIDED,
    FILTERS_ADVERSARIAL,
    FILTERS_NOISE,
    INCONCLUSIVE,
    LESS,
    MASKING,
    MASKING_BUT_ROBUST,
    MASKING_INCONCLUSIVE,
    MORE_NETWORKS,
    NO_ADVANTAGE,
    NO_BASELINE,
    NOT_ROBUST,
    ROBUST,
    ROBUST_THESE_NETWORKS,
    SMALL,
    SMALL_DIFFERENCE,
    UNCHECKED,
    UNDECIDED,
    UNVERIFIED,
    UPPER_BOUND_CATEGORIES,
    CandidateJudgement,
    EnergyContrast,
    GridNumbers,
    Judgement,
    judge,
    wb_column,
)
from robustbench_wave.evaluation.trust import ALL_MODES
from robustbench_wave.models.frontend import GradMode

log = logging.getLogger(__name__)


@dataclass
class Verdict:
    """Plain-words verdict (Markdown paragraphs), per-model categories and the numbers behind them."""

    text: str
    categories: dict[str, str]
    numbers: pd.DataFrame
    headline: str = ""
    details: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "headline": self.headline,
            "text": self.text,
            "categories": self.categories,
            "numbers": self.numbers.replace({np.nan: None}).to_dict(orient="records"),
            "details": self.details,
        }


def verdict(records: pd.DataFrame | Sequence[pd.DataFrame], **kwargs: Any) -> Verdict:
    """:func:`~robustbench_wave.analysis.verdict.judge` (same arguments) put into words."""
    return render(judge(records, **kwargs))


def render(judgement: Judgement) -> Verdict:
    """The headline, one paragraph per candidate and threat, then the energy and diagnostics sentences."""
    paragraphs = [_candidate_paragraph(c, judgement.settings.gap_tol) for c in judgement.candidates]
    paragraphs += [_energy_sentence(m, e) for m, e in judgement.energy.items()]
    paragraphs += [_diagnostics_sentence(m, f) for m, f in judgement.diagnostics.items()]
    headline = _headline(judgement.categories, judgement.details)
    if judgement.caution:
        headline += (
            f" Caution: the diagnostics flag the evaluation of {', '.join(judgement.caution)} "
            "outside blocked gradients, so this robustness may be overestimated."
        )
    text = "\n\n".join([f"**Verdict:** {headline}", *paragraphs])
    log.info("verdict: %s", headline)
    return Verdict(text, judgement.categories, judgement.numbers, headline, judgement.details)


# --------------------------------------------------------------------------------------------------------
# one candidate
# --------------------------------------------------------------------------------------------------------
def _candidate_paragraph(c: CandidateJudgement, gap_tol: float) -> str:
    """The category's sentence, the architecture claim, the seeds' agreement and the grid."""
    text = _sentence(c.cand, c.base, c.facts, c.spread, gap_tol)
    facts = c.facts
    arch = _architecture_sentence(facts)
    if arch:
        text += f" {arch}"
    if "seed_agreement" in facts:
        text += (
            f" ({c.n_seeds} training seeds, mean ± sd; category decided on the seeds pooled by image, "
            f"reached by {facts['seed_agreement']} on their own"
        )
        if "seed_diff_mean" in facts:
            diff = points(facts["seed_diff_mean"], facts["seed_diff_sd"])
            text += f"; paired difference to the baseline {diff} over the seeds"
        text += ".)"
    grid_text = _grid_sentence(c.grid, gap_tol) if c.grid else ""
    return f"{text} {grid_text}" if grid_text else text


def _architecture_sentence(cat: Mapping[str, Any]) -> str:
    """What the advantage says about the architecture, the training seed as the unit ("" unless the
    candidate is more robust than the baseline for these networks)."""
    arch = cat.get("architecture")
    if not arch or cat.get("outcome") not in ADVANTAGE:
        return ""
    if arch.get("confirmed") is None:
        return (
            f"With {arch['n_seeds']} training seed{'s' if arch['n_seeds'] != 1 else ''} this is a finding about "
            f"these networks: a claim about the architecture needs {arch.get('min_seeds', 2)} seeds, each clearing "
            "the minimum effect on its own (train more seeds)."
        )
    diffs = ", ".join(points(d) for d in arch["diffs"])
    lows = ", ".join(points(d) for d in arch.get("seed_ci_low", []))
    margin = number(cat["minimum_effect"], scale=100.0, digits=0, unit=" points")
    verdict = "confirmed" if arch["confirmed"] else "not confirmed"
    return (
        f"For the architecture, the training seed is the unit: the per-seed differences ({diffs}) have 95% "
        f"intervals starting at {lows}, and {'every one clears' if arch['confirmed'] else 'not every one clears'} "
        f"{margin} (their mean {points(arch['mean'])}, {100 * arch['level']:.0f}% t interval "
        f"{interval(*arch['ci'])}): the architecture claim is {verdict}."
    )


def _paired_clause(cat: Mapping[str, Any]) -> str:
    """The paired comparison behind a category, in words ("" without one): the unit (images, and seeds
    nested in them), the difference and its interval against the minimum effect, the exact test, the
    equivalence test and the Holm family."""
    if cat.get("n_paired") is None:
        return ""
    lo, hi = cat["diff_ci"]
    d = cat["discordant"]
    seeds = int(cat.get("n_seeds") or 1)
    unit = cat.get("unit") or f"{cat['n_paired']} images"
    pairs = "examples" if seeds == 1 else "(image, seed) pairs"
    test = "exact McNemar" if seeds == 1 else "exact sign-flip test over images"
    margin = number(cat["minimum_effect"], scale=100.0, digits=0, unit=" points")
    clears = "clears" if lo > cat["minimum_effect"] else "does not clear"
    text = (
        f" (paired on {unit}: difference {points(cat['diff'])}, 95% interval "
        f"{interval(lo, hi)}, which {clears} the minimum effect of {margin}; {d['only_candidate']} {pairs} "
        f"survive only in the candidate, {d['only_baseline']} only in the baseline, {test} p = "
        f"{cat['p_value']:.2g}"
    )
    eq = cat.get("equivalence")
    if eq:
        within = "within" if eq["equivalent"] else "not shown within"
        text += (
            f"; equivalence test (two one-sided tests, margin ±{margin}): {within} the margin, "
            f"{100 * eq['level']:.0f}% interval {interval(*eq['ci'])}, p = {eq['p_value']:.2g}"
        )
    family = int(cat.get("holm_family") or 1)
    if family > 1:
        text += f"; every decision Holm-adjusted over the verdict's {family} comparisons"
    return text + ")"


_OTHER_ATTACKS = (
    (wb_column(GradMode.EXACT), "exact gradients"),
    (wb_column(GradMode.BPDA), "BPDA"),
    ("gradient_free", "Square"),
    ("transfer", "transfer"),
    ("lowfreq", "low-frequency PGD"),
)


SELF_TRANSFER = "white-box restarts (transfer crafted on the model itself)"
CUMULATIVE = "cumulative with the attacks run before it"


def _under(cand: Mapping[str, Any], sp: Mapping[str, Any], cat: Mapping[str, Any] | None = None) -> str:
    """The attacks other than blocked white-box, with their accuracies: a transfer attack crafted on the
    model itself named as the white-box restarts it is (as the checklist reads it), and a number that
    counts the breaks of the attacks run before it (skip-broken) labelled cumulative."""
    cumulative = set(str(cand.get("cumulative") or "").split(","))
    parts = []
    for key, label in _OTHER_ATTACKS:
        if not math.isnan(as_float(cand.get(key))):
            if key == "lowfreq" and cand.get("lowfreq_alone") is False:
                label = "suite + low-frequency PGD"
            if key == "transfer" and (cat or {}).get("self_transfer"):
                label = SELF_TRANSFER
            if key in cumulative:
                label = f"{label} ({CUMULATIVE})"
            parts.append(f"{label} {percent(cand[key], sp.get(key))}")
    return "; ".join(parts) if parts else "no other attack"


_OUTCOME_WORDS = {
    SMALL: "more robust than the baseline by less than the minimum effect",
    LESS: "less robust than the baseline by at least the minimum effect",
    MORE_NETWORKS: "more robust than the baseline for these networks, not confirmed across training seeds",
}


def _gap_clause(cat: Mapping[str, Any]) -> str:
    """The masking gap with its paired interval ("" without one)."""
    if "gap_ci" not in cat:
        return ""
    return f" (blocked − worst case {points(cat['gap'])}, 95% interval {interval(*cat['gap_ci'])})"


def _masking_sentence(
    cand: Mapping[str, Any], cat: Mapping[str, Any], sp: Mapping[str, Any], where: str, base_txt: str
) -> str:
    blocked = wb_column(GradMode.BLOCKED)
    text = (
        f"Under blocked gradients **{cand['model']}** keeps {percent(cand.get(blocked), sp.get(blocked))} "
        f"at {where} (clean {percent(cand['clean'], sp.get('clean'))}); under attacks that differentiate or "
        f"bypass the front-end ({_under(cand, sp, cat)}) its per-example worst case falls to "
        f"**{percent(cand['worst_case'], sp.get('worst_case'))}**{_gap_clause(cat)} — "
    )
    if cat["category"] == MASKING_BUT_ROBUST:
        return text + (
            "part of the robustness measured with blocked gradients is gradient masking, but what "
            f"survives every attack is still above the baseline by the minimum effect: {base_txt}."
        )
    text += "the robustness measured with blocked gradients comes from gradient masking"
    if not base_txt:
        return text + "."
    outcome = cat.get("comparison")
    if outcome == UNDECIDED:
        return (
            text + f"; whether what survives is above the baseline is inconclusive at this scale: {base_txt}."
        )
    than = _OUTCOME_WORDS.get(str(outcome), "no more robust than the baseline")
    return text + f", and what survives is {than}: {base_txt}."


def _masking_note(cat: Mapping[str, Any], gap_tol: float) -> str:
    """A gap whose interval straddles ``gap_tol``: masking neither shown nor excluded."""
    if cat.get("masking") is not None or "gap_ci" not in cat:
        return ""
    tol = number(gap_tol, scale=100.0, digits=0, unit=" points")
    return f" Gradient masking is neither shown nor excluded: the blocked-gradient gap{_gap_clause(cat)} straddles {tol}."


def _sentence(
    cand: Mapping[str, Any],
    base: Mapping[str, Any] | None,
    cat: Mapping[str, Any],
    spread: Mapping[str, Any] | None = None,
    gap_tol: float = 0.10,
) -> str:
    """One candidate's paragraph: the numbers of :func:`claim_numbers` in the words of its category."""
    sp = spread or {}
    name, where = cand["model"], f"{cand['threat']} ε = {cand['eps']:.4g}"
    worst, clean = percent(cand["worst_case"], sp.get("worst_case")), percent(cand["clean"], sp.get("clean"))
    base_txt = ""
    if base is not None:
        base_txt = (
            f"{base['model']} (the baseline) keeps {percent(base['worst_case'], sp.get('base_worst_case'))}"
            + _paired_clause(cat)
        )
    category = cat["category"]
    if category in UPPER_BOUND_CATEGORIES.values():
        return _upper_bound_sentence(cand, cat, sp, where, base_txt)
    if category in (MASKING, MASKING_BUT_ROBUST, MASKING_INCONCLUSIVE):
        return _masking_sentence(cand, cat, sp, where, base_txt)
    note = _masking_note(cat, gap_tol)
    head = f"**{name}** keeps **{worst}** at {where} under the worst case over all attacks"
    head += f" ({_under(cand, sp, cat)}; clean {clean})"
    if category == ROBUST:
        return (
            head
            + f", above the baseline by the minimum effect — {base_txt}: robust under all attacks, as measured.{note}"
        )
    if category == ROBUST_THESE_NETWORKS:
        return head + (
            f", above the baseline by the minimum effect on these networks' images — {base_txt}: more robust "
            f"for these networks, but not confirmed across training seeds.{note}"
        )
    if category == SMALL_DIFFERENCE:
        return head + (
            f": above the baseline, but by less than the minimum effect — {base_txt}: a small difference, "
            f"no natural robustness worth the name.{note}"
        )
    if category == INCONCLUSIVE:
        text = head + f": inconclusive at this scale — {cat['inconclusive_reason']}"
        return text + (f"; {base_txt}." if base_txt else ".") + note
    if category != NOT_ROBUST:
        return head + "." + note
    if base is not None:
        how = "even more easily than" if cat.get("outcome") == LESS else "as well as"
        return head + f": attacks break it {how} the baseline — no natural robustness; {base_txt}.{note}"
    return head + f": it is at chance level — no natural robustness.{note}"


def _runs(eps: Sequence[float], labels: Sequence[str]) -> list[tuple[list[float], str]]:
    """Consecutive budgets with the same label, grouped."""
    out: list[tuple[list[float], str]] = []
    for e, lab in zip(eps, labels):
        if out and out[-1][1] == lab:
            out[-1][0].append(e)
        else:
            out.append(([e], lab))
    return out


def _where(group: Sequence[float], first: bool, last: bool) -> str:
    """ε = 0.1, ε ≤ 0.03 (a run from the grid's start), ε ≥ 0.2 (to its end) or ε = 0.03–0.1."""
    if len(group) == 1:
        return f"ε = {group[0]:.4g}"
    if first:
        return f"ε ≤ {group[-1]:.4g}"
    if last:
        return f"ε ≥ {group[0]:.4g}"
    return f"ε = {group[0]:.4g}–{group[-1]:.4g}"


def _upper_bound_sentence(
    cand: Mapping[str, Any], cat: Mapping[str, Any], sp: Mapping[str, Any], where: str, base_txt: str
) -> str:
    """A candidate with no trusted gradient mode: its number is stated as what it is, an upper bound, never
    as robustness, and the comparison says only what an upper bound can: that there is no advantage (even
    the upper bound is within the minimum effect of a verified baseline), or nothing."""
    why = "; ".join(f"{mode}: {reason}" for mode, reason in (cat.get("unverified_modes") or {}).items())
    if cat["category"] == UNCHECKED:
        head = f"**{cand['model']}** is unchecked at {where}: no gradient-masking checklist judged its modes"
    else:
        head = f"**{cand['model']}** is unverified at {where}: no mode it was attacked under is trusted"
    text = (
        f"{head} ({why}). The {percent(cand['worst_case'], sp.get('worst_case'))} of points its attacks left "
        f"unbroken ({_under(cand, sp, cat)}; clean {percent(cand['clean'], sp.get('clean'))}) is an upper "
        "bound, not a robust accuracy."
    )
    if cat.get("inconclusive_reason"):
        return text + f" Nothing more is decided: {cat['inconclusive_reason']}."
    if cat.get("outcome") == NO_ADVANTAGE:
        return text + (
            f" Even this upper bound shows no advantage of the minimum effect over the baseline — {base_txt}: "
            "no natural robustness worth the name."
        )
    if base_txt:
        return text + f" An upper bound above the baseline establishes no advantage — {base_txt}."
    return text


#: A grid budget's outcome in the grid sentence (the others as they are).
_GRID_WORDS = {
    UNDECIDED: "undecided",
    NO_ADVANTAGE: "no advantage (even the upper bound)",
    BOUND_UNDECIDED: "undecided (an upper bound)",
}


def _grid_sentence(grid: GridNumbers, gap_tol: float) -> str:
    """Blocked vs worst case (and the baseline) at every budget of the grid, where the candidate is more
    robust than the baseline and where that ends, and where masking is shown."""
    eps_txt = ", ".join(f"{e:.4g}" for e in grid.eps)
    parts = []
    if not all(math.isnan(b) for b in grid.blocked):
        parts.append("blocked " + " / ".join(percent(b) for b in grid.blocked))
    parts.append(f"worst case of {grid.candidate} " + " / ".join(percent(w) for w in grid.worst))
    if grid.baseline is not None:
        parts.append(f"worst case of {grid.baseline} " + " / ".join(percent(w) for w in grid.base_worst))
    text = f"Across the {grid.threat} grid (ε = {eps_txt}): " + "; ".join(parts) + "."
    if grid.baseline is not None and any(grid.outcomes):
        groups = _runs(grid.eps, grid.outcomes)
        said = [
            f"{_GRID_WORDS.get(o, o)} at {_where(g, i == 0, i == len(groups) - 1)}"
            for i, (g, o) in enumerate(groups)
            if o
        ]
        text += " Against the baseline: " + ", ".join(said) + "."
        if grid.advantage_eps and len(grid.advantage_eps) < len(grid.eps):
            top = max(grid.advantage_eps)
            beyond = [e for e in grid.eps if e > top]
            if beyond:
                text += f" The advantage ends above ε = {top:.4g}."
    if grid.masking_eps:
        text += " Blocked-gradient robustness exceeds the worst case by more than "
        text += f"{number(gap_tol, scale=100.0, digits=0, unit=' points')} (95% interval) at ε = "
        text += f"{', '.join(f'{e:.4g}' for e in grid.masking_eps)}."
    return text


# --------------------------------------------------------------------------------------------------------
# energy, diagnostics, headline
# --------------------------------------------------------------------------------------------------------
def _energy_sentence(model: str, energy: EnergyContrast) -> str:
    text = (
        f"Sparsification in **{model}** removes {percent(energy.noise)} of a random perturbation's coefficient "
        f"energy but {percent(energy.adversarial)} of an adversarial (PGD) one"
    )
    if not math.isnan(energy.lowfreq):
        text += f" and {percent(energy.lowfreq)} of the low-frequency attack's"
    if energy.removes_more == FILTERS_NOISE:
        text += (
            ": the mechanism the source paper (Zhu & Soricut 2024) proposes filters noise, not adversarial "
            "perturbations."
        )
    elif energy.removes_more == FILTERS_ADVERSARIAL:
        text += ": it removes more of the adversarial perturbation than of noise."
    else:
        text += ": noise and adversarial perturbations lose a similar share."
    return text


def _diagnostics_sentence(model: str, fails: Mapping[str, Sequence[str]]) -> str:
    """Plain words for failed checks: failures under ``blocked`` are the expected signature of the source
    paper's premise (no gradient); failures elsewhere mean that evaluation may overstate robustness."""
    parts = []
    blocked = GradMode.BLOCKED.value
    if blocked in fails:
        parts.append(
            f"under blocked gradients the checklist flags {', '.join(fails[blocked])} — the signature of "
            "gradient masking, expected for the source paper's premise that attacks see no gradient"
        )
    for mode, names in fails.items():
        if mode == blocked:
            continue
        where = "in every mode" if mode == ALL_MODES else f"under {mode} gradients"
        parts.append(f"{where} {', '.join(names)} fail — numbers there may overstate robustness")
    return f"Diagnostics for **{model}**: " + "; ".join(parts) + "."


def _upper_bound_headline(categories: Mapping[str, str], details: Mapping[str, Mapping[str, Any]]) -> str:
    """The headline's words for candidates whose numbers are upper bounds ("" without any)."""
    unverified = [k for k, c in categories.items() if c == UNVERIFIED]
    unchecked = [k for k, c in categories.items() if c == UNCHECKED]
    parts = []
    if unverified:
        parts.append(
            f"unverified for {', '.join(unverified)}: no gradient mode passed the gradient checks, so the "
            "numbers are upper bounds, not robustness"
        )
    if unchecked:
        parts.append(
            f"unchecked for {', '.join(unchecked)}: no gradient-masking checklist ran, so no number is called "
            "robust"
        )
    if not parts:
        return ""
    ruled = [k for k in [*unverified, *unchecked] if details.get(k, {}).get("outcome") == NO_ADVANTAGE]
    text = "; ".join(parts) + "."
    if ruled:
        text += (
            f" Even as upper bounds they show no advantage of the minimum effect over the baseline at "
            f"{', '.join(ruled)}: the claim is not supported there."
        )
    return text


def _headline(categories: Mapping[str, str], details: Mapping[str, Mapping[str, Any]]) -> str:
    bounds = set(UPPER_BOUND_CATEGORIES.values())
    if any(c in bounds for c in categories.values()):
        rest = {k: c for k, c in categories.items() if c not in bounds}
        text = _upper_bound_headline(categories, details)
        return text + (f" Otherwise: {_headline(rest, details)}" if rest else "")
    cats = set(categories.values())
    if not cats:
        return "no candidate with a fixed front-end and a comparable budget was evaluated."
    if cats == {INCONCLUSIVE}:
        reasons = dict.fromkeys(str(details.get(k, {}).get("inconclusive_reason", "")) for k in categories)
        return "inconclusive at this scale: " + "; ".join(r for r in reasons if r) + "."
    if cats <= {MASKING, NOT_ROBUST, SMALL_DIFFERENCE}:
        if MASKING in cats:
            return (
                "the claim is not supported: the robustness seen with blocked gradients disappears under "
                "attacks that differentiate or bypass the front-end (gradient masking)."
            )
        if SMALL_DIFFERENCE in cats:
            return (
                "the claim is not supported: under honest attacks the model is at most a little more robust "
                "than the baseline, by less than the minimum effect."
            )
        return (
            "the claim is not supported: the model is no more robust than the baseline under honest attacks."
        )
    if cats == {MASKING_INCONCLUSIVE}:
        return (
            "gradient masking: the robustness seen with blocked gradients disappears under attacks that "
            "differentiate or bypass the front-end; whether what survives is above the baseline is inconclusive "
            "at this scale."
        )
    if cats == {NO_BASELINE}:
        return "no baseline was evaluated: the numbers below stand alone (compare with a patch ViT)."
    if cats == {ROBUST}:
        seeds = [d.get("architecture", {}).get("confirmed") for d in details.values()]
        scope = (
            "and across training seeds"
            if all(seeds)
            else "for these networks (one training seed cannot confirm the architecture)"
        )
        return (
            "the claim holds as measured: the model is more robust than the baseline under every attack, by "
            f"at least the minimum effect, {scope}."
        )
    if cats == {ROBUST_THESE_NETWORKS}:
        seeds = [int(d.get("architecture", {}).get("n_seeds") or 1) for d in details.values()]
        why = (
            "one training seed cannot confirm the architecture (train more seeds)"
            if max(seeds, default=1) < 2
            else "not every training seed clears the minimum effect on its own"
        )
        return (
            "the claim is not confirmed for the architecture: these networks are more robust than the "
            f"baseline by at least the minimum effect, but {why}."
        )
    return "mixed: " + "; ".join(f"{k}: {v}" for k, v in categories.items()) + "."
