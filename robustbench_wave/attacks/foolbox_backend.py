"""Attacks from foolbox 3 (Rauber et al. 2020), registered under the ``foolbox`` backend: FGSM and L∞/L2 PGD.

The model is wrapped as ``foolbox.PyTorchModel(model, bounds=(0, 1))`` (needs eagerpy) and we keep foolbox's
*clipped* points. Its PGD draws from torch's global RNG, so it runs on fixed id blocks like torchattacks'
(``per_example_rng=False``); it has no restarts: :func:`keep_first_success` adds them.

``loss = "dlr"`` swaps foolbox's loss hook (``get_loss_fn``) for :func:`robustbench_wave.attacks.pgd.dlr_loss`.
``eot_iter > 1`` wraps the model in foolbox's ``ExpectationOverTransformationWrapper``, which averages the
*logits* of ``eot_iter`` passes before the loss (the builtin engine averages gradients; both are EOT); with
the run's ``eot_rows`` > 0 the same mean comes from batched forwards (:class:`~.draws.MeanOverDraws`).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from robustbench_wave.attacks.draws import MeanOverDraws
from robustbench_wave.attacks.pgd import dlr_loss, keep_first_success, step_size
from robustbench_wave.attacks.registry import AttackRequest, RunOutput, Threat, register_attack


def _run(
    model: nn.Module,
    attack: Any,
    x: torch.Tensor,
    y: torch.Tensor,
    eps: float,
    eot_iter: int = 1,
    eot_rows: int = 0,
) -> torch.Tensor:
    import foolbox

    if eot_iter > 1 and eot_rows > 0:  # the wrapper's mean of the draws' logits, in batched forwards
        model = MeanOverDraws(model, eot_iter, eot_rows)
    fmodel = foolbox.PyTorchModel(model, bounds=(0.0, 1.0), device=x.device)
    if eot_iter > 1 and eot_rows <= 0:
        fmodel = foolbox.models.ExpectationOverTransformationWrapper(fmodel, n_steps=eot_iter)
    _, clipped, _ = attack(fmodel, x, y, epsilons=eps)
    return clipped.detach()


def _with_dlr_loss(cls: type) -> type:
    """A foolbox gradient attack that ascends the DLR loss instead of cross-entropy (its ``get_loss_fn`` hook)."""
    import eagerpy as ep

    class DLR(cls):  # type: ignore[misc, valid-type]
        def get_loss_fn(self, model: Any, labels: Any) -> Any:
            def loss_fn(inputs: Any) -> Any:
                return ep.astensor(dlr_loss(model(inputs).raw, labels.raw).sum())

            return loss_fn

    DLR.__name__ = f"{cls.__name__}DLR"
    return DLR


@register_attack("fgsm", backend="foolbox", per_example_rng=True)
def foolbox_fgsm(request: AttackRequest) -> RunOutput:
    import foolbox

    r = request
    eot = r.params.get("eot_iter", 1)
    rows = r.context.eot_rows
    return RunOutput(_run(r.model, foolbox.attacks.FGSM(), r.images, r.labels, r.eps, eot, rows))


@register_attack("pgd", backend="foolbox", per_example_rng=False)
def foolbox_pgd(request: AttackRequest) -> RunOutput:
    import foolbox

    p, eps, model = request.params, request.eps, request.model
    cls = foolbox.attacks.LinfPGD if request.threat == Threat.LINF.value else foolbox.attacks.L2PGD
    if p.get("loss", "ce") == "dlr":
        cls = _with_dlr_loss(cls)
    atk = cls(abs_stepsize=step_size(p, eps), steps=p["steps"], random_start=p["random_start"])
    eot = p.get("eot_iter", 1)

    def attack(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return _run(model, atk, x, y, eps, eot, request.context.eot_rows)

    return RunOutput(keep_first_success(model, request.images, request.labels, p["restarts"], attack))
