"""FAB-T written from the paper, the ``builtin`` second implementation of ``fab-t`` (Croce & Hein 2020b, ICML).

torchattacks' FAB (and :mod:`.fab`, which runs its steps side by side) is a port of the authors' code, so it
shares that code's mistakes. This one follows the paper's Algorithm 1 and its box-constrained projection with a
solver of its own (:func:`project_onto_boundary`), so under ``--cross-check`` its breaks are a second opinion,
and they count.

Per target t (AutoAttack's FAB-T: the ``n_target_classes`` classes with the highest clean logits after the top
one, in that order, each on the points the earlier targets left), from x_0 = x_orig, ``steps`` times:

* linearise g = f_t - f_y at x_i: the hyperplane {z : g(x_i) + <grad g(x_i), z - x_i> = 0};
* delta = P(x_i) - x_i and delta_orig = P(x_orig) - x_orig, P the L2 / L∞ projection onto that hyperplane
  intersected with the box [0, 1]^d;
* alpha = min(||delta|| / (||delta|| + ||delta_orig||), alpha_max): the step leans towards x_orig when the
  iterate is far from the boundary;
* x_{i+1} = clip((1 - alpha)(x_i + eta delta) + alpha (x_orig + eta delta_orig)) (eta > 1 overshoots);
* when x_{i+1} is misclassified it is kept if it is the smallest such point so far, and the iterate steps back
  to x_orig + beta (x_{i+1} - x_orig).

A point takes the smallest misclassified point of the first target, in that order, whose point lies within
eps; the evaluation audits it anyway. One restart without a random start (AutoAttack's setting): nothing is
drawn, each row's iterates depend on that row alone, so the runner batches freely (``per_example_rng``) and
runs several targets of the same points in one batch (the groups of :func:`.fab.group_size`). Random restarts
are refused (``backend = 'torchattacks'`` has them).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from robustbench_wave.attacks.budget import perturbation_norm
from robustbench_wave.attacks.fab import group_size
from robustbench_wave.attacks.registry import AttackRequest, RunOutput, register_attack
from robustbench_wave.attacks.torchattacks_backend import target_count

_TINY = 1e-30  # guards divisions by a rate or a direction that is exactly zero


@dataclass(frozen=True)
class FabTSettings:
    """One FAB-T run: the threat (``Linf`` or ``L2``), eps and the paper's hyper-parameters."""

    norm: str
    eps: float
    steps: int = 100
    alpha_max: float = 0.1
    eta: float = 1.05
    beta: float = 0.9


def _first_level(rate: torch.Tensor, cap: torch.Tensor, need: torch.Tensor) -> torch.Tensor:
    """Per row, the smallest t >= 0 with sum_i rate_i * min(t, cap_i) = need (rate, cap >= 0, need >= 0);
    the largest cap (every coordinate at its bound) when no t reaches ``need``.

    The sum is piecewise linear and non-decreasing in t with a kink at every cap_i: sorted by cap, the value at
    each kink is the saturated prefix's gain plus the kink times the free rest's rate, so one sort and two
    cumulative sums locate the segment where ``need`` is met, and the segment is solved exactly.
    """
    cap_sorted, order = cap.sort(dim=1)
    rate_sorted = rate.gather(1, order)
    saturated = torch.cumsum(rate_sorted * cap_sorted, dim=1)
    total = rate_sorted.sum(dim=1, keepdim=True)
    free = total - torch.cumsum(rate_sorted, dim=1)
    at_kink = saturated + cap_sorted * free
    passed = (at_kink < need[:, None]).sum(dim=1, keepdim=True)  # kinks below the level: 0 .. d
    gain = torch.cat((torch.zeros_like(total), saturated), dim=1).gather(1, passed)
    slope = torch.cat((total, free), dim=1).gather(1, passed)
    level = (need[:, None] - gain) / slope.clamp_min(_TINY)
    reachable = passed < cap.shape[1]
    return torch.where(reachable, level, cap_sorted[:, -1:]).clamp_min(0.0).squeeze(1)


def project_onto_boundary(x: torch.Tensor, w: torch.Tensor, c: torch.Tensor, norm: str) -> torch.Tensor:
    """Per row of ``x`` (B, d) in [0, 1]: argmin ||z - x||_p subject to <w, z> = c and 0 <= z <= 1, p = 2 or ∞.

    Moving towards the hyperplane, the optimum is z(t) = clip(x + t v) for the smallest t that reaches it, with
    v = w (L2: the Lagrange condition, coordinates clipped at their bound) or sign(w) (L∞: every coordinate
    moves by t until it hits its bound): <w, z(t)> grows piecewise linearly in t (:func:`_first_level`). When
    the hyperplane misses the box, every coordinate goes to its bound towards it (the box point nearest to it in
    <w, z>).
    """
    if norm not in ("L2", "Linf"):
        raise ValueError(f"FAB's projection supports L2 and Linf, got {norm!r}")
    gap = c - (w * x).sum(dim=1)
    w = w * torch.sign(gap)[:, None]  # now <w, z> has to grow by |gap|
    room = torch.where(w > 0, 1.0 - x, x) * (w != 0)
    move = w if norm == "L2" else torch.sign(w)
    cap = room / move.abs().clamp_min(_TINY)  # zero where the coordinate cannot help
    t = _first_level(w * move, cap, gap.abs())[:, None]
    at_bound = (t >= cap) & (w != 0)  # set exactly to the bound, not x + v * cap rounded near it
    return torch.where(at_bound, (w > 0).to(x.dtype), x + move * t)


def _boundary(
    model: nn.Module, x: torch.Tensor, y: torch.Tensor, target: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """g = f_target - f_y at ``x`` per row and its input gradient (zero where the model blocks gradients)."""
    xr = x.detach().clone().requires_grad_(True)
    rows = torch.arange(len(x), device=x.device)
    with torch.enable_grad():
        logits = model(xr)
        g = logits[rows, target] - logits[rows, y]
        grad = torch.autograd.grad(g.sum(), xr, allow_unused=True)[0] if g.requires_grad else None
    return g.detach(), torch.zeros_like(x) if grad is None else grad.detach()


def _row_norm(delta: torch.Tensor, norm: str) -> torch.Tensor:
    return delta.abs().amax(dim=1) if norm == "Linf" else delta.norm(dim=1)


def fab_step(
    x: torch.Tensor, x0: torch.Tensor, g: torch.Tensor, grad: torch.Tensor, s: FabTSettings
) -> torch.Tensor:
    """One step of the paper's Algorithm 1 from iterate ``x`` (origin ``x0``), the boundary linearised at ``x``
    (value ``g``, gradient ``grad``); the projections in float64."""
    w, xi, xo = grad.flatten(1).double(), x.flatten(1).double(), x0.flatten(1).double()
    c = (w * xi).sum(dim=1) - g.double()  # the linearised boundary is <w, z> = c
    d_i = project_onto_boundary(xi, w, c, s.norm) - xi
    d_o = project_onto_boundary(xo, w, c, s.norm) - xo
    n_i, n_o = _row_norm(d_i, s.norm), _row_norm(d_o, s.norm)
    alpha = (n_i / (n_i + n_o).clamp_min(_TINY)).clamp(max=s.alpha_max)[:, None]
    new = ((1 - alpha) * (xi + s.eta * d_i) + alpha * (xo + s.eta * d_o)).clamp(0.0, 1.0)
    return new.view_as(x).to(x.dtype)


def fab_towards(
    model: nn.Module, x0: torch.Tensor, y: torch.Tensor, target: torch.Tensor, s: FabTSettings
) -> tuple[torch.Tensor, torch.Tensor]:
    """FAB from every row of ``x0`` (classified as ``y``) towards its ``target``: per row the smallest
    misclassified iterate and its norm (the row itself and inf when none was found)."""
    best, best_norm = x0.clone(), torch.full((len(x0),), torch.inf, dtype=torch.float64, device=x0.device)
    x, shape = x0.clone(), (-1, *[1] * (x0.dim() - 1))
    for _ in range(s.steps):
        g, grad = _boundary(model, x, y, target)
        x = fab_step(x, x0, g, grad, s)
        with torch.no_grad():
            wrong = model(x).argmax(dim=1) != y
        size = perturbation_norm(x - x0, s.norm).to(best_norm.device)
        better = wrong & (size < best_norm)
        best[better], best_norm[better] = x[better], size[better]
        x = torch.where(wrong.view(shape), x0 + s.beta * (x - x0), x)
    return best, best_norm


def fab_t(
    model: nn.Module, x: torch.Tensor, y: torch.Tensor, n_targets: int, s: FabTSettings
) -> torch.Tensor:
    """FAB-T against the ``n_targets`` highest-scoring wrong classes, in that order: a point takes the smallest
    misclassified point of the first target whose point lies within eps; the others (and points classified
    wrongly to begin with) come back unchanged."""
    out = x.detach().clone()
    with torch.no_grad():
        logits = model(out)
    standing = logits.argmax(dim=1) == y
    targets = logits.argsort(dim=1, descending=True)[:, 1 : n_targets + 1]
    done, group, broke = 0, 0, False
    while done < n_targets and bool(standing.any()):
        left = standing.nonzero().flatten()
        group = group_size(group, broke, n_targets - done, len(left))
        rows = x[left].repeat(group, *[1] * (x.dim() - 1))  # target-major: target k's rows are block k
        aims = targets[left, done : done + group].t().reshape(-1)
        points, size = fab_towards(model, rows, y[left].repeat(group), aims, s)
        within = (size <= s.eps).view(group, len(left)).to(x.device)
        first = within.float().argmax(dim=0)  # the first target in order whose point is within eps
        hit = within.any(dim=0)
        broke = bool(hit.any())
        out[left[hit]] = points.view(group, len(left), *x.shape[1:])[first[hit], hit.nonzero().flatten()]
        standing[left[hit]] = False
        done += group
    return out


def fab_rejects(threat: str, params: Mapping[str, Any]) -> str | None:
    """The builtin FAB-T runs AutoAttack's one restart without a random start."""
    if params.get("restarts", 1) != 1:
        return "the builtin FAB-T runs one restart (no random start): use backend = 'torchattacks'"
    return None


@register_attack("fab-t", backend="builtin", per_example_rng=True, rejects=fab_rejects)
def builtin_fabt(request: AttackRequest) -> RunOutput:
    """FAB-T from the paper (this module's docstring), the entry's steps, alpha_max, eta and beta."""
    reason = fab_rejects(request.threat, request.params)
    if reason is not None:
        raise ValueError(f"attack {request.name!r}: {reason}")
    p = request.params
    s = FabTSettings(request.threat, request.eps, p["steps"], p["alpha_max"], p["eta"], p["beta"])
    return RunOutput(fab_t(request.model, request.images, request.labels, target_count(request), s).detach())
