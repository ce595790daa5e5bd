"""The checks that run the model on the diagnostics subset (Carlini et al. 2019; Athalye et al. 2018).

They attack or differentiate the model themselves: PGD at a budget large enough to erase the image, more
steps and restarts of the suite's own PGD engine (:func:`robustbench_wave.attacks.pgd_with_history`), the
health of input gradients, and whether two forward passes agree (else attacks need EOT). On a randomised
model that the run attacked with the 'rand' protocol (``CheckInputs.eot``), their PGD averages the run's EOT
draws and their accuracies are the run's K-draw votes, under the check's own seed.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import torch
from torch import nn

from robustbench_wave.attacks import (
    Threat,
    attack_mode,
    derive_seed,
    input_gradient,
    mode_context,
    pgd_with_history,
    seeded,
)
from robustbench_wave.evaluation.eot import (
    LOGIT_RTOL,
    EotPlan,
    measure_randomness,
    vote_agreement,
    vote_tolerance,
)
from robustbench_wave.evaluation.execute import predict
from robustbench_wave.models.frontend import GradMode

from .check import Check, CheckInputs, CheckResult, Reads, register_check

LINF = Threat.LINF.value
REL_STEP = 2.5  # PGD step size relative to eps / steps (Madry et al. 2018)


def _accuracy(model: nn.Module, x: torch.Tensor, y: torch.Tensor, inputs: CheckInputs) -> float:
    """Accuracy at ``x`` by the run's decision rule: one forward, or the K-draw vote under EOT."""
    if inputs.votes and inputs.eot is not None:
        pred, _ = predict(model, x, y, max(len(x), 1), x.device, inputs.eot.draws, inputs.eot.draw_rows)
        return float((pred.to(y.device) == y).float().mean())
    with torch.no_grad():
        return float((model(x).argmax(1) == y).float().mean())


def _pgd_eot(inputs: CheckInputs) -> dict[str, int]:
    """The run's EOT for a check's own PGD on a randomised model (none on single draws)."""
    if inputs.votes and inputs.eot is not None:
        return {"eot_iter": inputs.eot.eot_iter, "eot_rows": inputs.eot.draw_rows}
    return {}


@contextmanager
def _draws_seeded(inputs: CheckInputs, name: str, device: torch.device) -> Iterator[None]:
    """A randomised model's draws under the check's own seed (the RNG put back); nothing otherwise."""
    if not inputs.votes:
        yield
        return
    with seeded(derive_seed(inputs.seed, "check", name), device):
        yield


@register_check
@dataclass(frozen=True)
class LargeEpsToChance(Check):
    """At Linf eps = 0.5 every image can become mid-grey, so accuracy must reach chance or below.

    A failure means the attack cannot find adversarial examples that certainly exist: gradient masking or a
    broken attack. PGD starts from the image itself: a uniform random start at this budget is noise strong
    enough to break a model on its own, and scoring it as an iterate would let a model with no gradient at
    all pass.
    """

    name: ClassVar[str] = "large_eps_to_chance"
    reads: ClassVar[Reads] = Reads.MODEL
    eps: float = 0.5  # Linf budget that must bring accuracy to chance
    steps: int = 20  # PGD steps at that budget
    slack: float = 0.05  # accuracy allowed above 1 / num_classes

    def run(self, inputs: CheckInputs, mode: str | None) -> CheckResult:
        model, x, y = inputs.subset()
        if inputs.num_classes < 2:
            raise ValueError("large_eps_to_chance needs CheckInputs(num_classes=...) >= 2")
        mode = mode or GradMode.EXACT.value
        with attack_mode(model), mode_context(model, mode), _draws_seeded(inputs, self.name, x.device):
            step = REL_STEP * self.eps / self.steps
            x_adv, _ = pgd_with_history(
                model, x, y, eps=self.eps, norm=LINF, steps=self.steps, step_size=step, seed=inputs.seed,
                random_start=False, **_pgd_eot(inputs),
            )  # fmt: skip
            acc = _accuracy(model, x_adv, y, inputs)
        chance = 1.0 / inputs.num_classes
        numbers = {"eps": self.eps, "accuracy": acc, "chance": chance, "slack": self.slack, "n": len(x)}
        numbers["start"] = "the image (no random start)"
        passed = acc <= chance + self.slack
        meaning = (
            f"a Linf {self.eps} attack brings accuracy to chance or below"
            if passed
            else f"even at Linf {self.eps} (enough to erase the image) accuracy stays above chance: the attack "
            "cannot find adversarial examples that certainly exist -- gradient masking or a broken attack"
        )
        return CheckResult(self.name, passed, numbers, meaning, mode)


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


@register_check
@dataclass(frozen=True)
class AttackConvergence(Check):
    """``more`` x steps and ``more`` restarts of the suite's PGD must not raise robust accuracy, and the
    longest run's loss must have risen and flattened (Carlini et al. 2019).

    A failure means the reported accuracy is not the attack's limit: the attack is unstable, got no gradient
    signal, or needs more steps. The loss curves go to ``CheckInputs.histories`` as ``"<mode>:<run>"``.
    """

    name: ClassVar[str] = "attack_convergence"
    reads: ClassVar[Reads] = Reads.MODEL
    more: int = 4  # factor of extra steps, and number of restarts
    more_effort_tol: float = 0.05  # accuracy allowed to rise with more steps or restarts
    loss_flat_tol: float = 0.05  # late loss gain / total gain that still counts as converged
    min_loss_gain: float = 1e-6  # a loss that never rises means the attack got no signal

    def run(self, inputs: CheckInputs, mode: str | None) -> CheckResult:
        model, x, y = inputs.subset()
        mode, eps, steps, more = mode or GradMode.EXACT.value, inputs.eps, inputs.steps, self.more
        runs = {"base": (steps, 1), "more_steps": (steps * more, 1), "more_restarts": (steps, more)}
        acc: dict[str, float] = {}
        with attack_mode(model), mode_context(model, mode), _draws_seeded(inputs, self.name, x.device):
            for run, (n_steps, restarts) in runs.items():
                x_adv, history = pgd_with_history(
                    model,
                    x,
                    y,
                    eps=eps,
                    norm=LINF,
                    steps=n_steps,
                    step_size=REL_STEP * eps / n_steps,
                    restarts=restarts,
                    seed=inputs.seed,
                    **_pgd_eot(inputs),
                )
                acc[run] = _accuracy(model, x_adv, y, inputs)
                inputs.histories[f"{mode}:{run}"] = [float(v) for v in torch.as_tensor(history).flatten()]
        conv = loss_convergence(
            inputs.histories[f"{mode}:more_steps"], self.loss_flat_tol, self.min_loss_gain
        )
        numbers: dict[str, Any] = {
            "eps": eps,
            "acc_base": acc["base"],
            f"acc_{more}x_steps": acc["more_steps"],
            f"acc_{more}_restarts": acc["more_restarts"],
            "loss_gain": conv["total_gain"],
            "late_gain_ratio": conv.get("late_gain_ratio", float("nan")),
        }
        problems = []
        if max(acc["more_steps"], acc["more_restarts"]) > acc["base"] + self.more_effort_tol:
            problems.append("more steps or restarts raise robust accuracy (the attack is unstable)")
        if not conv.get("progressed", False):
            problems.append("the attack loss never rose: the attack received no gradient signal")
        elif not conv["converged"]:
            problems.append("the loss was still rising in the last steps: use more steps")
        meaning = (
            "; ".join(problems) + " -- the reported accuracy is not the attack's limit (Carlini et al. 2019)"
            if problems
            else "more steps and restarts do not help the model and the loss has converged"
        )
        return CheckResult(self.name, not problems, numbers, meaning, mode)


DLR_ADVICE = (
    'use a margin/DLR loss: loss = "dlr" on the builtin PGD family or APGD-T (Croce & Hein 2020), or '
    'loss = "margin" (Carlini & Wagner)'
)


def _underflowed(grad: torch.Tensor) -> torch.Tensor:
    """Per example: every entry of the input gradient is zero or subnormal (the softmax underflowed)."""
    return grad.flatten(1).abs().amax(1) < torch.finfo(grad.dtype).tiny


@register_check
@dataclass(frozen=True)
class GradientHealth(Check):
    """Input gradients must be finite and non-zero, the cross-entropy loss must not vanish, and outputs must
    be logits, not probabilities.

    The margin loss (Carlini & Wagner) is used for the zero test because it never saturates: a zero margin
    gradient means shattered or blocked gradients (Athalye et al. 2018). The cross-entropy gradient is
    tested separately: on saturated logits the softmax underflows and the CE input gradient is exactly zero
    (or subnormal) although the margin gradient is not, so every CE-loss attack (the default of PGD, FGSM
    and APGD-CE) stands still there and reports the point robust. Above ``ce_zero_tol`` of the points the
    check fails and says to use a margin/DLR loss (``loss = "dlr"`` on the builtin PGD family and APGD-T).
    """

    name: ClassVar[str] = "gradient_health"
    reads: ClassVar[Reads] = Reads.MODEL
    zero_tol: float = 0.10  # share of examples with an all-zero (margin) input gradient
    ce_zero_tol: float = 0.10  # share of examples whose CE gradient underflows while the margin one does not

    def run(self, inputs: CheckInputs, mode: str | None) -> CheckResult:
        model, x, y = inputs.subset()
        mode = mode or GradMode.EXACT.value
        with attack_mode(model), mode_context(model, mode):
            g_margin, logits = input_gradient(model, x, y, loss="margin")
            g_ce, _ = input_gradient(model, x, y, loss="ce")
        numbers = self._measure(g_margin, g_ce, logits)
        problems = []
        if numbers["zero_grad_share"] > self.zero_tol:
            problems.append(
                f"{numbers['zero_grad_share']:.0%} of examples have an all-zero input gradient "
                "(shattered/blocked gradients)"
            )
        if numbers["ce_vanishing_share"] > self.ce_zero_tol:
            problems.append(
                f"{numbers['ce_vanishing_share']:.0%} of examples have a vanishing cross-entropy input "
                "gradient (saturated logits: the softmax underflows) although the margin gradient is not zero, "
                f"so cross-entropy attacks stand still there -- {DLR_ADVICE}"
            )
        if numbers["nan_grad_share"] > 0 or numbers["inf_grad_share"] > 0:
            problems.append("NaN/Inf input gradients")
        if numbers["outputs_are_probabilities"]:
            problems.append(
                "the model outputs probabilities, not logits: CE on them saturates (apply attacks to logits)"
            )
        meaning = (
            "; ".join(problems) + " -- gradient-based attacks are blind here (Athalye et al. 2018)"
            if problems
            else "input gradients are finite and informative, the cross-entropy loss does not vanish, "
            "outputs are logits"
        )
        return CheckResult(self.name, not problems, numbers, meaning, mode)

    def _measure(self, g_margin: torch.Tensor, g_ce: torch.Tensor, logits: torch.Tensor) -> dict[str, Any]:
        flat = g_margin.flatten(1)
        ones = torch.ones_like(logits[:, 0])
        in_unit = bool(((logits >= 0) & (logits <= 1)).all())
        margin_zero = flat.abs().amax(1) == 0
        ce_gone = _underflowed(g_ce)
        return {
            "zero_grad_share": float(margin_zero.float().mean()),
            "nan_grad_share": float(torch.isnan(flat).any(1).float().mean()),
            "inf_grad_share": float(torch.isinf(flat).any(1).float().mean()),
            "ce_saturated_share": float(ce_gone.float().mean()),
            "ce_vanishing_share": float((ce_gone & ~margin_zero).float().mean()),
            "outputs_are_probabilities": in_unit and bool(torch.allclose(logits.sum(1), ones, atol=1e-3)),
            "outputs_are_log_probabilities": bool(
                torch.allclose(torch.logsumexp(logits, 1), torch.zeros_like(ones), atol=1e-3)
            ),
            "tolerance": self.zero_tol,
            "ce_tolerance": self.ce_zero_tol,
        }


@register_check
@dataclass(frozen=True)
class Deterministic(Check):
    """Two eval-mode forwards (and input gradients) must agree; once for all gradient modes. When the run
    applied the 'rand' protocol (EOT gradients, predictions by the K-draw vote), the decision it used must be
    stable instead: two independent K-draw votes of the subset agree on all but ``vote_tol`` of its points
    (None: :func:`~robustbench_wave.evaluation.eot.vote_tolerance` of the run's K).

    A failure means the model is randomized in eval mode and the run used single draws (single-draw
    gradients are noisy, so attacks must use EOT -- expectation over transformation, Athalye et al. 2018 --
    and accuracy must be averaged over draws), or that even its K-draw votes are unsettled (more draws).
    """

    name: ClassVar[str] = "deterministic"
    reads: ClassVar[Reads] = Reads.MODEL
    per_mode: ClassVar[bool] = False
    rtol: float = LOGIT_RTOL  # relative logit difference between two forwards (gradients: at least 1e-3)
    vote_tol: float | None = (
        None  # fraction of points two independent K-draw votes may disagree on (None: from K)
    )

    def run(self, inputs: CheckInputs, mode: str | None) -> CheckResult:
        model, x, y = inputs.subset()
        was_training = model.training
        randomness = measure_randomness(model, x, y)  # the test the evaluation runs before attacking
        numbers = {**dataclasses.asdict(randomness), "handed_over_in_train_mode": was_training}
        passed = randomness.deterministic(self.rtol)
        if passed:
            meaning = "deterministic in eval mode"
        elif inputs.eot is not None and inputs.eot.rand_protocol:
            passed, meaning = self._votes_settled(inputs, inputs.eot, numbers)
        else:
            meaning = (
                "the model is randomized in eval mode: single-draw gradients are noisy, attacks must use EOT "
                "(expectation over transformation, Athalye et al. 2018) and accuracy must be averaged over "
                "draws (the attack run does both by default; --eot off keeps only the K-draw votes: see its "
                "meta.json 'eot')"
            )
        if was_training:
            meaning += "; note: the model was handed over in train mode (diagnostics switch it to eval)"
        return CheckResult(self.name, passed, numbers, meaning, None)

    def _votes_settled(self, inputs: CheckInputs, eot: EotPlan, numbers: dict[str, Any]) -> tuple[bool, str]:
        """Randomised, with the run's K-draw votes: do two independent votes agree within ``vote_tol``?"""
        model, x, y = inputs.subset()
        agreement = vote_agreement(model, x, y, eot, inputs.seed, x.device)
        tol = self.vote_tol if self.vote_tol is not None else vote_tolerance(eot.draws)
        numbers |= {"eot_draws": eot.draws, "eot_iter": eot.eot_iter, "vote_agreement": agreement}
        numbers |= {"vote_tol": tol}
        k = f"K = {eot.draws}"
        if 1.0 - agreement <= tol:
            return True, (
                f"randomized in eval mode, and the run handled it: EOT ({eot.eot_iter} draws per gradient) and "
                f"predictions by the {k}-draw vote, which is settled here (two independent votes agree on "
                f"{agreement:.1%} of the points; tolerance {tol:.1%}, from K)"
            )
        return False, (
            f"randomized in eval mode and its {k}-draw votes are unsettled: two independent votes agree on only "
            f"{agreement:.1%} of the points (at least {1 - tol:.1%} needed, from K); the run's accuracies depend on "
            "the draw -- use more draws (--eot-draws)"
        )
