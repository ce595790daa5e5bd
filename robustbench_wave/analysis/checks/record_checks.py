"""The checks computed from per-example records (Carlini et al. 2019; Athalye et al. 2018; Croce & Hein 2020).

Each compares, per example, what different attacks of one run did: a weaker attack (single-step, random
noise, gradient-free, another gradient mode) must never break a point the stronger white-box attack held,
accuracy must never rise with the budget, and a point broken at any iterate must count as broken. The four
pairwise checks fire when, among the points the stronger attack held, the weaker one breaks significantly
more than a small tolerated rate ``tol``: a one-sided exact binomial test at ``alpha`` (default
:data:`.compare.PAIRED_ALPHA`), whatever the reverse pairs (the stronger attack's own breaks do not excuse
the weaker one's).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from itertools import pairwise
from typing import Any, ClassVar

import pandas as pd

from robustbench_wave.attacks import AttackKind, Trait, families_with
from robustbench_wave.evaluation.eot import vote_tolerance
from robustbench_wave.evaluation.metrics import robust_accuracy

from .check import CheckInputs, CheckResult, RecordCheck, register_check
from .compare import (
    PAIRED_ALPHA,
    RECORD_THREATS,
    Discordance,
    Pairing,
    attacked_eps,
    check_records,
    compare_groups,
    decide,
    iterative_families,
    mode_view,
    pairwise_result,
)

WHITE_BOX = AttackKind.WHITE_BOX.value
GRADIENT_FREE_KINDS = (AttackKind.BLACK_BOX.value, AttackKind.TRANSFER.value)


@register_check
@dataclass(frozen=True)
class IterativeBeatsSingleStep(RecordCheck):
    """PGD/APGD must break every point FGSM breaks (Carlini et al. 2019 §5.1).

    The two sides are the registry's families: ``Trait.WHOLE_BALL`` (iterative attacks free to use the whole
    ball: PGD, APGD, ...) against ``Trait.SINGLE_STEP`` (FGSM).

    A failure means the iterative attack is not following the gradient (bad step size, or a masked or noisy
    loss surface), so the reported robust accuracy is over-estimated. It fires when FGSM breaks
    significantly more than ``tol`` of the points the iterative attack held (one-sided exact binomial at
    ``alpha``). Numbers: violations / held per (threat, eps), the reverse pairs, the p-value and the worst
    share.
    """

    name: ClassVar[str] = "iterative_beats_single_step"
    tol: float = 0.02  # tolerated rate: share of the points the iterative attack held that FGSM may break
    alpha: float = PAIRED_ALPHA  # level of the one-sided exact binomial test against that rate

    def judge(self, records: pd.DataFrame, mode: str) -> CheckResult:
        rows = mode_view(check_records(records), mode)
        own = rows["grad_mode"] == mode
        return pairwise_result(
            self.name,
            rows,
            mode,
            rows["family"].isin(families_with(Trait.WHOLE_BALL)) & own,
            rows["family"].isin(families_with(Trait.SINGLE_STEP)) & own,
            self.tol,
            Pairing(
                "FGSM and an iterative attack",
                "single-step FGSM breaks points that iterative PGD misses: the iterative attack is not "
                "following the gradient (bad step size, or a masked/noisy loss surface) -- robust accuracy "
                "is over-estimated",
                "iterative attacks break every point single-step FGSM breaks",
            ),
            alpha=self.alpha,
        )


@register_check
@dataclass(frozen=True)
class EpsMonotone(RecordCheck):
    """No attack's accuracy may rise with eps: a larger ball contains the smaller one.

    A failure means the attack misses adversarial points that certainly exist (gradient masking or a broken
    attack). Each pair of neighbouring budgets is compared on the points the attack ran on at both. Under
    skip-broken a point broken at one budget is never attacked at a larger one, so such records cannot show
    a rise (not measurable); the check then reads the budget sweep (``CheckInputs.sweep_records``: the
    subset's PGD at several budgets, every point attacked at every budget).
    """

    name: ClassVar[str] = "eps_monotone"
    tol: float = 0.01  # largest allowed rise of an attack's accuracy from one budget to the next

    def fallback(self, inputs: CheckInputs) -> tuple[pd.DataFrame | None, str]:
        sweep = inputs.sweep_records
        if sweep is None:
            return None, ""
        grid = "/".join(f"{e:.4g}" for e in sorted(set(sweep.loc[sweep["eps"] > 0, "eps"])))
        return sweep, f"budget sweep n={sweep['example_id'].nunique()} eps={grid}"

    def judge(self, records: pd.DataFrame, mode: str) -> CheckResult:
        rows = mode_view(check_records(records), mode)
        rows = rows[rows["eps"] > 0]
        worst_rise, where, curves, evidence = 0.0, "", 0, 0
        for (attack, threat), grp in rows.groupby(["attack", "threat"]):
            for lo, hi, acc_lo, acc_hi, n_broken in _neighbour_budgets(grp):
                curves += 1
                evidence += n_broken
                if acc_hi - acc_lo > worst_rise:
                    worst_rise = acc_hi - acc_lo
                    where = f"{attack} {threat}: {acc_lo:.3f}->{acc_hi:.3f} from eps={lo:.4g} to {hi:.4g}"
        if curves == 0:
            return CheckResult(
                self.name, None, {}, "not measurable: no attack was run at two or more eps", mode
            )
        if evidence == 0:
            return CheckResult(
                self.name,
                None,
                {"curves": curves},
                "not measurable: no point broken at a smaller budget was attacked at a larger one "
                "(skip-broken), so these records cannot show a rise",
                mode,
            )
        numbers: dict[str, Any] = {
            "curves": curves,
            "max_rise": worst_rise,
            "broken_then_attacked": evidence,
            "tolerance": self.tol,
        }
        if where:
            numbers["where"] = where
        passed = worst_rise <= self.tol
        meaning = (
            "accuracy never rises with eps"
            if passed
            else "robust accuracy rises with a larger budget: the attack fails to find points that exist (a "
            "larger ball contains the smaller one) -- a sign of gradient masking or a broken attack"
        )
        return CheckResult(self.name, passed, numbers, meaning, mode)


def _neighbour_budgets(grp: pd.DataFrame) -> list[tuple[float, float, float, float, int]]:
    """One attack's curve, per pair of neighbouring budgets (lo, hi): its accuracy at each on the points it
    attacked at both, and how many of those it broke at lo (the points that can contradict a rise)."""
    attacked = grp[grp["attacked"].astype(bool)]
    correct = attacked.assign(correct=attacked["correct"].astype(bool))
    correct = correct.groupby(["example_id", "eps"])["correct"].all().unstack("eps")
    out = []
    for lo, hi in pairwise(sorted(correct.columns)):
        both = correct[[lo, hi]].dropna().astype(bool)
        if both.empty:
            continue
        out.append((lo, hi, float(both[lo].mean()), float(both[hi].mean()), int((~both[lo]).sum())))
    return out


def _white_box_against(
    name: str,
    records: pd.DataFrame,
    mode: str,
    others: Callable[[pd.DataFrame], pd.Series],
    tol: float,
    alpha: float,
    pairing: Pairing,
) -> CheckResult:
    """This mode's white-box attacks against the attacks ``others`` selects, on the points both judged."""
    rows = mode_view(check_records(records), mode)
    white_box = (rows["kind"] == WHITE_BOX) & (rows["grad_mode"] == mode)
    return pairwise_result(name, rows, mode, white_box, others(rows), tol, pairing, alpha=alpha)


@register_check
@dataclass(frozen=True)
class WhiteboxBeatsBlackbox(RecordCheck):
    """White-box attacks must break every point a black-box (Square) or transfer attack breaks (AutoAttack).

    A failure means the gradients the white-box attack follows are misleading: gradient masking (Athalye et
    al. 2018; Croce & Hein 2020). It fires when Square/transfer break significantly more than ``tol`` of the
    points white-box held (one-sided exact binomial at ``alpha``). A
    transfer attack crafted on the model itself is a white-box restart: ``run_diagnostics`` relabels it
    (:func:`.compare.as_white_box_restarts`) before this check reads the records.
    """

    name: ClassVar[str] = "whitebox_beats_blackbox"
    tol: float = 0.02  # tolerated rate: share of the points white-box held that Square/transfer may break
    alpha: float = PAIRED_ALPHA  # level of the one-sided exact binomial test against that rate

    def judge(self, records: pd.DataFrame, mode: str) -> CheckResult:
        return _white_box_against(
            self.name,
            records,
            mode,
            lambda rows: rows["kind"].isin(GRADIENT_FREE_KINDS),
            self.tol,
            self.alpha,
            Pairing(
                "white-box and black-box/transfer attacks",
                "gradient-free or transfer attacks break points the white-box attacks miss: the gradients "
                "the white-box attack follows are misleading (gradient masking, Athalye et al. 2018; Croce "
                "& Hein 2020)",
                "white-box attacks break every point black-box and transfer attacks break",
            ),
        )


@register_check
@dataclass(frozen=True)
class WhiteboxBeatsNoise(RecordCheck):
    """White-box attacks must break every point random noise of the same norm breaks.

    A failure means the attack is weaker than guessing: its gradients carry no information. It fires when
    noise breaks significantly more than ``tol`` of the points white-box held (one-sided exact binomial at
    ``alpha``).
    """

    name: ClassVar[str] = "whitebox_beats_noise"
    tol: float = 0.02  # tolerated rate: share of the points white-box held that noise may break
    alpha: float = PAIRED_ALPHA  # level of the one-sided exact binomial test against that rate

    def judge(self, records: pd.DataFrame, mode: str) -> CheckResult:
        return _white_box_against(
            self.name,
            records,
            mode,
            lambda rows: rows["kind"] == AttackKind.NOISE.value,
            self.tol,
            self.alpha,
            Pairing(
                "white-box attacks and random noise",
                "random noise of the same norm breaks points the white-box attack misses: the attack is "
                "weaker than guessing, so its gradients carry no information (gradient masking)",
                "white-box attacks break every point random noise breaks",
            ),
        )


@register_check
@dataclass(frozen=True)
class GradientModeGap(RecordCheck):
    """Points this mode's white-box attacks hold must not fall to other modes (BPDA), gradient-free or
    transfer attacks.

    A failure means the robustness exists only because gradients are blocked or shattered: gradient masking
    (Athalye et al. 2018). It fires when the other evidence breaks significantly more than ``tol`` of the
    points this mode held (one-sided exact binomial at ``alpha``); a transfer crafted on
    the model itself counts as an exact-gradient white-box run. Numbers: both robust accuracies and
    violations / compared per (threat, eps).
    """

    name: ClassVar[str] = "gradient_mode_gap"
    tol: float = 0.05  # tolerated rate: share held in this mode that the other evidence may break (two
    # different gradients, e.g. exact and BPDA, legitimately find different points near the boundary)
    alpha: float = PAIRED_ALPHA  # level of the one-sided exact binomial test against that rate

    def judge(self, records: pd.DataFrame, mode: str) -> CheckResult:
        check_records(records)
        rows = self._groups(records, mode)
        if isinstance(rows, str):
            return CheckResult(self.name, None, {}, rows, mode)
        own, other = rows["_group"] == "own", rows["_group"] == "other"
        numbers: dict[str, Any] = {}
        found: dict[str, Discordance] = {}
        for threat in RECORD_THREATS:
            for eps in attacked_eps(rows[own], threat):
                if rows[other & (rows["threat"] == threat)].empty:
                    continue
                res = compare_groups(rows, own, other, threat, eps)
                if res is None:
                    continue
                key = f"{threat}@{eps:.4g}"
                found[key] = res
                acc_mode, _ = robust_accuracy(rows[~other], threat, eps)
                acc_other, _ = robust_accuracy(rows[~own], threat, eps)
                numbers[key] = f"{mode} {acc_mode:.3f} vs others {acc_other:.3f}, gap {res.text(self.tol)}"
        if not found:
            return CheckResult(self.name, None, numbers, "not measurable: no example attacked in both", mode)
        passed, extra, note = decide(found, self.tol, self.alpha)
        numbers["worst_gap_share"] = extra.pop("worst_share")
        numbers.update(extra)
        if passed is None:
            return CheckResult(self.name, None, numbers, f"not measurable on these records{note}", mode)
        meaning = (
            f"robustness under {mode} gradients is confirmed by the other modes and gradient-free attacks"
            if passed
            else f"points that survive {mode}-gradient attacks fall to BPDA / other gradient modes / "
            "gradient-free / transfer attacks: this robustness exists only because gradients are blocked or "
            "shattered -- gradient masking (Athalye et al. 2018)"
        )
        return CheckResult(self.name, passed, numbers, meaning + note, mode)

    @staticmethod
    def _groups(records: pd.DataFrame, mode: str) -> pd.DataFrame | str:
        """Clean rows, this mode's white-box rows ('own') and the other evidence ('other'), or why not."""
        white = records["kind"] == WHITE_BOX
        own = records[(records["grad_mode"] == mode) & white]
        if own.empty:
            return "not measurable: no white-box rows in this mode"
        other = records[
            ((records["grad_mode"] != mode) & white) | records["kind"].isin(GRADIENT_FREE_KINDS)
        ].drop_duplicates(["grad_mode", "attack", "eps", "example_id"])
        if other.empty:
            return "not measurable: no other gradient mode, gradient-free or transfer attack to compare with"
        clean = records[records["kind"] == AttackKind.CLEAN.value].drop_duplicates(["example_id"])
        return pd.concat(
            [clean.assign(_group="clean"), own.assign(_group="own"), other.assign(_group="other")],
            ignore_index=True,
        )


@register_check
@dataclass(frozen=True)
class BestVsLastIterate(RecordCheck):
    """A point broken at any iterate must count as broken (silent successes; Croce & Hein 2020).

    A failure means points whose last iterate was misclassified count as robust: the bookkeeping loses
    successes. Reads ``correct_last`` of the iterative families' rows. On a randomised model decided by
    K-draw votes both flags are plurality votes over independent draws (the record's K-draw vote of the kept
    point, the attack's vote over its EOT draws of the last iterate, one draw without EOT), so two votes of a
    point near a tie may differ: up to ``vote_tol`` of the compared rows may then disagree (None:
    :func:`~robustbench_wave.evaluation.eot.vote_tolerance` of the two votes' draws).
    """

    name: ClassVar[str] = "best_vs_last_iterate"
    vote_tol: float | None = None  # fraction of compared rows whose two votes may disagree (None: from K)

    def run(self, inputs: CheckInputs, mode: str | None) -> CheckResult:
        result = super().run(inputs, mode)
        if not inputs.votes or inputs.eot is None or result.passed is not False:
            return result
        lost, compared = result.numbers["uncounted_last_iterate_successes"], result.numbers["compared"]
        eot = inputs.eot
        tol = self.vote_tol if self.vote_tol is not None else vote_tolerance(eot.draws, eot.eot_iter)
        result.numbers |= {"eot_draws": eot.draws, "eot_iter": eot.eot_iter, "vote_tol": tol}
        share = lost / compared
        if share <= tol:
            result.passed = True
            result.meaning = (
                f"the best iterate is kept: under the run's K-draw rule (K = {eot.draws} for the kept "
                f"point, the attack's {eot.eot_iter} EOT draws for the last iterate, both plurality votes "
                f"of independent draws) {lost} of {compared} compared points ({share:.1%}) voted differently, "
                f"within the tolerance for votes near a tie ({tol:.1%}, from K)"
            )
        else:
            result.meaning += (
                f" ({lost} of {compared} = {share:.1%}, more than the {tol:.1%} that independent "
                "votes near a tie explain)"
            )
        return result

    def judge(self, records: pd.DataFrame, mode: str) -> CheckResult:
        rows = check_records(records)
        if "correct_last" not in rows.columns:
            return CheckResult(self.name, None, {}, "not measurable: records have no correct_last", mode)
        rows = rows[
            (rows["grad_mode"] == mode)
            & rows["family"].isin(iterative_families())
            & rows["attacked"].astype(bool)
        ]
        last = rows["correct_last"]
        known = rows[last.notna()]
        if known.empty:
            return CheckResult(
                self.name,
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
        meaning = (
            f"the best iterate is kept: {silent} point(s) broken only at an intermediate iterate are counted "
            "(they would be missed by a last-iterate attack)"
            if passed
            else "points whose last iterate was misclassified count as robust: bookkeeping loses successes"
        )
        return CheckResult(self.name, passed, numbers, meaning, mode)
