"""A model whose breaking budgets are known in closed form: a linear classifier on points inside the image box.

The smallest perturbation that moves x across the boundary between its class y and class j is the margin
``z_y - z_j`` over the dual norm of ``w_y - w_j`` (L1 for an L∞ ball, L2 for an L2 ball); at the budgets the
tests use the box [0, 1] never binds, so every sound attack leaves the points whose budget is above eps and a
working one breaks those well below it.
"""

from __future__ import annotations

import torch

from tests.support.attack_models import linear_model

DUAL = {"Linf": 1, "L2": 2}  # the norm of w_y - w_j that turns a margin into a distance
CLEAR = 0.7  # points whose breaking budget is below CLEAR * eps must fall to a working attack


def oracle(seed: int = 0, n: int = 40) -> tuple[torch.nn.Module, torch.Tensor, torch.Tensor, torch.Tensor]:
    """A 3-class linear model, points in [0.2, 0.8]^64, their labels and W's rows."""
    g = torch.Generator().manual_seed(seed)
    w = 4.0 * torch.randn(3, 64, generator=g) / 8.0
    x = 0.5 + 0.6 * (torch.rand(n, 1, 8, 8, generator=g) - 0.5)
    model = linear_model(w)
    with torch.no_grad():
        y = model(x).argmax(1)
    return model, x, y, w


def breaking_budget(w: torch.Tensor, x: torch.Tensor, y: torch.Tensor, threat: str) -> torch.Tensor:
    """Per point, the smallest eps at which a perturbation changes the linear model's class (box ignored)."""
    z = x.flatten(1) @ w.T
    out = torch.full((len(x),), float("inf"))
    for j in range(w.shape[0]):
        diff = w[y] - w[j]  # (n, d)
        dist = (z.gather(1, y[:, None]).squeeze(1) - z[:, j]) / diff.norm(p=DUAL[threat], dim=1)
        out = torch.where(y == j, out, torch.minimum(out, dist))
    return out
