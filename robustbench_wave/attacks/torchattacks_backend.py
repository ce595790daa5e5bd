"""Attacks from torchattacks (Kim 2020), registered under the ``torchattacks`` backend.

FGSM, L∞/L2 PGD, APGD (Croce & Hein 2020) and Square (Andriushchenko et al. 2020); APGD and Square exist only
here, so their families are declared here. torchattacks draws from torch's global RNG, so the non-FGSM runners
are registered with ``per_example_rng=False``: the evaluation calls them on fixed blocks of example ids inside
:func:`robustbench_wave.attacks.seeding.seeded` (``ctx.block_seed``), and their results do not depend on the
batch size either. torchattacks' PGD has no restarts: :func:`keep_first_success` adds them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from robustbench_wave.attacks.pgd import keep_first_success, step_size
from robustbench_wave.attacks.registry import (
    AttackKind,
    Param,
    RunContext,
    RunOutput,
    Threat,
    register_attack,
    register_family,
)
from robustbench_wave.attacks.suite import AttackEntry

register_family(
    "apgd",
    kind=AttackKind.WHITE_BOX,
    threats=(Threat.LINF, Threat.L2),
    grad_dependent=True,
    params={
        "steps": Param(int, 100, minimum=1),
        "restarts": Param(int, 1, minimum=1),
        "loss": Param(str, "ce", choices=("ce", "dlr")),
        "rho": Param(float, 0.75, minimum=0.0),
    },
    default_backend="torchattacks",
)
register_family(
    "square",
    kind=AttackKind.BLACK_BOX,
    threats=(Threat.LINF, Threat.L2),
    grad_dependent=False,
    params={
        "n_queries": Param(int, 1000, minimum=1),
        "p_init": Param(float, 0.8, minimum=0.0),
        "restarts": Param(int, 1, minimum=1),
        "loss": Param(str, "margin", choices=("margin", "ce")),
        # A protocol choice, off by default (0): below this eps Square gets ``small_eps_queries`` queries instead
        # of ``n_queries``, where it breaks almost nothing (the evidence is in attacks/default.toml).
        "small_eps_below": Param(float, 0.0, minimum=0.0),
        "small_eps_queries": Param(int, 100, minimum=1),
    },
    default_backend="torchattacks",
)


def square_queries(params: Mapping[str, Any], eps: float) -> int:
    """Square's query budget at ``eps``: ``n_queries``, or ``small_eps_queries`` below ``small_eps_below``."""
    return params["small_eps_queries"] if eps < params["small_eps_below"] else params["n_queries"]


@register_attack("fgsm", backend="torchattacks", per_example_rng=True)
def torchattacks_fgsm(
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    ids: torch.Tensor,
    eps: float,
    entry: AttackEntry,
    ctx: RunContext,
) -> RunOutput:
    import torchattacks

    return RunOutput(torchattacks.FGSM(model, eps=eps)(x, y).detach())


@register_attack("pgd", backend="torchattacks", per_example_rng=False)
def torchattacks_pgd(
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    ids: torch.Tensor,
    eps: float,
    entry: AttackEntry,
    ctx: RunContext,
) -> RunOutput:
    import torchattacks

    p = entry.params
    cls = torchattacks.PGD if entry.threat == Threat.LINF.value else torchattacks.PGDL2
    atk = cls(model, eps=eps, alpha=step_size(p, eps), steps=p["steps"], random_start=p["random_start"])
    return RunOutput(keep_first_success(model, x, y, p["restarts"], atk))


@register_attack("apgd", backend="torchattacks", per_example_rng=False)
def torchattacks_apgd(
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    ids: torch.Tensor,
    eps: float,
    entry: AttackEntry,
    ctx: RunContext,
) -> RunOutput:
    import torchattacks

    p = entry.params
    atk = torchattacks.APGD(
        model,
        norm=entry.threat,
        eps=eps,
        steps=p["steps"],
        n_restarts=p["restarts"],
        seed=ctx.block_seed,
        loss=p["loss"],
        rho=p["rho"],
    )
    return RunOutput(atk(x, y).detach())


@register_attack("square", backend="torchattacks", per_example_rng=False)
def torchattacks_square(
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    ids: torch.Tensor,
    eps: float,
    entry: AttackEntry,
    ctx: RunContext,
) -> RunOutput:
    import torchattacks

    p = entry.params
    atk = torchattacks.Square(
        model,
        norm=entry.threat,
        eps=eps,
        n_queries=square_queries(p, eps),
        n_restarts=p["restarts"],
        p_init=p["p_init"],
        loss=p["loss"],
        seed=ctx.block_seed,
    )
    return RunOutput(atk(x, y).detach())
