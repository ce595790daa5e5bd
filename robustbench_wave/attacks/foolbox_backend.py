"""Attacks from foolbox 3 (Rauber et al. 2020), registered under the ``foolbox`` backend: FGSM and L∞/L2 PGD.

The model is wrapped as ``foolbox.PyTorchModel(model, bounds=(0, 1))`` (needs eagerpy) and we keep foolbox's
*clipped* points. Its PGD draws from torch's global RNG, so it runs on fixed id blocks like torchattacks'
(``per_example_rng=False``); it has no restarts: :func:`keep_first_success` adds them.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from robustbench_wave.attacks.pgd import keep_first_success, step_size
from robustbench_wave.attacks.registry import RunContext, RunOutput, Threat, register_attack
from robustbench_wave.attacks.suite import AttackEntry


def _run(model: nn.Module, attack: Any, x: torch.Tensor, y: torch.Tensor, eps: float) -> torch.Tensor:
    import foolbox

    fmodel = foolbox.PyTorchModel(model, bounds=(0.0, 1.0), device=x.device)
    _, clipped, _ = attack(fmodel, x, y, epsilons=eps)
    return clipped.detach()


@register_attack("fgsm", backend="foolbox", per_example_rng=True)
def foolbox_fgsm(
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    ids: torch.Tensor,
    eps: float,
    entry: AttackEntry,
    ctx: RunContext,
) -> RunOutput:
    import foolbox

    return RunOutput(_run(model, foolbox.attacks.FGSM(), x, y, eps))


@register_attack("pgd", backend="foolbox", per_example_rng=False)
def foolbox_pgd(
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    ids: torch.Tensor,
    eps: float,
    entry: AttackEntry,
    ctx: RunContext,
) -> RunOutput:
    import foolbox

    p = entry.params
    cls = foolbox.attacks.LinfPGD if entry.threat == Threat.LINF.value else foolbox.attacks.L2PGD
    atk = cls(abs_stepsize=step_size(p, eps), steps=p["steps"], random_start=p["random_start"])
    return RunOutput(keep_first_success(model, x, y, p["restarts"], lambda a, b: _run(model, atk, a, b, eps)))
