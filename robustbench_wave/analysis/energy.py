"""The wavelet claim's mechanism measured directly: how much of a perturbation sparsification removes.

The source paper (Zhu & Soricut 2024) argues that sparsification zeroes the small, high-frequency coefficients
a white-noise perturbation lands in. :func:`energy_removed` measures the share of a perturbation's energy in
coefficient space that sparsification throws away, for random noise and for adversarial perturbations
(exact-gradient PGD and the low-frequency PGD, both on the one PGD engine of :mod:`robustbench_wave.attacks`)
of the same budget; every random draw follows the attacks' per-example seeding rule.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
import torch
from torch import nn

from robustbench_wave.attacks import (
    PGD,
    GradSafe,
    LowFreqPGD,
    as_float_images,
    attack_mode,
    example_generators,
    find_wavelet_front_end,
    mode_context,
    model_device,
    model_wavelet,
    noise_sample,
    per_example,
    resolve_level,
)

ADVERSARIAL = ("pgd", "lowfreq_pgd")


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


def _adversarial(
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    ids: torch.Tensor,
    *,
    eps: float,
    norm: str,
    steps: int,
    seed: int,
    level: int,
) -> dict[str, torch.Tensor]:
    """PGD and the low-frequency PGD on the one engine, seeded per example like the suite (the engine rejects
    a norm other than Linf / L2)."""
    settings = {"eps": eps, "norm": norm, "steps": steps, "step_size": 2.5 * eps / steps, "seed": seed}
    wrapped = GradSafe(model)
    low = LowFreqPGD(**settings, stream="energy_lowfreq_pgd", level=level, wavelet=model_wavelet(model))
    return {
        "pgd": PGD(**settings, stream="energy_pgd").run(wrapped, x, y, ids).x_adv,
        "lowfreq_pgd": low.run(wrapped, x, y, ids).x_adv,
    }


def _noise(
    x: torch.Tensor, ids: torch.Tensor, d_pgd: torch.Tensor, *, eps: float, norm: str, seed: int
) -> dict[str, torch.Tensor]:
    """Random perturbations at the same budget (the suite's noise distributions and seeding rule), plus a
    Gaussian rescaled to each example's PGD perturbation norm (same energy)."""

    def gens(stream: str) -> list[torch.Generator]:
        return example_generators(seed, f"energy_{stream}", ids, 0)

    out: dict[str, torch.Tensor] = {}
    if norm == "Linf":
        out["random_sign"] = noise_sample("sign", x, eps, gens("random_sign"))
        out["uniform"] = noise_sample("uniform", x, eps, gens("uniform"))
    else:
        out["gaussian"] = noise_sample("gaussian", x, eps, gens("gaussian"))
    shape = tuple(x.shape[1:])
    matched = per_example(lambda g: torch.randn(shape, generator=g), gens("gaussian_matched"), x.device)
    target = d_pgd.flatten(1).norm(dim=1).view(-1, 1, 1, 1)
    matched = matched / matched.flatten(1).norm(dim=1).clamp_min(1e-12).view(-1, 1, 1, 1) * target
    out["gaussian_matched"] = (x + matched).clamp(0, 1)
    return out


def _rows(
    model: nn.Module,
    x: torch.Tensor,
    x_pert: torch.Tensor,
    name: str,
    *,
    model_name: str,
    ids: torch.Tensor,
    clean_correct: torch.Tensor,
    norm: str,
    eps: float,
) -> pd.DataFrame:
    """One row per example for perturbation ``name``: removed / transmitted energy and the norms."""
    energy = sparsification_energy(model, x, x_pert)
    d = (x_pert - x).flatten(1)
    return pd.DataFrame(
        {
            "model": model_name,
            "perturbation": name,
            "adversarial": name in ADVERSARIAL,
            "threat": norm,
            "eps": float(eps),
            "example_id": ids.numpy(),
            "energy_removed": energy["energy_removed"].cpu().numpy(),
            "transmitted": energy["transmitted"].cpu().numpy(),
            "norm_l2": d.norm(dim=1).cpu().numpy(),
            "norm_linf": d.abs().amax(1).cpu().numpy(),
            "clean_correct": clean_correct.cpu().numpy(),
        }
    )


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
    mode: str = "exact",
    example_ids: Sequence[int] | None = None,
) -> pd.DataFrame:
    """Energy removed by sparsification for random noise vs adversarial perturbations of the same norm.

    Perturbations (one row each per example): ``random_sign`` / ``uniform`` (same Linf eps, or for L2
    ``gaussian`` at eps), ``gaussian_matched`` (Gaussian rescaled to the L2 norm of that example's PGD
    perturbation: same energy), ``pgd`` (PGD under gradient mode ``mode``, exact by default: the honest
    attacker) and ``lowfreq_pgd`` (the adaptive attack; ``level`` defaults to the front-end's levels).
    Returns a long DataFrame: model, perturbation, adversarial, threat, eps, example_id, energy_removed,
    transmitted, norm_l2, norm_linf, clean_correct.
    """
    if find_wavelet_front_end(model) is None:
        raise ValueError(f"{model_name}: no wavelet front-end, so there is no sparsification to measure")
    dev = model_device(model)
    x = as_float_images(images).to(dev)
    y = labels.long().to(dev)
    ids = torch.arange(len(x)) if example_ids is None else torch.as_tensor([int(i) for i in example_ids])
    with attack_mode(model):
        with torch.no_grad():
            clean_correct = model(x).argmax(1) == y
        with mode_context(model, mode):
            adv = _adversarial(
                model,
                x,
                y,
                ids,
                eps=eps,
                norm=norm,
                steps=steps,
                seed=seed,
                level=resolve_level(model, "auto" if level is None else level),
            )
        perturbed = {**_noise(x, ids, adv["pgd"] - x, eps=eps, norm=norm, seed=seed), **adv}
        frames = [
            _rows(
                model,
                x,
                x_pert,
                name,
                model_name=model_name,
                ids=ids,
                clean_correct=clean_correct,
                norm=norm,
                eps=eps,
            )
            for name, x_pert in perturbed.items()
        ]
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
