"""FAB-T (Croce & Hein 2020b) with its target classes side by side: torchattacks' FAB-T, the same points, faster.

torchattacks' ``FAB(multi_targeted=True)`` (a port of the authors' code) runs the targets one after another,
each ``steps`` iterations on the points the earlier targets left. What FAB-T sees in the autoattack suite is
the few points APGD-CE and APGD-T left, and a pass over 3 points costs almost what a pass over 30 does on a
CPU (the fixed cost of ~100 module calls dominates), so the sequential loop spends most of its time on overhead.

With one restart FAB-T draws no random numbers (torchattacks starts at random only from the second restart),
every row's trajectory depends on that row alone, and the logits of a point do not depend on the batch it is
in (``GradSafe`` pads batches below 4 rows), so running several targets of the same points in one batch and
keeping, per point, the first target in AutoAttack's order whose point is misclassified within eps returns
exactly what the sequential loop returns (``tests/attacks/test_fab_batched.py`` compares them point for point).
Each iteration is torchattacks' ``attack_single_run_targeted`` step, operation for operation, with its own
projections (``projection_linf``, ``projection_l2``); the clean forward passes it repeats per target are made
once. Targets are grouped (:func:`group_size`): one first, twice as many after a group that broke nothing, one again
after a group that broke a point, at most :data:`ROWS` rows: with many points left, or points that fall to
the first targets, it is the sequential loop again.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

#: Rows per batched pass at most: enough to amortise a pass's fixed cost on these models (a pass over 4 rows
#: costs about what 4 more rows add), few enough to waste little on points a group's first target breaks.
ROWS = 32


def group_size(last: int, broke: bool, targets_left: int, points: int) -> int:
    """Targets in the next group: one at first and after a group that broke a point (the next target may
    break more, and a group's later targets are wasted on what its earlier ones break), twice the last
    group's after one that broke nothing (the points left are those the targets are unlikely to break);
    at most :data:`ROWS` rows. A run that breaks at every target is the sequential loop again."""
    g = 1 if broke or last == 0 else 2 * last
    return max(1, min(targets_left, g, ROWS // points))


@dataclass(frozen=True)
class FabSettings:
    """One FAB-T run: the threat (``Linf`` or ``L2``), eps and torchattacks' hyper-parameters."""

    norm: str
    eps: float
    steps: int
    alpha_max: float
    eta: float
    beta: float


def _row_norm(delta: torch.Tensor, norm: str) -> torch.Tensor:
    """Per-row Linf or L2 norm, written as torchattacks writes it (same reductions, same bits)."""
    if norm == "Linf":
        return delta.abs().reshape(delta.shape[0], -1).max(dim=1)[0]
    return (delta**2).view(delta.shape[0], -1).sum(dim=-1).sqrt()


def _predicted(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model(x).max(1)[1]


def _target_gradient(
    model: nn.Module, x1: torch.Tensor, la: torch.Tensor, la_target: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """(z_t - z_y, its input gradient) per row: torchattacks' ``get_diff_logits_grads_batch_targeted``."""
    u = torch.arange(x1.shape[0])
    im = x1.clone().requires_grad_()
    with torch.enable_grad():
        logits = model(im)
        diffy = -(logits[u, la] - logits[u, la_target])
        (grad,) = torch.autograd.grad(diffy.sum(), im)
    return diffy.detach(), grad


def _projection(s: FabSettings, x1: torch.Tensor, x0: torch.Tensor, w: torch.Tensor, b: torch.Tensor):
    from torchattacks.attacks.fab import projection_l2, projection_linf

    project = projection_linf if s.norm == "Linf" else projection_l2
    return project(torch.cat((x1, x0), 0), torch.cat((w, w), 0), torch.cat((b, b), 0))


def _step(
    s: FabSettings, x1: torch.Tensor, im2: torch.Tensor, df: torch.Tensor, dg: torch.Tensor
) -> torch.Tensor:
    """One FAB step: project onto the linearised boundary from the iterate and from the origin, then mix."""
    bs, ndims = x1.shape[0], im2.dim() - 1
    b = -df + (dg * x1).view(bs, -1).sum(dim=-1)
    w = dg.reshape([bs, -1])
    d3 = _projection(s, x1.reshape([bs, -1]), im2.reshape([bs, -1]), w, b)
    d1, d2 = torch.reshape(d3[:bs], x1.shape), torch.reshape(d3[-bs:], x1.shape)
    if s.norm == "Linf":
        a0 = d3.abs().max(dim=1, keepdim=True)[0].view(-1, *[1] * ndims)
    else:
        a0 = (d3**2).sum(dim=1, keepdim=True).sqrt().view(-1, *[1] * ndims)
    a0 = torch.max(a0, 1e-8 * torch.ones(a0.shape, device=a0.device))
    a1, a2 = a0[:bs], a0[-bs:]
    zeros, cap = torch.zeros(a1.shape, device=a1.device), s.alpha_max * torch.ones(a1.shape, device=a1.device)
    alpha = torch.min(torch.max(a1 / (a1 + a2), zeros), cap)
    return ((x1 + s.eta * d1) * (1 - alpha) + (im2 + d2 * s.eta) * alpha).clamp(0.0, 1.0)


def fab_targeted_rows(
    model: nn.Module, x: torch.Tensor, y: torch.Tensor, target: torch.Tensor, s: FabSettings
) -> torch.Tensor:
    """FAB towards ``target`` from every row of ``x`` (all classified as ``y``), no random start; returns the
    smallest adversarial point each row found, or the row itself (torchattacks' targeted single run)."""
    im2, bs = x.detach().clone().float(), x.shape[0]
    shape = [-1, *[1] * (x.dim() - 1)]
    adv, x1 = im2.clone(), im2.clone()
    res2 = 1e10 * torch.ones([bs], device=x.device)
    for _ in range(s.steps):
        with torch.no_grad():
            df, dg = _target_gradient(model, x1, y, target)
            x1 = _step(s, x1, im2, df, dg)
            is_adv = _predicted(model, x1) != y
            if is_adv.sum() > 0:
                ind = is_adv.nonzero().flatten()
                t = _row_norm(x1[ind] - im2[ind], s.norm)
                better = (t < res2[ind]).float()
                adv[ind] = x1[ind] * better.reshape(shape) + adv[ind] * (t >= res2[ind]).float().reshape(
                    shape
                )
                res2[ind] = t * better + res2[ind] * (t >= res2[ind]).float()
                x1[ind] = im2[ind] + (x1[ind] - im2[ind]) * s.beta
    out = im2.clone()
    found = res2 < 1e10
    out[found] = adv[found].clone()
    return out


def _run_group(
    model: nn.Module, x: torch.Tensor, y: torch.Tensor, targets: torch.Tensor, s: FabSettings
) -> tuple[torch.Tensor, torch.Tensor]:
    """Every target column of ``targets`` (points × group) at once; (points, broken per point and target)."""
    n, g = targets.shape
    rows_x, rows_y = x.repeat(g, *[1] * (x.dim() - 1)), y.repeat(g)
    out = fab_targeted_rows(model, rows_x, rows_y, targets.t().reshape(-1), s)
    fooled = (_predicted(model, out) != rows_y) & (_row_norm(rows_x - out, s.norm) <= s.eps)
    return out.view(g, n, *x.shape[1:]), fooled.view(g, n)


def fab_t(model: nn.Module, x: torch.Tensor, y: torch.Tensor, n_targets: int, s: FabSettings) -> torch.Tensor:
    """FAB-T against the ``n_targets`` highest-scoring wrong classes, in that order, each on the points the
    earlier ones left; a point takes the result of the first target that broke it (``torchattacks.FAB``,
    ``multi_targeted=True``, one restart)."""
    adv = x.clone()
    with torch.no_grad():
        logits = model(x)
    acc = logits.max(1)[1] == y
    order = logits.sort(dim=-1)[1]
    done, g, broke = 0, 0, False
    while done < n_targets and acc.any():
        left = acc.nonzero().flatten()
        g = group_size(g, broke, n_targets - done, len(left))
        targets = order[left][:, order.shape[1] - 2 - done - torch.arange(g, device=x.device)]
        points, fooled = _run_group(model, x[left], y[left], targets, s)
        first = fooled.float().argmax(0)  # the first target in order that broke each point (0 if none did)
        hit = fooled.any(0)
        broke = bool(hit.any())
        adv[left[hit]] = points[first[hit], hit.nonzero().flatten()]
        acc[left[hit]] = False
        done += g
    return adv
