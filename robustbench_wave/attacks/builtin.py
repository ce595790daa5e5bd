"""Our own attacks, registered under the ``builtin`` backend: clean, noise, FGSM, PGD, transfer, low-frequency PGD.

Every builtin attack draws its randomness per example (:mod:`robustbench_wave.attacks.seeding`), so its
results depend only on each example, never on the batch (a randomised *model* draws its own noise from the
global RNG: its records depend on the batch as its outputs do). FGSM, PGD and the low-frequency PGD take
``eot_iter`` (Expectation over Transformation, Athalye et al. 2018: the step follows the mean input gradient of
``eot_iter`` passes, for randomised models; 1 = the plain gradient, the original code path); PGD and the
low-frequency PGD also take ``loss = "dlr"`` (Croce & Hein 2020), the second implementation that
torchattacks' APGD-CE / APGD-T are cross-checked against. PGD, transfer (PGD on a surrogate model, Papernot et
al. 2017) and the low-frequency PGD all run the one PGD engine (:mod:`robustbench_wave.attacks.pgd`). The noise
baselines corrupt at the attacks' own budgets: a model robust to attacks but not to noise of the same size is
masking gradients. Nothing here judges success: the evaluation audits every returned point and classifies it.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from robustbench_wave.attacks import schemas
from robustbench_wave.attacks.draws import eot_loss_grad
from robustbench_wave.attacks.lowfreq import (
    AUTO_LEVEL,
    LOWFREQ_FAMILY,
    Basis,
    LowFreqPGD,
    model_wavelet,
    resolve_level,
)
from robustbench_wave.attacks.pgd import PGD, BestIterate, loss_and_wrong, step_size
from robustbench_wave.attacks.registry import (
    CLEAN,
    NO_THREAT,
    AttackKind,
    AttackRequest,
    Param,
    RunOutput,
    Threat,
    Trait,
    register_attack,
    register_family,
)
from robustbench_wave.attacks.schemas import PGD_PARAMS
from robustbench_wave.attacks.seeding import example_generators, per_example
from robustbench_wave.attacks.suite import NOISE_THREAT

PGD_THREATS = (Threat.LINF, Threat.L2)

register_family(CLEAN, kind=AttackKind.CLEAN, threats=(NO_THREAT,), grad_dependent=False)
register_family(
    "noise",
    kind=AttackKind.NOISE,
    threats=(Threat.LINF, Threat.L2, Threat.L0),
    grad_dependent=False,
    params={
        "distribution": Param(str, None, choices=tuple(NOISE_THREAT)),
        "draws": Param(int, 1, minimum=1),
    },
)
register_family(
    "fgsm",
    kind=AttackKind.WHITE_BOX,
    threats=(Threat.LINF,),
    grad_dependent=True,
    traits=(Trait.SINGLE_STEP,),
    params={"eot_iter": schemas.EOT_ITER},
    default_backend="torchattacks",
)
register_family(
    "pgd",
    kind=AttackKind.WHITE_BOX,
    threats=PGD_THREATS,
    grad_dependent=True,
    traits=(Trait.ITERATIVE, Trait.WHOLE_BALL, Trait.LAST_ITERATE),
    params={**PGD_PARAMS, "loss": schemas.LOSS, "eot_iter": schemas.EOT_ITER},
)
register_family(
    "transfer", kind=AttackKind.TRANSFER, threats=PGD_THREATS, grad_dependent=False, params=PGD_PARAMS
)
register_family(
    LOWFREQ_FAMILY,
    kind=AttackKind.WHITE_BOX,
    threats=PGD_THREATS,
    grad_dependent=True,
    traits=(Trait.ITERATIVE, Trait.LAST_ITERATE, Trait.LOW_FREQUENCY),
    params={
        **PGD_PARAMS,
        "loss": schemas.LOSS,
        "eot_iter": schemas.EOT_ITER,
        "rel_step_size": schemas.rel_step_size(0.125),
        "level": Param(int, AUTO_LEVEL, minimum=0, keywords=(AUTO_LEVEL,)),
        "basis": Param(str, Basis.HAAR.value, choices=tuple(b.value for b in Basis)),
    },
)


def _pgd_settings(request: AttackRequest) -> dict[str, Any]:
    """The engine's settings from a PGD-family request; the entry's name seeds its random starts.

    (``transfer`` has neither ``loss`` nor ``eot_iter``: it runs the engine's defaults.)
    """
    p, eps = request.params, request.eps
    return {
        "loss": p.get("loss", "ce"),
        "eot_iter": p.get("eot_iter", 1),
        "eot_rows": request.context.eot_rows,
        "eps": eps,
        "norm": request.threat,
        "steps": p["steps"],
        "step_size": step_size(p, eps),
        "restarts": p["restarts"],
        "random_start": p["random_start"],
        "seed": request.context.seed,
        "stream": request.name,
    }


@register_attack("pgd", backend="builtin", per_example_rng=True)
def builtin_pgd(request: AttackRequest) -> RunOutput:
    r = request
    x_adv, correct_last, _ = PGD(**_pgd_settings(r)).run(r.model, r.images, r.labels, r.ids)
    return RunOutput(x_adv, correct_last)


@register_attack("transfer", backend="builtin", per_example_rng=True)
def builtin_transfer(request: AttackRequest) -> RunOutput:
    r = request
    if r.context.surrogate is None:
        raise ValueError(
            f"attack {r.name!r} (transfer) needs a surrogate model: pass surrogate=... / --surrogate"
        )
    x_adv, _, _ = PGD(**_pgd_settings(r)).run(r.context.surrogate, r.images, r.labels, r.ids)
    return RunOutput(x_adv)


@register_attack(LOWFREQ_FAMILY, backend="builtin", per_example_rng=True)
def builtin_lowfreq_pgd(request: AttackRequest) -> RunOutput:
    r = request
    attack = LowFreqPGD(
        **_pgd_settings(r),
        level=resolve_level(r.model, r.params["level"]),
        basis=r.params["basis"],
        wavelet=model_wavelet(r.model),
    )
    x_adv, correct_last, _ = attack.run(r.model, r.images, r.labels, r.ids)
    return RunOutput(x_adv, correct_last)


@register_attack("fgsm", backend="builtin", per_example_rng=True)
def builtin_fgsm(request: AttackRequest) -> RunOutput:
    x, y = request.images, request.labels
    xr = x.detach().clone().requires_grad_(True)
    eot = request.params.get("eot_iter", 1)
    if eot > 1:  # EOT: the sign of the mean gradient over the draws
        ce = functools.partial(F.cross_entropy, reduction="none")
        _, grad, _ = eot_loss_grad(request.model, xr, y, eot, request.context.eot_rows, ce)
    else:
        grad = _ce_grad(request.model, xr, y)
    return RunOutput((x + request.eps * grad.sign()).clamp(0.0, 1.0).detach())


def _ce_grad(model: nn.Module, xr: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Input gradient of the summed cross-entropy at ``xr`` (which requires grad): one forward/backward."""
    with torch.enable_grad():
        loss = F.cross_entropy(model(xr), y, reduction="sum")
        (grad,) = torch.autograd.grad(loss, xr)
    return grad


def _salt_pepper(x: torch.Tensor, eps: float, gens: list[torch.Generator]) -> torch.Tensor:
    """floor(eps*H*W) pixel positions (all channels together) set to 0 or 1."""
    _, h, w = x.shape[1:]
    k = math.floor(eps * h * w + 1e-9)

    def mask_and_value(g: torch.Generator) -> torch.Tensor:
        pos = torch.randperm(h * w, generator=g)[:k]
        out = torch.full((2, h * w), 0.0)
        out[0, pos] = 1.0
        out[1] = (torch.rand(h * w, generator=g) < 0.5).float()
        return out.view(2, 1, h, w)

    mv = per_example(mask_and_value, gens, x.device)  # (B, 2, 1, H, W)
    mask, value = mv[:, 0], mv[:, 1]
    return torch.where(mask.bool().expand_as(x), value.expand_as(x), x)


def noise_sample(distribution: str, x: torch.Tensor, eps: float, gens: list[torch.Generator]) -> torch.Tensor:
    """Random corruption at a matched budget, clipped to [0,1] (clipping never increases the norm).

    uniform: U(-eps, eps) per value (L∞); sign: ±eps per value (the L∞ cube's corners); gaussian: a Gaussian
    direction scaled to L2 norm eps; salt_pepper: floor(eps*H*W) pixel positions (all channels) set to 0 or 1.
    """
    shape = tuple(x.shape[1:])
    if distribution == "uniform":
        delta = eps * (2 * per_example(lambda g: torch.rand(shape, generator=g), gens, x.device) - 1)
    elif distribution == "sign":
        delta = eps * (
            2 * per_example(lambda g: (torch.rand(shape, generator=g) < 0.5).float(), gens, x.device) - 1
        )
    elif distribution == "gaussian":

        def gauss(g: torch.Generator) -> torch.Tensor:
            d = torch.randn(shape, generator=g)
            return d / d.norm().clamp_min(1e-12)

        delta = eps * per_example(gauss, gens, x.device)
    elif distribution == "salt_pepper":
        return _salt_pepper(x, eps, gens)
    else:
        raise ValueError(f"unknown noise distribution {distribution!r}; choose one of {list(NOISE_THREAT)}")
    return (x + delta).clamp(0.0, 1.0)


@register_attack("noise", backend="builtin", per_example_rng=True)
def builtin_noise(request: AttackRequest) -> RunOutput:
    r = request
    best = BestIterate(r.images)
    idx = torch.arange(r.images.shape[0], device=r.images.device)
    for d in range(r.params["draws"]):
        gens = example_generators(r.context.seed, r.name, r.ids, d)
        x_new = noise_sample(r.params["distribution"], r.images, r.eps, gens)
        with torch.no_grad():  # not inference_mode: a forward may take gradient steps
            loss, wrong = loss_and_wrong(r.model, x_new, r.labels)
        best.update(idx, x_new, loss, wrong)
    return RunOutput(best.x)
