"""The PGD engine: the only projected-gradient loop in the package (Madry et al. 2018).

:class:`PGD` is L∞ / L2 projected gradient ascent on cross-entropy with the *best iterate per example* (a
misclassified point beats a correct one, then the higher loss wins; torchattacks returns the last iterate),
restarts, stall detection (an iterate that no longer moves ends the restart: every later one would equal it)
and per-example randomness (:mod:`robustbench_wave.attacks.seeding`). Variants override small hooks, as in
foolbox 3's ``gradient_descent_base``: :meth:`PGD.init_delta` shapes the random start, :meth:`PGD.direction`
maps the gradient before the step and :meth:`PGD.project` maps an iterate back into the feasible set (the
low-frequency attack of :mod:`robustbench_wave.attacks.lowfreq` overrides all three). The suite's builtin PGD
and transfer attacks, the low-frequency attack, the diagnostics' steps/restarts sweeps
(:func:`pgd_with_history`) and the energy measurement all run this loop.

Two options serve the AutoAttack cross-check and randomised models; their defaults run the original loop
operation for operation. ``loss = "dlr"`` ascends the Difference of Logits Ratio of Croce & Hein 2020
(:func:`dlr_loss`, the loss of APGD-DLR / APGD-T) instead of cross-entropy, so torchattacks' APGD has a second,
independent implementation to be checked against. ``eot_iter = n > 1`` (Expectation over Transformation,
Athalye et al. 2018) steps along the mean input gradient of n forward/backward passes: for a randomised
model a single pass's gradient is one noisy sample of the direction that matters; the n draws go through the
model ``eot_rows`` rows at a time (:mod:`.draws`), and a point is wrong when their plurality vote is.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from robustbench_wave.attacks.draws import draw_logits, eot_loss_grad, vote
from robustbench_wave.attacks.model_state import GradSafe, attack_mode
from robustbench_wave.attacks.seeding import example_generators, random_delta

NORMS = ("Linf", "L2")
LOSSES = ("ce", "dlr")


class BestIterate:
    """Per-example best candidate: a misclassified point beats a correct one; then the higher loss wins."""

    def __init__(self, x: torch.Tensor) -> None:
        self.x = x.detach().clone()
        self.loss = torch.full((x.shape[0],), -math.inf, device=x.device)
        self.wrong = torch.zeros(x.shape[0], dtype=torch.bool, device=x.device)

    def update(self, idx: torch.Tensor, x: torch.Tensor, loss: torch.Tensor, wrong: torch.Tensor) -> None:
        old_wrong, old_loss = self.wrong[idx], self.loss[idx]
        better = (wrong & ~old_wrong) | ((wrong == old_wrong) & (loss > old_loss))
        sel = idx[better]
        self.x[sel] = x[better].detach()
        self.loss[sel] = loss[better].detach()
        self.wrong[sel] = wrong[better]


def loss_and_wrong(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-example cross-entropy and misclassification flags at ``x``."""
    logits = model(x)
    return F.cross_entropy(logits, y, reduction="none"), logits.argmax(1) != y


def dlr_loss(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Per-example DLR loss (Croce & Hein 2020, eq. 6): -(z_y - max_{i!=y} z_i) / (z_pi1 - z_pi3 + 1e-12).

    z_pi are the logits sorted in decreasing order. The ratio is invariant to shifting and rescaling the
    logits, so saturated logits (cross-entropy gradients that underflow) do not stall it; it is positive
    exactly when the point is misclassified. Written as AutoAttack's ``dlr_loss`` (the runner-up logit taken
    from the sorted row), which torchattacks' APGD copies. Needs at least three classes.
    """
    if logits.shape[1] < 3:
        raise ValueError(
            f"the DLR loss needs at least 3 classes, the model has {logits.shape[1]}: use loss = 'ce'"
        )
    z_sorted, ind_sorted = logits.sort(dim=1)
    u = torch.arange(logits.shape[0], device=logits.device)
    y_top = (ind_sorted[:, -1] == y).to(logits.dtype)
    runner_up = z_sorted[:, -2] * y_top + z_sorted[:, -1] * (1.0 - y_top)
    return -(logits[u, y] - runner_up) / (z_sorted[:, -1] - z_sorted[:, -3] + 1e-12)


class PGDResult(NamedTuple):
    x_adv: torch.Tensor  # (B, C, H, W) best iterate per example
    correct_last: torch.Tensor  # (B,) bool: the final iterate of every restart was still classified right
    history: torch.Tensor  # (steps,) mean loss after t+1 steps over every example and restart that ran


@dataclass(frozen=True)
class PGD:
    """Projected gradient ascent in the L∞ or L2 ball ∩ [0,1]; subclasses override the hooks."""

    eps: float
    norm: str
    steps: int
    step_size: float
    restarts: int = 1
    random_start: bool = True
    seed: int = 0
    stream: str = "pgd"  # the suite entry's name: part of every random start's seed
    all_restarts: bool = False  # restarts after the first also run on points already broken
    loss: str = "ce"  # the ascended (and best-iterate) loss: "ce" cross-entropy or "dlr" (:func:`dlr_loss`)
    eot_iter: int = 1  # forward/backward passes averaged per step (EOT); 1 = the plain gradient
    eot_rows: int = 0  # rows (draws x points) per batched EOT forward (attacks.draws); 0 = one draw each

    def __post_init__(self) -> None:
        if self.norm not in NORMS:
            raise ValueError(f"PGD norm must be 'Linf' or 'L2', got {self.norm!r}")
        if self.loss not in LOSSES:
            raise ValueError(f"PGD loss must be one of {LOSSES}, got {self.loss!r}")
        if self.eot_iter < 1:
            raise ValueError(f"PGD eot_iter must be >= 1, got {self.eot_iter!r}")

    # ------------------------------------------------------------------------------------------- hooks
    def init_delta(self, delta: torch.Tensor) -> torch.Tensor:
        """Shape a random start drawn from :func:`random_delta` (identity: uniform in the ball)."""
        return delta

    def direction(self, grad: torch.Tensor) -> torch.Tensor:
        """Map the input gradient before the step (identity: plain PGD)."""
        return grad

    def project(self, x_adv: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """Back into the eps-ball around ``x`` and the [0,1] box."""
        delta = x_adv - x
        if self.norm == "Linf":
            delta = delta.clamp(-self.eps, self.eps)
        else:
            n = delta.flatten(1).norm(dim=1).clamp_min(1e-12)
            delta = delta * (self.eps / n).clamp(max=1.0).view(-1, *[1] * (x.dim() - 1))
        return (x + delta).clamp(0.0, 1.0)

    # ------------------------------------------------------------------------------------------ losses
    def objective(
        self, model: nn.Module, x: torch.Tensor, y: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """One forward pass: per-example loss (this attack's) and misclassification flags."""
        if self.loss == "ce":
            return loss_and_wrong(model, x, y)
        logits = model(x)
        return dlr_loss(logits, y), logits.argmax(1) != y

    def loss_of(self, logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """This attack's per-example loss of given logits."""
        if self.loss == "ce":
            return F.cross_entropy(logits, y, reduction="none")
        return dlr_loss(logits, y)

    def expected_objective(
        self, model: nn.Module, x: torch.Tensor, y: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The objective over ``eot_iter`` draws: mean loss, and wrong when the draws' plurality vote is
        (:func:`~robustbench_wave.attacks.draws.vote`, the rule the evaluation decides predictions by)."""
        if self.eot_iter == 1:
            return self.objective(model, x, y)
        logits = draw_logits(model, x, self.eot_iter, self.eot_rows)
        loss = torch.stack([self.loss_of(z, y) for z in logits]).mean(0)
        return loss, vote(logits, y)[0] != y

    def loss_grad(
        self, model: nn.Module, adv: torch.Tensor, y: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(loss, wrong, input gradient) at ``adv``: the mean over ``eot_iter`` forward/backward passes.

        One pass (the default) is the original loop's code path: same operations, same bits. With more
        (:func:`~robustbench_wave.attacks.draws.eot_loss_grad`, ``eot_rows`` rows per forward), a point counts
        as wrong when the draws' plurality vote is.
        """
        adv.requires_grad_(True)
        if self.eot_iter == 1:
            return self._one_pass(model, adv, y)
        loss, grad, logits = eot_loss_grad(model, adv, y, self.eot_iter, self.eot_rows, self.loss_of)
        return loss, vote(logits, y)[0] != y, grad

    def _one_pass(
        self, model: nn.Module, adv: torch.Tensor, y: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        with torch.enable_grad():
            loss, wrong = self.objective(model, adv, y)
            (grad,) = torch.autograd.grad(loss.sum(), adv)
        return loss, wrong, grad

    # ------------------------------------------------------------------------------------------ engine
    def start(self, x: torch.Tensor, ids: torch.Tensor, restart: int) -> torch.Tensor:
        """The first iterate: ``x`` itself, or a projected random start seeded per example and restart."""
        if not (self.random_start and self.eps > 0):
            return x.clone()
        gens = example_generators(self.seed, self.stream, ids, restart)
        delta = random_delta(self.norm, tuple(x.shape[1:]), self.eps, gens, x.device)
        return self.project(x + self.init_delta(delta), x)

    def ascent(self, x_adv: torch.Tensor, grad: torch.Tensor) -> torch.Tensor:
        """One steepest-ascent step of length ``step_size`` in the threat model's norm."""
        g = self.direction(grad)
        if self.norm == "Linf":
            return x_adv + self.step_size * g.sign()
        g_norm = g.flatten(1).norm(dim=1).clamp_min(1e-12).view(-1, *[1] * (g.dim() - 1))
        return x_adv + self.step_size * g / g_norm

    def run(self, model: nn.Module, x: torch.Tensor, y: torch.Tensor, ids: torch.Tensor) -> PGDResult:
        """Attack ``x``; ``model`` must already be wrapped (:class:`GradSafe`) and in attack mode.

        Restarts after the first run only on examples not yet misclassified unless ``all_restarts``. A False
        best with a True ``correct_last`` is a success a last-iterate attack would have missed.
        """
        x, y = x.detach(), y.detach()
        best = BestIterate(x)
        correct_last = torch.ones(x.shape[0], dtype=torch.bool, device=x.device)
        hist_sum = torch.zeros(self.steps, dtype=torch.float64)
        hist_n = 0
        for r in range(self.restarts):
            if r == 0 or self.all_restarts:
                idx = torch.arange(x.shape[0], device=x.device)
            else:
                idx = (~best.wrong).nonzero().flatten()
            if idx.numel() == 0:
                break
            wrong = self._restart(model, x[idx], y[idx], ids[idx.cpu()], idx, r, best, hist_sum)
            correct_last[idx] &= ~wrong
            hist_n += idx.numel()
        history = (hist_sum / max(hist_n, 1)).to(torch.float32)
        return PGDResult(best.x, correct_last, history)

    def _restart(
        self,
        model: nn.Module,
        xa: torch.Tensor,
        ya: torch.Tensor,
        ids: torch.Tensor,
        idx: torch.Tensor,
        restart: int,
        best: BestIterate,
        hist_sum: torch.Tensor,
    ) -> torch.Tensor:
        """One restart on the points ``idx``; updates ``best`` and ``hist_sum``, returns last-iterate errors."""
        adv = self.start(xa, ids, restart)
        for t in range(self.steps):
            loss, wrong, grad = self.loss_grad(model, adv, ya)
            adv, loss = adv.detach(), loss.detach()
            best.update(idx, adv, loss, wrong)
            if t > 0:
                hist_sum[t - 1] += float(loss.sum())
            new = self.project(self.ascent(adv, grad), xa)
            if torch.equal(new, adv):  # no iterate moved (e.g. zero gradient): every later one is this one
                hist_sum[t:] += float(loss.sum())
                return wrong
            adv = new
        with torch.no_grad():  # not inference_mode: a forward may take gradient steps
            loss, wrong = self.expected_objective(model, adv, ya)
        best.update(idx, adv, loss, wrong)
        if self.steps > 0:
            hist_sum[self.steps - 1] += float(loss.sum())
        return wrong


def pgd_with_history(
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    eps: float,
    norm: str,
    steps: int,
    step_size: float,
    restarts: int = 1,
    seed: int = 0,
    *,
    ids: torch.Tensor | None = None,
    random_start: bool = True,
    stream: str = "pgd",
    eot_iter: int = 1,
    eot_rows: int = 0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Builtin PGD returning ``(x_adv_best, history)``: mean cross-entropy after each step (shape (steps,)).

    Every restart runs on every example, so the history averages over all ``len(x) * restarts`` runs. The
    gradient rule is whatever ``grad_mode(model, ...)`` the caller set. ``ids`` default to ``arange(len(x))``;
    pass the evaluation's example ids (and ``stream`` = the suite entry name) to reproduce its random starts;
    ``eot_iter`` / ``eot_rows`` the EOT of a randomised model (:class:`PGD`).
    """
    ids = torch.arange(x.shape[0]) if ids is None else ids.cpu()
    attack = PGD(
        eps, norm, steps, step_size, restarts, random_start, seed, stream,
        all_restarts=True, eot_iter=eot_iter, eot_rows=eot_rows,
    )  # fmt: skip
    with attack_mode(model):
        x_adv, _, history = attack.run(GradSafe(model), x, y, ids)
    return x_adv, history


def step_size(params: Mapping[str, Any], eps: float) -> float:
    """A suite entry's absolute step size: ``rel_step_size`` is in units of eps."""
    return params["rel_step_size"] * eps


def keep_first_success(
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    restarts: int,
    attack: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
) -> torch.Tensor:
    """Restarts for library PGDs without them: rerun on points still classified right, keep the first success."""
    out = x.clone()
    todo = torch.arange(x.shape[0], device=x.device)
    for _ in range(restarts):
        if todo.numel() == 0:
            break
        adv = attack(x[todo], y[todo]).detach()
        with torch.no_grad():  # not inference_mode: a forward may take gradient steps
            wrong = model(adv).argmax(1) != y[todo]
        out[todo] = adv
        todo = todo[~wrong]
    return out
