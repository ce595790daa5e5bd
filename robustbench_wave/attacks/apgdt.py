"""APGD-T (Croce & Hein 2020) at L∞ with its target classes side by side: torchattacks' points, fewer passes.

torchattacks' ``APGDT.perturb`` runs the targets one after another, each from a random start drawn from the
global RNG for the points the earlier targets left. As for FAB-T (:mod:`robustbench_wave.attacks.fab`), a
pass over the few points APGD-CE leaves costs almost what a pass over 30 does, so here several targets run in
one call of torchattacks' own ``attack_single_run`` on the points repeated once per target, each row with its
own target class (the instance's ``row_targets``, read by its targeted DLR loss).

Why it returns the sequential loop's points: at L∞ every row's iterates depend on that row alone (per-row step
sizes and checkpoints; the model's logits do not depend on the batch, ``GradSafe``), and one draw of
``torch.rand`` for g×n rows is the g draws of n rows one after another. The group is speculative: it assumes
that no target before the last breaks a point. When target j of a group does, the points after it would have
started from other random numbers, so targets after j are discarded, the RNG is put back to where the
sequential loop stands after target j, and the next group starts at j + 1. torchattacks' L2 step uses the first
row's step size for the whole batch (``step_size[0]``), which couples the rows: L2, random restarts and EOT keep
torchattacks' sequential loop. ``tests/attacks/test_apgdt_batched.py`` compares both loops point for point.
"""

from __future__ import annotations

from typing import Any

import torch

from robustbench_wave.attacks.fab import group_size


def batchable(atk: Any) -> bool:
    """Whether the side-by-side loop returns torchattacks' points for this APGDT instance."""
    return atk.norm == "Linf" and atk.n_restarts == 1 and atk.eot_iter == 1


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
        for _ in range(used):
            torch.rand(x.shape)
    return used, fooled[:used], adv_rows.view(g, n, *x.shape[1:])
