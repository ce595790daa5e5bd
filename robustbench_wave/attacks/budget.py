"""The threat-model budget every adversarial example is checked against before it counts.

:func:`audit` checks returned points: finite, inside [0,1], perturbation norm within the budget (plus a float
tolerance). A violation stops the run with :class:`BudgetViolation` naming the attack (foolbox's rule: "we
don't really know what the attack returns").
"""

from __future__ import annotations

import math

import torch

LINF_ATOL = 1e-6
L2_RTOL = 1e-5


class BudgetViolation(RuntimeError):
    """An attack returned a point outside its threat model; its results must not be counted."""


def perturbation_norm(delta: torch.Tensor, threat: str) -> torch.Tensor:
    """Per-example size of ``delta`` (B, C, H, W) in the threat model's measure (float64).

    L0 is the fraction of pixel positions where any channel changed (the salt-and-pepper budget).
    """
    d = delta.detach().to(torch.float64)
    if threat in ("Linf", "none"):
        return d.flatten(1).abs().amax(1) if d[0].numel() else torch.zeros(d.shape[0], dtype=torch.float64)
    if threat in ("L2", "corruption"):  # a corruption's size is reported as its L2 distance, never bounded
        return d.flatten(1).norm(dim=1)
    if threat == "L0":
        return (d.abs().amax(1) > 0).flatten(1).to(torch.float64).mean(1)
    raise ValueError(f"unknown threat model {threat!r}")


def budget_tolerance(eps: float, threat: str) -> float:
    return LINF_ATOL + (L2_RTOL * eps if threat == "L2" else 0.0)


def budget_limit(eps: float, threat: str) -> float:
    """The largest perturbation norm :func:`audit` accepts at ``eps`` (the clean threat: none; a corruption,
    whose eps is a severity: any, only finite values in [0,1] are checked)."""
    if threat == "corruption":
        return math.inf
    return (0.0 if threat == "none" else eps) + budget_tolerance(eps, threat)


def within_budget(x: torch.Tensor, x_adv: torch.Tensor, eps: float, threat: str) -> torch.Tensor:
    """Per point, what :func:`audit` checks (finite, inside [0,1], norm within the budget), as a bool (B,)
    instead of an error: for re-checking saved points and counting the ones that fail."""
    if x_adv.shape != x.shape:
        raise ValueError(f"points of shape {tuple(x_adv.shape)} for inputs {tuple(x.shape)}")
    if len(x_adv) == 0:
        return torch.zeros(0, dtype=torch.bool)
    flat = x_adv.detach().flatten(1)
    ok = torch.isfinite(flat).all(1) & (flat >= 0).all(1) & (flat <= 1).all(1)
    norms = perturbation_norm(torch.nan_to_num(x_adv.detach()) - x, threat)
    return ok & (norms <= budget_limit(eps, threat))


def audit(x: torch.Tensor, x_adv: torch.Tensor, eps: float, threat: str, attack: str) -> torch.Tensor:
    """Check returned points and give their perturbation norms; raise :class:`BudgetViolation` if not."""
    if x_adv.shape != x.shape:
        raise BudgetViolation(
            f"attack {attack!r} returned shape {tuple(x_adv.shape)} for inputs {tuple(x.shape)}"
        )
    if len(x_adv) == 0:
        return torch.zeros(0, dtype=torch.float64)
    if not torch.isfinite(x_adv).all():
        n = int((~torch.isfinite(x_adv)).flatten(1).any(1).sum())
        raise BudgetViolation(f"attack {attack!r} returned {n} examples with NaN/inf values (eps={eps})")
    lo, hi = float(x_adv.min()), float(x_adv.max())
    if lo < 0.0 or hi > 1.0:
        raise BudgetViolation(
            f"attack {attack!r} left the [0,1] image box (values in [{lo:.4g}, {hi:.4g}], eps={eps})"
        )
    norms = perturbation_norm(x_adv - x, threat)
    limit = budget_limit(eps, threat)
    over = norms > limit
    if bool(over.any()):
        worst = float(norms.max())
        raise BudgetViolation(
            f"attack {attack!r} exceeded its {threat} budget eps={eps:.6g}: {int(over.sum())} of {len(norms)} "
            f"examples, largest norm {worst:.6g} (tolerance {budget_tolerance(eps, threat):.1e}); fix the attack "
            "or its hyper-parameters before trusting any number"
        )
    return norms
