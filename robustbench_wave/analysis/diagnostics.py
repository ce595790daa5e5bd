"""Checks on the evaluation itself: is a reported robust accuracy trustworthy, or is it gradient masking?

Each check is a named function returning a :class:`CheckResult` (pass / fail / not measurable, the numbers
behind it, and what it means), following the published checklists:

* Carlini et al. 2019, "On Evaluating Adversarial Robustness": iterative beats single-step, accuracy
  falls monotonically with eps and to chance at large eps, more steps / restarts never help the model,
  white-box beats black-box, transfer and random noise, the attack loss has converged.
* Athalye, Carlini & Wagner 2018, "Obfuscated Gradients Give a False Sense of Security": shattered
  (zero / NaN / Inf) gradients, randomized models needing EOT, and the BPDA gap -- robustness that exists
  only while gradients are blocked or shattered is gradient masking.
* Croce & Hein 2020 (AutoAttack): per-example worst case, best-vs-last iterate, the black-box (Square)
  attack beating white-box as a masking flag.

:func:`run_diagnostics` evaluates the record-based checks on the benchmark's per-example records (contract
schema, see CONTRACT.md) and runs the checks that need extra attacks itself on a small subset.

The checks (per gradient mode unless noted; tolerances in :class:`Thresholds`):

==============================  ==========================================================================
iterative_beats_single_step     share of points FGSM breaks but PGD/APGD holds <= 2% (records)
eps_monotone                    no attack's accuracy rises by > 1 point with eps (records)
large_eps_to_chance             PGD at Linf 0.5 leaves accuracy <= 1/classes + 5 points (subset)
attack_convergence              4x steps / 4 restarts raise accuracy by <= 5 points; loss rose and its last
                                fifth gains <= 5% of the total rise (subset, ``runners.pgd_with_history``)
whitebox_beats_blackbox         share of points Square/transfer break but white-box holds <= 2% (records)
whitebox_beats_noise            share of points random noise breaks but white-box holds <= 2% (records)
gradient_health                 <= 10% all-zero input gradients (margin loss), no NaN/Inf, logits (subset)
deterministic (all modes)       two eval-mode forwards and gradients agree (rel. 1e-4); else EOT (subset)
gradient_mode_gap               share held by this mode's white-box but broken by other modes /
                                gradient-free / transfer <= 5% (records)
best_vs_last_iterate            no point whose last iterate was misclassified counts as robust (records)
==============================  ==========================================================================

"records" checks fall back to records computed on the subset (every attack on every clean-correct point)
when the benchmark's records cannot decide them (e.g. ``skip_broken`` hid the comparison).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import pandas as pd
import torch
from torch import nn

from robustbench_wave.attacks.lowfreq import (
    RECORD_COLUMNS,
    as_float_images,
    eval_mode,
    input_gradient,
    mode_context,
    model_device,
    modes_for,
    projected_gradient_attack,
)
from robustbench_wave.attacks.runners import pgd_with_history

log = logging.getLogger(__name__)

MODE_FREE_KINDS = ("clean", "noise", "black-box", "transfer")
ITERATIVE_FAMILIES = ("pgd", "apgd", "lowfreq-pgd")
SINGLE_STEP_FAMILIES = ("fgsm",)
_EPS_TOL = 1e-9


# --------------------------------------------------------------------------------------------------------
# results
# --------------------------------------------------------------------------------------------------------
@dataclass
class CheckResult:
    """One diagnostic: ``passed`` is True / False, or None when the data cannot decide (see ``meaning``)."""

    name: str
    passed: bool | None
    numbers: dict[str, Any]
    meaning: str
    grad_mode: str | None = None

    @property
    def label(self) -> str:
        return f"{self.name}[{self.grad_mode}]" if self.grad_mode else self.name

    @property
    def result(self) -> str:
        return {True: "pass", False: "FAIL", None: "n/a"}[self.passed]


@dataclass(frozen=True)
class Thresholds:
    """Tolerances of the checks (shares are fractions of the compared examples)."""

    per_example_tol: float = 0.02  # 1, 5, 6: share where the weaker attack wins
    eps_rise_tol: float = 0.01  # 2: largest allowed rise of accuracy with eps
    large_eps: float = 0.5  # 3: Linf budget that must bring accuracy to chance
    chance_slack: float = 0.05  # 3: accuracy allowed above 1/num_classes
    more_effort_tol: float = 0.05  # 4: accuracy allowed to rise with 4x steps or 4 restarts
    loss_flat_tol: float = 0.05  # 4: late loss gain / total gain that still counts as converged
    min_loss_gain: float = 1e-6  # 4: a loss that never rises means the attack got no signal
    grad_zero_tol: float = 0.10  # 7: share of examples with an all-zero input gradient
    determinism_rtol: float = 1e-4  # 8: relative logit difference between two forwards
    mode_gap_tol: float = 0.05  # 9: share held in this mode but broken by other evidence


@dataclass
class DiagnosticsReport:
    """All checks of one model, plus the loss curves and the subset records they were computed from."""

    model: str
    checks: list[CheckResult]
    histories: dict[str, list[float]] = field(default_factory=dict)
    subset_records: pd.DataFrame | None = None
    settings: dict[str, Any] = field(default_factory=dict)

    @property
    def failed(self) -> list[str]:
        return [c.label for c in self.checks if c.passed is False]

    @property
    def status(self) -> str:
        """ "reliable" or "suspicious (checks: ...)" -- the run's one-line summary per model."""
        failed = [c for c in self.checks if c.passed is False]
        if not failed:
            return "reliable"
        modes: dict[str, list[str]] = {}
        for c in failed:
            modes.setdefault(c.name, [])
            if c.grad_mode:
                modes[c.name].append(c.grad_mode)
        names = [f"{n}[{', '.join(m)}]" if m else n for n, m in modes.items()]
        return f"suspicious (checks: {'; '.join(names)})"

    @property
    def modes(self) -> list[str]:
        return sorted({c.grad_mode for c in self.checks if c.grad_mode})

    @property
    def trusted_modes(self) -> list[str]:
        """Gradient modes none of whose checks failed (mode-free checks such as determinism count for all)."""
        global_fail = any(c.passed is False and c.grad_mode is None for c in self.checks)
        if global_fail:
            return []
        bad = {c.grad_mode for c in self.checks if c.passed is False}
        return [m for m in self.modes if m not in bad]

    def table(self) -> pd.DataFrame:
        rows = [
            {
                "model": self.model,
                "check": c.name,
                "grad_mode": c.grad_mode or "all",
                "result": c.result,
                "passed": c.passed,
                "numbers": format_numbers(c.numbers),
                "meaning": c.meaning,
            }
            for c in self.checks
        ]
        return pd.DataFrame(
            rows, columns=["model", "check", "grad_mode", "result", "passed", "numbers", "meaning"]
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "status": self.status,
            "trusted_modes": self.trusted_modes,
            "checks": [asdict(c) for c in self.checks],
            "histories": self.histories,
            "settings": self.settings,
        }


def format_numbers(numbers: dict[str, Any], digits: int = 3) -> str:
    """Compact ``key=value`` text for tables (floats rounded)."""
    parts = []
    for key, value in numbers.items():
        if isinstance(value, float | np.floating):
            value = "nan" if math.isnan(value) else f"{float(value):.{digits}g}"
        parts.append(f"{key}={value}")
    return "; ".join(parts)


def combine_status(reports: Iterable[DiagnosticsReport]) -> pd.DataFrame:
    """One row per model: status and trusted modes."""
    return pd.DataFrame(
        [{"model": r.model, "status": r.status, "trusted_modes": ", ".join(r.trusted_modes)} for r in reports]
    )


# --------------------------------------------------------------------------------------------------------
# record helpers (contract schema)
# --------------------------------------------------------------------------------------------------------
def check_records(records: pd.DataFrame, *, one_model: bool = True) -> pd.DataFrame:
    """Validate the columns the diagnostics read (and, for the checks, that one model's rows are given:
    example ids are only comparable within a model)."""
    needed = {
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
    }
    missing = sorted(needed - set(records.columns))
    if missing:
        raise ValueError(
            f"records lack columns {missing}; produce them with robustbench_wave.benchmark.evaluate"
        )
    if one_model and records["model"].nunique() > 1:
        raise ValueError(
            f"records hold several models {sorted(records['model'].unique())}: pass one model's rows "
            "(records[records.model == name])"
        )
    return records


def mode_view(records: pd.DataFrame, mode: str, model: str | None = None) -> pd.DataFrame:
    """Rows seen by gradient mode ``mode``: its own rows plus mode-free rows (clean, noise, black-box,
    transfer) stored under another mode, de-duplicated -- repeated per mode by the benchmark or not."""
    rows = records if model is None else records[records["model"] == model]
    own = rows[rows["grad_mode"] == mode]
    other = rows[(rows["grad_mode"] != mode) & rows["kind"].isin(MODE_FREE_KINDS)]
    if not other.empty:
        have = set(zip(own["attack"], own["eps"].round(12)))
        keep = [(a, round(e, 12)) not in have for a, e in zip(other["attack"], other["eps"])]
        other = other[np.asarray(keep, dtype=bool)].drop_duplicates(["attack", "eps", "example_id"])
    return pd.concat([own, other], ignore_index=True)


def clean_correct(rows: pd.DataFrame) -> pd.Series:
    """example_id -> correct on the clean input (all examples count as correct if no clean rows exist)."""
    clean = rows[rows["kind"] == "clean"]
    if clean.empty:
        ids = rows["example_id"].unique()
        return pd.Series(True, index=pd.Index(sorted(ids), name="example_id"))
    return clean.groupby("example_id")["correct"].all().astype(bool)


def attack_status(rows: pd.DataFrame, threat: str, eps: float) -> pd.Series:
    """Per example: 1.0 = broken by these rows at some eps' <= eps, 0.0 = held (every row at eps attacked
    and still correct), NaN = unknown (a row was skipped because something else broke the point first)."""
    at = rows[(rows["threat"] == threat) & (rows["eps"] <= eps + _EPS_TOL)]
    if at.empty:
        return pd.Series(dtype=float)
    attacked = at["attacked"].astype(bool)
    correct = at["correct"].astype(bool)
    broken = (attacked & ~correct).groupby(at["example_id"]).any()
    exact = at["eps"] >= eps - _EPS_TOL
    held_rows = (attacked & correct) | ~exact
    held = held_rows.groupby(at["example_id"]).all() & exact.groupby(at["example_id"]).any()
    status = pd.Series(np.nan, index=broken.index)
    status[held] = 0.0
    status[broken] = 1.0
    return status


def robust_accuracy(rows: pd.DataFrame, threat: str, eps: float) -> tuple[float, int]:
    """Contract robust accuracy: mean over examples of AND(correct) over clean and every row at this threat
    with eps' <= eps.  Returns (accuracy, number of examples)."""
    clean = clean_correct(rows)
    at = rows[(rows["threat"] == threat) & (rows["eps"] <= eps + _EPS_TOL)]
    ok = clean.copy()
    if not at.empty:
        held = at["correct"].astype(bool).groupby(at["example_id"]).all()
        ok = ok & held.reindex(ok.index, fill_value=True)
    return (float(ok.mean()) if len(ok) else float("nan")), len(ok)


def threat_eps(rows: pd.DataFrame, threat: str) -> list[float]:
    return sorted(float(e) for e in rows.loc[rows["threat"] == threat, "eps"].unique() if e > 0)


def _compare(
    rows: pd.DataFrame, strong: pd.Series, weak: pd.Series, threat: str, eps: float
) -> tuple[int, int] | None:
    """Clean-correct examples where the *weak* group broke the point but the *strong* group held it.

    Returns (violations, compared) -- compared = examples whose status is known for both groups -- or None
    when the comparison is impossible: the weak group broke points, but the strong group skipped every one
    of them (``skip_broken`` with the weak attack first in the suite).
    """
    clean = clean_correct(rows)
    ids = clean.index[clean.to_numpy()]
    s = attack_status(rows[strong], threat, eps).reindex(ids)
    w = attack_status(rows[weak], threat, eps).reindex(ids)
    known = s.notna() & w.notna()
    if int(((w == 1) & s.notna()).sum()) == 0 and int((w == 1).sum()) > 0:
        return None
    if int(known.sum()) == 0:
        return None
    return int(((s == 0) & (w == 1) & known).sum()), int(known.sum())


def _pairwise_check(
    name: str,
    records: pd.DataFrame,
    mode: str,
    strong_mask: pd.Series,
    weak_mask: pd.Series,
    tol: float,
    what: str,
    meaning_fail: str,
    meaning_pass: str,
    threats: Sequence[str] = ("Linf", "L2"),
) -> CheckResult:
    numbers: dict[str, Any] = {}
    worst = 0.0
    compared_any = False
    for threat in threats:
        for eps in threat_eps(records[weak_mask], threat):
            if records[strong_mask & (records["threat"] == threat)].empty:
                continue
            res = _compare(records, strong_mask, weak_mask, threat, eps)
            if res is None:
                continue
            v, n = res
            compared_any = True
            share = v / n
            worst = max(worst, share)
            numbers[f"{threat}@{eps:.4g}"] = f"{v}/{n}"
    if not compared_any:
        return CheckResult(
            name,
            None,
            numbers,
            f"not measurable: no examples attacked by both {what} (run with skip_broken=False)",
            mode,
        )
    numbers["worst_share"] = worst
    numbers["tolerance"] = tol
    passed = worst <= tol
    return CheckResult(name, passed, numbers, meaning_pass if passed else meaning_fail, mode)


# --------------------------------------------------------------------------------------------------------
# record-based checks
# --------------------------------------------------------------------------------------------------------
def check_iterative_beats_single_step(records: pd.DataFrame, mode: str, tol: float = 0.02) -> CheckResult:
    """(1) PGD must break every point FGSM breaks (Carlini et al. 2019 §5.1); numbers: violations/compared."""
    rows = mode_view(check_records(records), mode)
    strong = rows["family"].isin(("pgd", "apgd")) & (rows["grad_mode"] == mode)  # unconstrained iterative
    weak = rows["family"].isin(SINGLE_STEP_FAMILIES) & (rows["grad_mode"] == mode)
    return _pairwise_check(
        "iterative_beats_single_step",
        rows,
        mode,
        strong,
        weak,
        tol,
        "FGSM and an iterative attack",
        "single-step FGSM breaks points that iterative PGD misses: the iterative attack is not following the "
        "gradient (bad step size, or a masked/noisy loss surface) -- robust accuracy is over-estimated",
        "iterative attacks break every point single-step FGSM breaks",
    )


def check_eps_monotone(records: pd.DataFrame, mode: str, tol: float = 0.01) -> CheckResult:
    """(2) Each attack's accuracy must not rise with eps: a larger ball contains the smaller one."""
    rows = mode_view(check_records(records), mode)
    rows = rows[(rows["grad_mode"] == mode) | rows["kind"].isin(MODE_FREE_KINDS)]
    rows = rows[rows["eps"] > 0]
    worst_rise, where = 0.0, ""
    curves = 0
    for (attack, threat), grp in rows.groupby(["attack", "threat"]):
        acc = grp.groupby("eps")["correct"].mean().sort_index()
        if len(acc) < 2:
            continue
        curves += 1
        rises = acc.diff().iloc[1:]
        if rises.max() > worst_rise:
            worst_rise = float(rises.max())
            at = rises.idxmax()
            where = f"{attack} {threat}: {acc.shift(1)[at]:.3f}->{acc[at]:.3f} at eps={at:.4g}"
    if curves == 0:
        return CheckResult(
            "eps_monotone", None, {}, "not measurable: no attack was run at two or more eps", mode
        )
    numbers: dict[str, Any] = {"curves": curves, "max_rise": worst_rise, "tolerance": tol}
    if where:
        numbers["where"] = where
    passed = worst_rise <= tol
    meaning = (
        "accuracy never rises with eps"
        if passed
        else "robust accuracy rises with a larger budget: the attack fails to find points that exist (a "
        "larger ball contains the smaller one) -- a sign of gradient masking or a broken attack"
    )
    return CheckResult("eps_monotone", passed, numbers, meaning, mode)


def check_whitebox_beats_blackbox(records: pd.DataFrame, mode: str, tol: float = 0.02) -> CheckResult:
    """(5) White-box must break every point a black-box (Square) or transfer attack breaks (AutoAttack)."""
    rows = mode_view(check_records(records), mode)
    strong = (rows["kind"] == "white-box") & (rows["grad_mode"] == mode)
    weak = rows["kind"].isin(("black-box", "transfer"))
    return _pairwise_check(
        "whitebox_beats_blackbox",
        rows,
        mode,
        strong,
        weak,
        tol,
        "white-box and black-box/transfer attacks",
        "gradient-free or transfer attacks break points the white-box attacks miss: the gradients the "
        "white-box attack follows are misleading (gradient masking, Athalye et al. 2018; Croce & Hein 2020)",
        "white-box attacks break every point black-box and transfer attacks break",
    )


def check_whitebox_beats_noise(records: pd.DataFrame, mode: str, tol: float = 0.02) -> CheckResult:
    """(6) White-box must break every point random noise of the same norm breaks."""
    rows = mode_view(check_records(records), mode)
    strong = (rows["kind"] == "white-box") & (rows["grad_mode"] == mode)
    weak = rows["kind"] == "noise"
    return _pairwise_check(
        "whitebox_beats_noise",
        rows,
        mode,
        strong,
        weak,
        tol,
        "white-box attacks and random noise",
        "random noise of the same norm breaks points the white-box attack misses: the attack is weaker "
        "than guessing, so its gradients carry no information (gradient masking)",
        "white-box attacks break every point random noise breaks",
    )


def check_gradient_mode_gap(records: pd.DataFrame, mode: str, tol: float = 0.05) -> CheckResult:
    """(9) Robustness held under this mode's white-box attacks but broken by BPDA / other modes, gradient-free
    or transfer attacks exists only because gradients are blocked or shattered (Athalye et al. 2018)."""
    check_records(records)
    own = records[(records["grad_mode"] == mode) & (records["kind"] == "white-box")]
    if own.empty:
        return CheckResult(
            "gradient_mode_gap", None, {}, "not measurable: no white-box rows in this mode", mode
        )
    other = records[
        ((records["grad_mode"] != mode) & (records["kind"] == "white-box"))
        | records["kind"].isin(("black-box", "transfer"))
    ].drop_duplicates(["grad_mode", "attack", "eps", "example_id"])
    if other.empty:
        return CheckResult(
            "gradient_mode_gap",
            None,
            {},
            "not measurable: no other gradient mode, gradient-free or transfer attack to compare with",
            mode,
        )
    clean = records[records["kind"] == "clean"].drop_duplicates(["example_id"])
    rows = pd.concat(
        [clean.assign(_group="clean"), own.assign(_group="own"), other.assign(_group="other")],
        ignore_index=True,
    )
    own_mask, other_mask = rows["_group"] == "own", rows["_group"] == "other"
    numbers: dict[str, Any] = {}
    worst, compared = 0.0, False
    for threat in ("Linf", "L2"):
        for eps in threat_eps(rows[own_mask], threat):
            if rows[other_mask & (rows["threat"] == threat)].empty:
                continue
            res = _compare(rows, own_mask, other_mask, threat, eps)
            if res is None:
                continue
            v, n = res
            compared = True
            acc_mode, _ = robust_accuracy(rows[~other_mask], threat, eps)
            acc_other, _ = robust_accuracy(rows[~own_mask], threat, eps)
            numbers[f"{threat}@{eps:.4g}"] = f"{mode} {acc_mode:.3f} vs others {acc_other:.3f}, gap {v}/{n}"
            worst = max(worst, v / n)
    if not compared:
        return CheckResult(
            "gradient_mode_gap", None, numbers, "not measurable: no example attacked in both", mode
        )
    numbers["worst_gap_share"] = worst
    numbers["tolerance"] = tol
    passed = worst <= tol
    if passed:
        meaning = (
            f"robustness under {mode} gradients is confirmed by the other modes and gradient-free attacks"
        )
    else:
        meaning = (
            f"points that survive {mode}-gradient attacks fall to BPDA / other gradient modes / "
            "gradient-free / "
            "transfer attacks: this robustness exists only because gradients are blocked or shattered -- "
            "gradient masking (Athalye et al. 2018)"
        )
    return CheckResult("gradient_mode_gap", passed, numbers, meaning, mode)


def check_best_vs_last_iterate(records: pd.DataFrame, mode: str) -> CheckResult:
    """(10) A point broken at any iterate must count as broken (silent success; Croce & Hein 2020)."""
    rows = check_records(records)
    if "correct_last" not in rows.columns:
        return CheckResult(
            "best_vs_last_iterate", None, {}, "not measurable: records have no correct_last", mode
        )
    rows = rows[
        (rows["grad_mode"] == mode) & rows["family"].isin(ITERATIVE_FAMILIES) & rows["attacked"].astype(bool)
    ]
    last = rows["correct_last"]
    known = rows[last.notna()]
    if known.empty:
        return CheckResult(
            "best_vs_last_iterate",
            None,
            {"iterative_rows": len(rows)},
            "not measurable: iterative attacks did not report the last iterate",
            mode,
        )
    correct = known["correct"].astype(bool).to_numpy()
    correct_last = known["correct_last"].astype(bool).to_numpy()
    silent = int((~correct & correct_last).sum())  # best iterate broke it, last iterate did not
    lost = int((correct & ~correct_last).sum())  # last iterate broke it, yet it counts as robust
    numbers = {
        "compared": len(known),
        "silent_successes": silent,
        "uncounted_last_iterate_successes": lost,
        "unreported_rows": int(last.isna().sum()),
    }
    passed = lost == 0
    if passed:
        meaning = (
            f"the best iterate is kept: {silent} point(s) broken only at an intermediate iterate are counted "
            "(they would be missed by a last-iterate attack)"
        )
    else:
        meaning = "points whose last iterate was misclassified count as robust: bookkeeping loses successes"
    return CheckResult("best_vs_last_iterate", passed, numbers, meaning, mode)


# --------------------------------------------------------------------------------------------------------
# checks that run attacks / forwards on a subset
# --------------------------------------------------------------------------------------------------------
def check_large_eps(
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    *,
    num_classes: int,
    mode: str = "exact",
    eps: float = 0.5,
    steps: int = 20,
    seed: int = 0,
    slack: float = 0.05,
) -> CheckResult:
    """(3) At Linf eps = 0.5 every image can become mid-grey, so accuracy must reach chance or below."""
    with eval_mode(model), mode_context(model, mode):
        x_adv, _ = pgd_with_history(model, x, y, eps, "Linf", steps, 2.5 * eps / steps, 1, seed)
        with torch.no_grad():
            acc = float((model(x_adv).argmax(1) == y).float().mean())
    chance = 1.0 / num_classes
    numbers = {"eps": eps, "accuracy": acc, "chance": chance, "slack": slack, "n": len(x)}
    passed = acc <= chance + slack
    meaning = (
        f"a Linf {eps} attack brings accuracy to chance or below"
        if passed
        else f"even at Linf {eps} (enough to erase the image) accuracy stays above chance: the attack cannot "
        "find adversarial examples that certainly exist -- gradient masking or a broken attack"
    )
    return CheckResult("large_eps_to_chance", passed, numbers, meaning, mode)


def loss_convergence(
    history: Sequence[float], flat_tol: float = 0.05, min_gain: float = 1e-6
) -> dict[str, Any]:
    """Has a PGD loss curve flattened?  Compares the mean of the last fifth of the steps with the fifth
    before it, relative to the total rise (max - first)."""
    h = np.asarray(history, dtype=float)
    if len(h) < 4 or not np.all(np.isfinite(h)):
        return {"converged": False, "finite": bool(np.all(np.isfinite(h))), "total_gain": float("nan")}
    k = max(1, len(h) // 5)
    total = float(h.max() - h[0])
    late = float(h[-k:].mean() - h[-2 * k : -k].mean())
    progressed = total > min_gain
    ratio = late / total if progressed else 0.0
    return {
        "converged": ratio <= flat_tol,
        "progressed": progressed,
        "total_gain": total,
        "late_gain_ratio": ratio,
    }


def check_attack_convergence(
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    *,
    eps: float,
    norm: str = "Linf",
    mode: str = "exact",
    steps: int = 10,
    more: int = 4,
    seed: int = 0,
    thresholds: Thresholds | None = None,
) -> tuple[CheckResult, dict[str, list[float]]]:
    """(4) ``more``x steps and ``more`` restarts must not raise robust accuracy, and the longest run's loss
    must have flattened (uses ``runners.pgd_with_history``).  Returns the check and the loss curves."""
    thresholds = thresholds or Thresholds()
    runs = {"base": (steps, 1), "more_steps": (steps * more, 1), "more_restarts": (steps, more)}
    acc: dict[str, float] = {}
    histories: dict[str, list[float]] = {}
    with eval_mode(model), mode_context(model, mode):
        for name, (n_steps, restarts) in runs.items():
            x_adv, history = pgd_with_history(
                model, x, y, eps, norm, n_steps, 2.5 * eps / n_steps, restarts, seed
            )
            with torch.no_grad():
                acc[name] = float((model(x_adv).argmax(1) == y).float().mean())
            histories[f"{mode}:{name}"] = [float(v) for v in torch.as_tensor(history).flatten()]
    conv = loss_convergence(
        histories[f"{mode}:more_steps"], thresholds.loss_flat_tol, thresholds.min_loss_gain
    )
    tol = thresholds.more_effort_tol
    numbers: dict[str, Any] = {
        "eps": eps,
        "acc_base": acc["base"],
        f"acc_{more}x_steps": acc["more_steps"],
        f"acc_{more}_restarts": acc["more_restarts"],
        "loss_gain": conv["total_gain"],
        "late_gain_ratio": conv.get("late_gain_ratio", float("nan")),
    }
    problems = []
    if acc["more_steps"] > acc["base"] + tol or acc["more_restarts"] > acc["base"] + tol:
        problems.append("more steps or restarts raise robust accuracy (the attack is unstable)")
    if not conv.get("progressed", False):
        problems.append("the attack loss never rose: the attack received no gradient signal")
    elif not conv["converged"]:
        problems.append("the loss was still rising in the last steps: use more steps")
    passed = not problems
    meaning = (
        "more steps and restarts do not help the model and the loss has converged"
        if passed
        else "; ".join(problems) + " -- the reported accuracy is not the attack's limit (Carlini et al. 2019)"
    )
    return CheckResult("attack_convergence", passed, numbers, meaning, mode), histories


def check_gradient_health(
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    *,
    mode: str = "exact",
    zero_tol: float = 0.10,
) -> CheckResult:
    """(7) Input gradients must be finite and non-zero, and outputs must be logits, not probabilities.

    The margin loss (Carlini & Wagner) is used for the zero test because it never saturates; the share of
    examples whose *cross-entropy* gradient underflows to zero (saturated softmax) is reported as well.
    """
    with eval_mode(model), mode_context(model, mode):
        g_margin, logits = input_gradient(model, x, y, loss="margin")
        g_ce, _ = input_gradient(model, x, y, loss="ce")
    flat = g_margin.flatten(1)
    nan = float(torch.isnan(flat).any(1).float().mean())
    inf = float(torch.isinf(flat).any(1).float().mean())
    zero = float((flat.abs().amax(1) == 0).float().mean())
    ce_zero = float((g_ce.flatten(1).abs().amax(1) == 0).float().mean())
    in_unit = bool(((logits >= 0) & (logits <= 1)).all())
    sums_to_one = bool(torch.allclose(logits.sum(1), torch.ones_like(logits[:, 0]), atol=1e-3))
    probabilities = in_unit and sums_to_one
    log_probs = bool(torch.allclose(torch.logsumexp(logits, 1), torch.zeros_like(logits[:, 0]), atol=1e-3))
    numbers = {
        "zero_grad_share": zero,
        "nan_grad_share": nan,
        "inf_grad_share": inf,
        "ce_saturated_share": ce_zero,
        "outputs_are_probabilities": probabilities,
        "outputs_are_log_probabilities": log_probs,
        "tolerance": zero_tol,
    }
    problems = []
    if zero > zero_tol:
        problems.append(
            f"{zero:.0%} of examples have an all-zero input gradient (shattered/blocked gradients)"
        )
    if nan > 0 or inf > 0:
        problems.append("NaN/Inf input gradients")
    if probabilities:
        problems.append(
            "the model outputs probabilities, not logits: CE on them saturates (apply attacks to logits)"
        )
    passed = not problems
    meaning = (
        "input gradients are finite and informative, outputs are logits"
        if passed
        else "; ".join(problems) + " -- gradient-based attacks are blind here (Athalye et al. 2018)"
    )
    if passed and ce_zero > zero_tol:
        meaning += (
            f"; note: {ce_zero:.0%} of CE gradients underflow (saturated softmax) -- use a margin/DLR loss"
        )
    return CheckResult("gradient_health", passed, numbers, meaning, mode)


def check_determinism(
    model: nn.Module, x: torch.Tensor, y: torch.Tensor, *, rtol: float = 1e-4
) -> CheckResult:
    """(8) Two eval-mode forwards (and input gradients) must agree; otherwise attacks need EOT."""
    was_training = model.training
    with eval_mode(model):
        with torch.no_grad():
            a = model(x)
            b = model(x)
        ga, _ = input_gradient(model, x, y, loss="margin")
        gb, _ = input_gradient(model, x, y, loss="margin")
    scale = float(a.abs().max().clamp_min(1.0))
    logit_diff = float((a - b).abs().max()) / scale
    grad_scale = float(ga.abs().max().clamp_min(1e-12))
    grad_diff = float((ga - gb).abs().max()) / grad_scale
    pred_agree = float((a.argmax(1) == b.argmax(1)).float().mean())
    numbers = {
        "max_rel_logit_diff": logit_diff,
        "max_rel_grad_diff": grad_diff,
        "pred_agreement": pred_agree,
        "handed_over_in_train_mode": was_training,
    }
    passed = logit_diff <= rtol and grad_diff <= max(rtol, 1e-3)
    meaning = (
        "deterministic in eval mode"
        if passed
        else "the model is randomized in eval mode: single-draw gradients are noisy, attacks must use EOT "
        "(expectation over transformation, Athalye et al. 2018) and accuracy must be averaged over draws"
    )
    if was_training:
        meaning += "; note: the model was handed over in train mode (diagnostics switch it to eval)"
    return CheckResult("deterministic", passed, numbers, meaning, None)


# --------------------------------------------------------------------------------------------------------
# subset records (every attack on every clean-correct point: skip_broken=False semantics)
# --------------------------------------------------------------------------------------------------------
def _frame(
    base: dict[str, Any],
    ids: np.ndarray,
    labels: torch.Tensor,
    pred: torch.Tensor,
    correct: torch.Tensor,
    **cols: Any,
) -> pd.DataFrame:
    frame = pd.DataFrame(
        {**base, "example_id": ids, "label": labels.cpu().numpy(), "pred": pred.cpu().numpy()}
    )
    frame["correct"] = correct.cpu().numpy().astype(bool)
    for key, value in cols.items():
        frame[key] = value.cpu().numpy() if isinstance(value, torch.Tensor) else value
    for col in RECORD_COLUMNS:
        if col not in frame:
            frame[col] = pd.NA if col == "correct_last" else np.nan
    frame["correct_last"] = frame["correct_last"].astype("boolean")
    return frame[list(RECORD_COLUMNS)]


def subset_records(
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    *,
    model_name: str,
    dataset: str,
    eps: float,
    modes: Sequence[str],
    steps: int = 10,
    seed: int = 0,
    square_queries: int = 300,
    example_ids: Sequence[int] | None = None,
) -> pd.DataFrame:
    """Contract-schema records of clean, sign noise, FGSM, PGD (and Square) at one Linf eps on a subset.

    Every attack runs on every clean-correct point (``skip_broken=False``), so per-example comparisons are
    always possible; noise and Square are mode-free and stored once under ``exact``.
    """
    ids = np.arange(len(x)) if example_ids is None else np.asarray(example_ids)
    base = {
        "model": model_name,
        "dataset": dataset,
        "threat": "Linf",
        "eps": float(eps),
        "backend": "builtin",
    }
    frames: list[pd.DataFrame] = []
    with eval_mode(model):
        with torch.no_grad():
            pred0 = model(x).argmax(1)
        ok = pred0 == y
        clean_base = {**base, "threat": "none", "eps": 0.0}
        for mode in modes:
            frames.append(
                _frame(
                    {**clean_base, "grad_mode": mode, "attack": "clean", "family": "clean", "kind": "clean"},
                    ids,
                    y,
                    pred0,
                    ok,
                    norm=0.0,
                    attacked=True,
                )
            )
        gen = torch.Generator().manual_seed(seed + 101)
        x_noise = (x + eps * torch.randint(0, 2, x.shape, generator=gen).float().mul(2).sub(1).to(x)).clamp(
            0, 1
        )
        with torch.no_grad():
            pn = model(x_noise).argmax(1)
        noise_base = {
            **base,
            "grad_mode": modes[0],
            "attack": "noise_sign",
            "family": "noise",
            "kind": "noise",
        }
        frames.append(_frame(noise_base, ids, y, pn, ok & (pn == y), norm=eps, attacked=ok))
        if square_queries > 0:
            frames.append(
                _square_frame(model, x, y, ok, ids, base | {"grad_mode": modes[0]}, eps, square_queries, seed)
            )
        for mode in modes:
            with mode_context(model, mode):
                grad, _ = input_gradient(model, x, y)
                x_fgsm = (x + eps * grad.sign()).clamp(0, 1)
                with torch.no_grad():
                    pf = model(x_fgsm).argmax(1)
                fgsm_base = {
                    **base,
                    "grad_mode": mode,
                    "attack": "fgsm_linf",
                    "family": "fgsm",
                    "kind": "white-box",
                }
                frames.append(_frame(fgsm_base, ids, y, pf, ok & (pf == y), norm=eps, attacked=ok))
                out = projected_gradient_attack(
                    model, x, y, eps=eps, norm="Linf", steps=steps, seed=seed, example_ids=ids.tolist()
                )
                pgd_base = {
                    **base,
                    "grad_mode": mode,
                    "attack": "pgd_linf",
                    "family": "pgd",
                    "kind": "white-box",
                }
                frames.append(
                    _frame(
                        pgd_base,
                        ids,
                        y,
                        out["pred"],
                        ok & out["correct"],
                        norm=eps,
                        attacked=ok,
                        correct_last=pd.array(
                            [
                                bool(c) if o else None
                                for c, o in zip(out["correct_last"].tolist(), ok.tolist())
                            ],
                            dtype="boolean",
                        ),
                        loss_final=out["loss_final"].double(),
                    )
                )
    return pd.concat(frames, ignore_index=True)


def _square_frame(
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    ok: torch.Tensor,
    ids: np.ndarray,
    base: dict[str, Any],
    eps: float,
    queries: int,
    seed: int,
) -> pd.DataFrame:
    """Square (Andriushchenko et al. 2020) through torchattacks' public API, on clean-correct points."""
    import torchattacks

    with torch.no_grad():
        pred = model(x).argmax(1)
    todo = torch.nonzero(ok).flatten()
    if len(todo):
        attack = torchattacks.Square(model, norm="Linf", eps=eps, n_queries=queries, seed=seed)
        with eval_mode(model):
            x_adv = attack(x[todo], y[todo]).clamp(0, 1)
        x_adv = x[todo] + (x_adv - x[todo]).clamp(-eps, eps)  # budget audit (foolbox-style clipping)
        with torch.no_grad():
            pred[todo] = model(x_adv).argmax(1)
    square_base = {
        **base,
        "attack": "square_linf",
        "family": "square",
        "kind": "black-box",
        "backend": "torchattacks",
    }
    return _frame(square_base, ids, y, pred, ok & (pred == y), norm=eps, attacked=ok)


# --------------------------------------------------------------------------------------------------------
# the driver
# --------------------------------------------------------------------------------------------------------
def _pick_subset(model: nn.Module, x: torch.Tensor, y: torch.Tensor, n: int) -> torch.Tensor:
    """Indices of the first ``n`` examples (clean-correct first, so attacks have something to do)."""
    dev = model_device(model)
    with eval_mode(model), torch.no_grad():
        ok = torch.cat(
            [model(x[i : i + 256].to(dev)).argmax(1).cpu() == y[i : i + 256] for i in range(0, len(x), 256)]
        )
    order = torch.cat([torch.nonzero(ok).flatten(), torch.nonzero(~ok).flatten()])
    return order[:n].sort().values


def default_eps(records: pd.DataFrame | None, fallback: float = 0.1) -> float:
    """The median Linf budget of the benchmark run (the diagnostics' reference eps)."""
    if records is not None and not records.empty:
        eps = threat_eps(records, "Linf")
        if eps:
            return float(np.median(eps))
    return fallback


def run_diagnostics(
    model: nn.Module,
    images: torch.Tensor,
    labels: torch.Tensor,
    records: pd.DataFrame | None,
    *,
    info: Any,
    model_name: str | None = None,
    grad_modes: Sequence[str] | None = None,
    n: int = 64,
    eps: float | None = None,
    steps: int = 10,
    more: int = 4,
    large_eps_steps: int = 20,
    square_queries: int = 300,
    seed: int = 0,
    thresholds: Thresholds | None = None,
) -> DiagnosticsReport:
    """Run the whole checklist for one model.

    ``records`` are the benchmark's per-example records (any number of models; rows of ``model_name`` are
    used, ``example_id`` indexing ``images``); record-based checks that the records cannot decide (e.g.
    because ``skip_broken=True`` hid the comparison) fall back to records computed here on a subset of
    ``n`` examples.  Attack-running checks use the same subset, per gradient mode.
    """
    thresholds = thresholds or Thresholds()
    x_all = as_float_images(images)
    y_all = labels.long()
    num_classes = int(getattr(info, "num_classes", 0) or 0)
    if num_classes < 2:
        raise ValueError("info.num_classes must be >= 2 (pass the DatasetInfo of the data)")
    dataset = str(getattr(info, "name", "dataset"))
    if records is not None and not records.empty:
        check_records(records, one_model=False)
        names = sorted(records["model"].unique())
        if model_name is None:
            if len(names) != 1:
                raise ValueError(f"records hold several models {names}: pass model_name=")
            model_name = names[0]
        records = records[records["model"] == model_name]
        if records.empty:
            raise ValueError(f"records have no rows for model {model_name!r}; they hold {names}")
    model_name = model_name or "model"
    modes = modes_for(model, grad_modes)
    eps = default_eps(records) if eps is None else eps
    idx = _pick_subset(model, x_all, y_all, n)
    x, y = x_all[idx].to(model_device(model)), y_all[idx].to(model_device(model))
    log.info("diagnostics for %s on %d examples, modes %s, eps=%.4g", model_name, len(x), modes, eps)
    sub = subset_records(
        model,
        x,
        y,
        model_name=model_name,
        dataset=dataset,
        eps=eps,
        modes=modes,
        steps=steps,
        seed=seed,
        square_queries=square_queries,
        example_ids=idx.tolist(),
    )
    checks: list[CheckResult] = [check_determinism(model, x, y, rtol=thresholds.determinism_rtol)]
    histories: dict[str, list[float]] = {}

    def from_records(fn: Any, mode: str, *args: Any) -> CheckResult:
        result = fn(records, mode, *args) if records is not None and not records.empty else None
        if result is None or result.passed is None:
            result = fn(sub, mode, *args)
            result.numbers = {"source": f"subset n={len(x)}", **result.numbers}
        else:
            result.numbers = {"source": "records", **result.numbers}
        return result

    t = thresholds
    for mode in modes:
        checks.append(from_records(check_iterative_beats_single_step, mode, t.per_example_tol))
        eps_check = (
            check_eps_monotone(records, mode, t.eps_rise_tol)
            if records is not None and not records.empty
            else CheckResult("eps_monotone", None, {}, "not measurable: no benchmark records", mode)
        )
        checks.append(eps_check)
        checks.append(
            check_large_eps(
                model,
                x,
                y,
                num_classes=num_classes,
                mode=mode,
                eps=t.large_eps,
                steps=large_eps_steps,
                seed=seed,
                slack=t.chance_slack,
            )
        )
        conv, hist = check_attack_convergence(
            model, x, y, eps=eps, mode=mode, steps=steps, more=more, seed=seed, thresholds=t
        )
        checks.append(conv)
        histories.update(hist)
        checks.append(from_records(check_whitebox_beats_blackbox, mode, t.per_example_tol))
        checks.append(from_records(check_whitebox_beats_noise, mode, t.per_example_tol))
        checks.append(check_gradient_health(model, x, y, mode=mode, zero_tol=t.grad_zero_tol))
        checks.append(from_records(check_gradient_mode_gap, mode, t.mode_gap_tol))
        checks.append(from_records(check_best_vs_last_iterate, mode))
    report = DiagnosticsReport(
        model_name,
        checks,
        histories,
        sub,
        settings={
            "n": len(x),
            "eps": eps,
            "steps": steps,
            "more": more,
            "modes": modes,
            "seed": seed,
            "thresholds": asdict(thresholds),
        },
    )
    log.info("%s: %s", model_name, report.status)
    return report


def diagnostics_table(reports: Iterable[DiagnosticsReport]) -> pd.DataFrame:
    """All models' checks in one table (model, check, grad_mode, result, passed, numbers, meaning)."""
    frames = [r.table() for r in reports]
    return pd.concat(frames, ignore_index=True) if frames else DiagnosticsReport("", []).table()
