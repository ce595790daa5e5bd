"""Attacks from the Adversarial Robustness Toolbox (ART; Nicolae et al. 2018), registered under the ``art`` back-end.

A second implementation of AutoAttack's APGD (cross-entropy and DLR loss), targeted APGD and Square. torchattacks'
APGD / APGD-T / Square follow the authors' code line by line (with the same seed and batch, torchattacks' APGD
returns the very points the reference returns), so they share its mistakes too; ART's ``AutoProjectedGradientDescent``
and ``SquareAttack`` are written anew in NumPy from the papers (its own checkpoints ``w_j``, its own DLR loss, its
own random starts), so under ``--cross-check`` their breaks are an independent second opinion, and they count.

What differs from AutoAttack's own code, on purpose of the library: ART's APGD keeps each point's *last*
iterate (the reference keeps any iterate that misclassifies) and fixes rho at 0.75; its targeted DLR loss is
``-(z_t - max_{i != t} z_i) / (z_pi1 - z_pi3)`` and a targeted run counts a point only when it reaches the target;
its Square has only the margin loss. APGD-T here tries the same targets as AutoAttack's (the
``n_target_classes`` classes with the highest clean logits after the top one), one ART run per target on the
points still classified correctly. ART has no FAB (its own ``AutoAttack`` puts DeepFool in its place): FAB-T's
second implementation is the builtin one written from the paper (:mod:`robustbench_wave.attacks.fab_builtin`).

ART draws its random starts from NumPy's global RNG and Square's square positions from Python's ``random``: the
runners seed both from ``request.block_seed`` and put the caller's state back, so they run on fixed id
blocks (``per_example_rng=False``) like the other libraries.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
from torch import nn

from robustbench_wave.attacks.model_state import model_device
from robustbench_wave.attacks.registry import AttackRequest, RunOutput, register_attack
from robustbench_wave.attacks.seeding import host_rngs
from robustbench_wave.attacks.torchattacks_backend import SQUARE_VOTE_DRAWS, square_queries, target_count

log = logging.getLogger(__name__)

BACKEND = "art"
_ART_LOSS = {"ce": "cross_entropy", "dlr": "difference_logits_ratio"}
_ART_NORM = {"Linf": np.inf, "L2": 2}
_ART_RHO = 0.75  # ART's APGD has this step-size threshold built in
_APGD_STEP = 2.0  # AutoAttack's initial step, in units of eps


#: Seed NumPy's and Python's global RNGs (ART's sources of randomness), restoring the caller's afterwards.
#: The evaluation's :func:`~robustbench_wave.attacks.seeding.seeded` block seeds them too; the runners seed
#: again right before ART draws, so a forward of a randomised model earlier in the block moves none of ART's.
library_rng = host_rngs


def _classifier(request: AttackRequest) -> Any:
    """ART's view of the request's model: logits of [0, 1] images, cross-entropy as the estimator's loss."""
    from art.estimators.classification import PyTorchClassifier

    x = request.images
    return PyTorchClassifier(
        model=request.model,
        loss=nn.CrossEntropyLoss(),
        input_shape=tuple(x.shape[1:]),
        nb_classes=request.context.class_count(request.model, x),
        clip_values=(0.0, 1.0),
        device_type="gpu" if model_device(request.model).type == "cuda" else "cpu",
    )


def _numpy(t: torch.Tensor) -> np.ndarray:
    return t.detach().cpu().numpy().astype(np.float32)


def _back(adv: np.ndarray, x: torch.Tensor, name: str) -> torch.Tensor:
    """ART's points as a tensor like ``x``; a point ART left non-finite (its DLR loss divides by z_pi1 - z_pi3,
    which ties make 0) falls back to the clean image: not broken by ART, said in the log."""
    out = torch.from_numpy(adv).to(x.device, x.dtype)
    bad = ~torch.isfinite(out).flatten(1).all(1)
    if bool(bad.any()):
        log.warning(
            "%s (art): %d point(s) came back non-finite; they count as not broken", name, int(bad.sum())
        )
        out[bad] = x[bad]
    return out


def apgd_rejects(threat: str, params: Mapping[str, Any]) -> str | None:
    """The APGD settings ART cannot honour: EOT (it has none) and a rho other than its built-in 0.75."""
    if params.get("eot_iter", 1) > 1:
        return "ART's APGD has no EOT (eot_iter > 1): use backend = 'torchattacks'"
    if params.get("rho", _ART_RHO) != _ART_RHO:
        return f"ART's APGD fixes rho = {_ART_RHO}: use backend = 'torchattacks'"
    return None


def _apgd(request: AttackRequest, loss: str, *, targeted: bool) -> Any:
    """ART's APGD for the request: AutoAttack's initial step 2 eps, one batch per id block, silent."""
    from art.attacks.evasion import AutoProjectedGradientDescent

    classes = request.context.class_count(request.model, request.images)
    if loss == "dlr" and classes < 3:
        raise ValueError(
            f"attack {request.name!r} (art): ART's DLR loss needs at least 3 classes, the model has {classes}; "
            "use backend = 'torchattacks'"
        )
    p = request.params
    return AutoProjectedGradientDescent(
        _classifier(request),
        norm=_ART_NORM[request.threat],
        eps=request.eps,
        eps_step=_APGD_STEP * request.eps,
        max_iter=p["steps"],
        targeted=targeted,
        nb_random_init=p["restarts"],
        batch_size=max(len(request.images), 1),
        loss_type=_ART_LOSS[loss],
        verbose=False,
    )


def _check(request: AttackRequest) -> None:
    reason = apgd_rejects(request.threat, request.params)
    if reason is not None:
        raise ValueError(f"attack {request.name!r}: {reason}")


@register_attack("apgd", backend=BACKEND, per_example_rng=False, rejects=apgd_rejects)
def art_apgd(request: AttackRequest) -> RunOutput:
    """Untargeted APGD on the entry's loss (cross-entropy or DLR), ``restarts`` random starts."""
    _check(request)
    atk = _apgd(request, request.params["loss"], targeted=False)
    x = request.images
    with library_rng(request.block_seed):
        adv = atk.generate(_numpy(x), y=request.labels.cpu().numpy())
    return RunOutput(_back(adv, x, request.name))


def _targets(request: AttackRequest, n: int) -> torch.Tensor:
    """(B, n): per point, the classes with the 2nd, 3rd, ... highest clean logit (AutoAttack's targets)."""
    with torch.no_grad():  # not inference_mode: a forward may take gradient steps
        order = request.model(request.images).argsort(dim=1, descending=True)
    return order[:, 1 : n + 1]


@register_attack("apgd-t", backend=BACKEND, per_example_rng=False, rejects=apgd_rejects)
def art_apgdt(request: AttackRequest) -> RunOutput:
    """Targeted APGD-DLR, one ART run per target class on the points every earlier target left correct."""
    _check(request)
    x, y = request.images, request.labels
    atk = _apgd(request, "dlr", targeted=True)
    targets = _targets(request, target_count(request))
    out = x.clone()
    standing = torch.ones(len(x), dtype=torch.bool, device=x.device)
    with library_rng(request.block_seed):
        for k in range(targets.shape[1]):
            idx = standing.nonzero().flatten()
            if len(idx) == 0:
                break
            adv = _back(atk.generate(_numpy(x[idx]), y=targets[idx, k].cpu().numpy()), x[idx], request.name)
            with torch.no_grad():  # not inference_mode: a forward may take gradient steps
                broken = request.model(adv).argmax(1) != y[idx]
            out[idx] = torch.where(broken[:, None, None, None], adv, out[idx])
            standing[idx[broken]] = False
    return RunOutput(out)


def square_rejects(threat: str, params: Mapping[str, Any]) -> str | None:
    """ART's Square ascends the margin loss only, and scores each query by one forward of the points it
    batches (no example ids, so no K-draw vote on the records' common random numbers)."""
    if params.get("loss", "margin") != "margin":
        return f"ART's Square has no {params['loss']!r} loss (margin only): use backend = 'torchattacks'"
    if params.get(SQUARE_VOTE_DRAWS, 1) > 1:
        return (
            "ART's Square scores a query by one forward, not by the K-draw vote of a randomised model "
            f"({SQUARE_VOTE_DRAWS} > 1): use backend = 'torchattacks'"
        )
    return None


@register_attack("square", backend=BACKEND, per_example_rng=False, rejects=square_rejects)
def art_square(request: AttackRequest) -> RunOutput:
    """Square (Andriushchenko et al. 2020) with ART's margin loss and the entry's query budget."""
    from art.attacks.evasion import SquareAttack

    p = request.params
    reason = square_rejects(request.threat, p)
    if reason is not None:
        raise ValueError(f"attack {request.name!r}: {reason}")
    atk = SquareAttack(
        _classifier(request),
        norm=_ART_NORM[request.threat],
        max_iter=square_queries(p, request.eps),
        eps=request.eps,
        p_init=p["p_init"],
        nb_restarts=p["restarts"],
        batch_size=max(len(request.images), 1),
        verbose=False,
    )
    x = request.images
    with library_rng(request.block_seed):
        adv = atk.generate(_numpy(x), y=request.labels.cpu().numpy())
    return RunOutput(_back(adv, x, request.name))
