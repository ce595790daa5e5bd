"""The wavelet claim's mechanism measured directly: how much of a perturbation sparsification removes.

The source paper (Zhu & Soricut 2024) argues that sparsification zeroes the small, high-frequency coefficients
a white-noise perturbation lands in. :func:`energy_removed` measures the share of a perturbation's energy in
coefficient space that sparsification throws away, for random noise and for adversarial perturbations
(exact-gradient PGD and the low-frequency PGD of :mod:`robustbench_wave.attacks.lowfreq`) of the same budget.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
import torch
from torch import nn

from robustbench_wave.attacks.lowfreq import (
    _per_example_noise,
    as_float_images,
    check_norm,
    eval_mode,
    find_wavelet_front_end,
    lowfreq_pgd,
    mode_context,
    model_device,
    projected_gradient_attack,
    wavelet_level,
)


# --------------------------------------------------------------------------------------------------------
def _front_end_inputs(model: nn.Module, front: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """What the front-end actually receives for model input ``x`` (after any normalization inside)."""
    captured: list[torch.Tensor] = []
    handle = front.register_forward_hook(lambda _m, inputs, _out: captured.append(inputs[0].detach()))
    try:
        with torch.no_grad():
            model(x)
    finally:
        handle.remove()
    if not captured:
        raise ValueError("the wavelet front-end was not called by the model's forward pass")
    return captured[0]


def sparsification_energy(model: nn.Module, x: torch.Tensor, x_pert: torch.Tensor) -> dict[str, torch.Tensor]:
    """Per-example share of the perturbation's coefficient energy removed by sparsification.

    W is linear (up to the constant chroma offset), so ``W(x+d) - W(x) = W(d)``;
    ``removed = ||W(d) ⊙ (1 - keep(x+d))||² / ||W(d)||²``.  ``transmitted`` is what actually reaches the
    learned layers, ``||S(x+d) - S(x)||² / ||W(d)||²`` with S = sparsify ∘ W (mask changes included).
    """
    front = find_wavelet_front_end(model)
    if front is None:
        raise ValueError("model has no wavelet front-end (pixel_embedding / sparsify); energy is undefined")
    u_clean = _front_end_inputs(model, front, x)
    u_pert = _front_end_inputs(model, front, x_pert)
    with torch.no_grad():
        w_clean = front.pixel_embedding(u_clean)
        w_pert = front.pixel_embedding(u_pert)
        s_clean, _ = front.sparsify(w_clean)
        s_pert, keep = front.sparsify(w_pert)
        wd = (w_pert - w_clean).flatten(1)
        total = wd.pow(2).sum(1).clamp_min(1e-30)
        removed = (wd * (~keep.flatten(1)).to(wd)).pow(2).sum(1) / total
        transmitted = (s_pert - s_clean).flatten(1).pow(2).sum(1) / total
    return {"energy_removed": removed, "transmitted": transmitted}


def energy_removed(
    model: nn.Module,
    images: torch.Tensor,
    labels: torch.Tensor,
    *,
    eps: float,
    norm: str = "Linf",
    model_name: str = "model",
    steps: int = 20,
    seed: int = 0,
    level: int | None = None,
    attack_mode: str = "exact",
    example_ids: Sequence[int] | None = None,
) -> pd.DataFrame:
    """Energy removed by sparsification for random noise vs adversarial perturbations of the same norm.

    Perturbations (one row each per example): ``random_sign`` / ``uniform`` (same Linf eps, or for L2
    ``gaussian`` at eps), ``gaussian_matched`` (Gaussian rescaled to the L2 norm of that example's PGD
    perturbation: same energy), ``pgd`` (exact-gradient PGD, the honest attacker) and ``lowfreq_pgd``
    (the adaptive attack).  Returns a long DataFrame: model, perturbation, threat, eps, example_id,
    energy_removed, transmitted, norm_l2, norm_linf, clean_correct.
    """
    check_norm(norm)
    dev = model_device(model)
    x = as_float_images(images).to(dev)
    y = labels.long().to(dev)
    ids = list(range(len(x))) if example_ids is None else [int(i) for i in example_ids]
    if find_wavelet_front_end(model) is None:
        raise ValueError(f"{model_name}: no wavelet front-end, so there is no sparsification to measure")
    level = wavelet_level(model) if level is None else level
    perturbed: dict[str, torch.Tensor] = {}
    with eval_mode(model):
        with torch.no_grad():
            clean_correct = model(x).argmax(1) == y
        with mode_context(model, attack_mode):
            pgd = projected_gradient_attack(
                model, x, y, eps=eps, norm=norm, steps=steps, seed=seed, example_ids=ids
            )
            low = lowfreq_pgd(
                model, x, y, eps=eps, norm=norm, level=level, steps=steps, seed=seed, example_ids=ids
            )
        d_pgd = pgd["x_adv"] - x
        if norm == "Linf":
            sign = _per_example_noise(x.shape[1:], ids, seed + 7, 0, "uniform").to(x).sign()
            perturbed["random_sign"] = (x + eps * sign).clamp(0, 1)
            unif = _per_example_noise(x.shape[1:], ids, seed + 11, 0, "uniform").to(x)
            perturbed["uniform"] = (x + eps * unif).clamp(0, 1)
        else:
            gauss = _per_example_noise(x.shape[1:], ids, seed + 13, 0, "normal").to(x)
            gauss = gauss / gauss.flatten(1).norm(dim=1).clamp_min(1e-12).view(-1, 1, 1, 1) * eps
            perturbed["gaussian"] = (x + gauss).clamp(0, 1)
        matched = _per_example_noise(x.shape[1:], ids, seed + 17, 0, "normal").to(x)
        target = d_pgd.flatten(1).norm(dim=1).view(-1, 1, 1, 1)
        matched = matched / matched.flatten(1).norm(dim=1).clamp_min(1e-12).view(-1, 1, 1, 1) * target
        perturbed["gaussian_matched"] = (x + matched).clamp(0, 1)
        perturbed["pgd"] = pgd["x_adv"]
        perturbed["lowfreq_pgd"] = low["x_adv"]
        frames = []
        for name, x_pert in perturbed.items():
            energy = sparsification_energy(model, x, x_pert)
            d = x_pert - x
            frames.append(
                pd.DataFrame(
                    {
                        "model": model_name,
                        "perturbation": name,
                        "adversarial": name in ("pgd", "lowfreq_pgd"),
                        "threat": norm,
                        "eps": float(eps),
                        "example_id": ids,
                        "energy_removed": energy["energy_removed"].cpu().numpy(),
                        "transmitted": energy["transmitted"].cpu().numpy(),
                        "norm_l2": d.flatten(1).norm(dim=1).cpu().numpy(),
                        "norm_linf": d.flatten(1).abs().amax(1).cpu().numpy(),
                        "clean_correct": clean_correct.cpu().numpy(),
                    }
                )
            )
    return pd.concat(frames, ignore_index=True)


def energy_summary(energy: pd.DataFrame) -> pd.DataFrame:
    """Mean, std and count of the removed / transmitted energy share per model and perturbation."""
    if energy.empty:
        return pd.DataFrame(
            columns=["model", "perturbation", "removed_mean", "removed_std", "transmitted_mean", "n"]
        )
    grouped = energy.groupby(["model", "perturbation"], sort=False)
    return grouped.agg(
        removed_mean=("energy_removed", "mean"),
        removed_std=("energy_removed", "std"),
        transmitted_mean=("transmitted", "mean"),
        n=("energy_removed", "size"),
    ).reset_index()


def describe_energy(summary: pd.DataFrame) -> dict[str, Any]:
    """Per model: mean removed share for random noise vs adversarial perturbations (for the verdict)."""
    out: dict[str, Any] = {}
    for model, grp in summary.groupby("model", sort=False):
        by = dict(zip(grp["perturbation"], grp["removed_mean"]))
        noise = [by[k] for k in ("random_sign", "uniform", "gaussian", "gaussian_matched") if k in by]
        out[str(model)] = {
            "noise": float(np.mean(noise)) if noise else float("nan"),
            "pgd": float(by.get("pgd", float("nan"))),
            "lowfreq_pgd": float(by.get("lowfreq_pgd", float("nan"))),
        }
    return out
