"""APGD-T (Croce & Hein 2020): L2 with one step size per point, and the target classes side by side.

**L2 step.** torchattacks' ``APGDT.attack_single_run`` takes the first row's step size for the whole batch at
L2 (``step_size[0]``), where the paper's Algorithm 1 and the authors' code halve each point's own step: a
point's L2 iterates then depend on its batch mates, and APGD-T is weaker than the reference's on some points.
:func:`l2_single_run` runs torchattacks' own ``APGD.attack_single_run`` instead, whose L2 iteration is
``APGDT``'s line for line but with ``step_size`` per row (``tests/attacks/test_apgdt_l2.py`` checks the two
sources differ only there and in the loss), on APGD-T's targeted DLR loss rounded as the authors' code rounds
it (:func:`targeted_dlr`). As in the authors' ``APGDAttack_targeted`` the targets are taken from the clean
logits before the random start is drawn. So at L2 the points are the authors' bit for bit where eps is a power
of two (elsewhere torchattacks' (eps·t)/‖t‖ for the authors' eps·(t/‖t‖) rounds differently).

**Targets side by side.** torchattacks' ``APGDT.perturb`` runs the targets one after another, each from a random
start drawn from the global RNG for the points the earlier targets left. As for FAB-T
(:mod:`robustbench_wave.attacks.fab`), a pass over the few points APGD-CE leaves costs almost what a pass over
30 does, so here several targets run in one ``attack_single_run`` on the points repeated once per target, each
row with its own target class (the instance's ``row_targets``, read by its targeted DLR loss).

Why it returns the sequential loop's points: every row's iterates depend on that row alone (per-row step sizes
and checkpoints; the model's logits do not depend on the batch, ``GradSafe``), and one draw of ``torch.rand``
(L∞) or ``torch.randn`` (L2) for g×n rows is the g draws of n rows one after another -- for ``randn`` only
when a row has a multiple of 16 numbers (torch's CPU normal sampler transforms blocks of 16 and redraws a
ragged tail). The group is speculative: it assumes that no target before the last breaks a point. When target
j of a group does, the points after it would have started from other random numbers, so targets after j are
discarded, the RNG is put back to where the sequential loop stands after target j, and the next group starts
at j + 1. Random restarts and EOT keep torchattacks' sequential loop. ``tests/attacks/test_apgdt_batched.py``
compares both loops point for point.
"""

from __future__ import annotations

from typing import Any

import torch

from robustbench_wave.attacks.fab import group_size

NORMAL_BLOCK = 16  # torch's CPU randn: rows of a multiple of this many numbers concatenate draw for draw


def batchable(atk: Any, x: torch.Tensor) -> bool:
    """Whether the side-by-side loop returns the sequential loop's points for this APGDT instance and batch."""
    if atk.n_restarts != 1 or atk.eot_iter != 1:
        return False
    return atk.norm == "Linf" or (atk.norm == "L2" and x[0].numel() % NORMAL_BLOCK == 0)


def l2_single_run(atk: Any, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """``atk.attack_single_run`` at L2 with one step size per row: torchattacks' APGD iteration on the
    targeted DLR loss (towards ``atk.row_targets``, else the ``target_class``-th highest clean logit)."""
    import torchattacks

    targets = atk.row_targets
    if targets is None:
        targets = atk.get_logits(x).sort(dim=1)[1][:, -atk.target_class]
    return torchattacks.APGD.attack_single_run(_TargetedView(atk, targets), x, y)


class _TargetedView:
    """An APGDT instance as torchattacks' APGD iteration reads it: its attributes, with loss 'dlr' being the
    targeted DLR loss towards ``targets`` (the iteration's own bookkeeping attributes land here, not on it)."""

    loss = "dlr"

    def __init__(self, atk: Any, targets: torch.Tensor) -> None:
        self._atk, self._targets = atk, targets

    def __getattr__(self, name: str) -> Any:
        return getattr(self._atk, name)

    def dlr_loss(self, logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        if logits.shape[1] < 4:  # the subclass's variant for fewer classes
            return self._atk.dlr_loss_targeted(logits, y, self._targets)
        return targeted_dlr(logits, y, self._targets)


def targeted_dlr(logits: torch.Tensor, y: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """AutoAttack's targeted DLR loss rounded as the authors' code rounds it: -(z_y - z_t) / (z_pi1 - (z_pi3 +
    z_pi4) / 2). torchattacks writes the denominator z_pi1 - z_pi3 / 2 - z_pi4 / 2, which differs in the last
    bit and moves the iterates; its form stays at L∞, whose records predate this."""
    z = logits.sort(dim=1)[0]
    u = torch.arange(logits.shape[0], device=logits.device)
    return -(logits[u, y] - logits[u, targets]) / (z[:, -1] - 0.5 * (z[:, -3] + z[:, -4]) + 1e-12)


def perturb_side_by_side(atk: Any, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """torchattacks' ``APGDT.perturb`` (cheap, one restart) with its targets in groups; returns (acc, adv)."""
    adv = x.clone()
    logits = atk.get_logits(x)
    acc = logits.max(1)[1] == y
    order = logits.sort(dim=1)[1]
    torch.random.manual_seed(atk.seed)
    if torch.cuda.is_available():
        torch.cuda.random.manual_seed(atk.seed)
    atk.target_class = 2  # attack_single_run picks a column with it; row_targets replace that choice
    done, g, broke, n_targets = 0, 0, False, atk.n_target_classes
    while done < n_targets and acc.any():
        left = acc.nonzero().flatten()
        g = group_size(g, broke, n_targets - done, len(left))
        used, fooled, points = _run_group(atk, x[left], y[left], order[left], done, g)
        first, hit = fooled.float().argmax(0), fooled.any(0)
        broke = bool(hit.any())
        adv[left[hit]] = points[first[hit], hit.nonzero().flatten()]
        acc[left[hit]] = False
        done += used
    return acc, adv


def _run_group(
    atk: Any, x: torch.Tensor, y: torch.Tensor, order: torch.Tensor, done: int, g: int
) -> tuple[int, torch.Tensor, torch.Tensor]:
    """Targets done..done+g-1 on the same points; (targets kept, broken per kept target and point, points)."""
    n = len(x)
    state = torch.get_rng_state()
    targets = order[:, order.shape[1] - 2 - done - torch.arange(g, device=order.device)]  # (n, g)
    atk.row_targets = targets.t().reshape(-1)
    try:
        _, acc_rows, _, adv_rows = atk.attack_single_run(x.repeat(g, *[1] * (x.dim() - 1)), y.repeat(g))
    finally:
        atk.row_targets = None
    fooled = (acc_rows == 0).view(g, n)
    broke = fooled.any(1).nonzero().flatten()
    used = int(broke[0]) + 1 if len(broke) else g
    if used < g:  # later targets started from random numbers the sequential loop draws for fewer points
        torch.set_rng_state(state)
        draw = torch.rand if atk.norm == "Linf" else torch.randn  # attack_single_run's random start
        for _ in range(used):
            draw(x.shape)
    return used, fooled[:used], adv_rows.view(g, n, *x.shape[1:])
