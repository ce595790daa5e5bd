"""Adaptive attacks the wavelet tokenizer's robustness claim calls for (spec.md §2, §4).

The seed paper (Zhu & Soricut 2024) argues that sparsification zeroes the small, high-frequency coefficients
a white-noise perturbation lands in.  An *adaptive* attacker (Athalye et al. 2018; Carlini et al. 2019,
"design attacks for the defence") therefore puts its whole budget where sparsification cannot remove it:

* :func:`lowfreq_pgd` -- PGD whose perturbation lives in the coarsest low-frequency band.  For the Haar
  wavelet (db1) the span of the level-L approximation (LL) band is exactly the space of images that are
  constant on every ``2^L x 2^L`` block, so the orthogonal projection onto it is block-mean pooling followed
  by nearest up-sampling (:func:`block_mean_project`).  The same block grid carries the coarsest band of
  every YCbCr channel (chroma is 2x2 down-sampled and gets L-1 levels), and a per-pixel colour transform or
  per-channel normalization keeps a block-constant RGB perturbation block-constant.  For other wavelets
  (coif1, ...) the block-average subspace is the Haar LL band on the model's token grid, a close but not
  exact stand-in for that wavelet's LL band; ``basis="wavelet"`` projects onto the model wavelet's own LL
  band instead (see :func:`wavelet_ll_project`), at the cost of an approximate box constraint.
* :func:`energy_removed` -- the seed's mechanism measured directly: the share of a perturbation's energy in
  coefficient space that sparsification throws away, for random noise and for adversarial perturbations.

The low-frequency attack writes per-example records in the contract's schema (attack ``lowfreq_pgd_linf`` /
``lowfreq_pgd_l2``, family ``lowfreq-pgd``) so that they join the comparison tables.
"""

from __future__ import annotations

import contextlib
import logging
import math
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F
from torch import nn

from robustbench_wave.models.frontend import GradMode, grad_mode, has_fixed_front_end

log = logging.getLogger(__name__)

LOWFREQ_FAMILY = "lowfreq-pgd"
RECORD_COLUMNS = (
    "model",
    "dataset",
    "grad_mode",
    "attack",
    "family",
    "kind",
    "threat",
    "eps",
    "backend",
    "example_id",
    "label",
    "pred",
    "correct",
    "norm",
    "attacked",
    "correct_last",
    "loss_final",
)
Projector = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]  # (delta, x) -> feasible delta


# --------------------------------------------------------------------------------------------------------
# small shared helpers (also used by diagnostics.py)
# --------------------------------------------------------------------------------------------------------
@contextlib.contextmanager
def eval_mode(model: nn.Module) -> Iterator[nn.Module]:
    """Put ``model`` in eval mode and restore its previous mode even if an attack raises (style.md)."""
    was_training = model.training
    try:
        model.eval()
        yield model
    finally:
        model.train(was_training)


def as_float_images(images: torch.Tensor) -> torch.Tensor:
    """uint8 (N, C, H, W) -> float32 in [0, 1]; float inputs are checked to already lie in [0, 1]."""
    if images.dtype == torch.uint8:
        return images.float() / 255.0
    images = images.float()
    if images.numel() and (images.min() < 0 or images.max() > 1):
        raise ValueError("images must be uint8 or floats in [0, 1] (normalization belongs inside the model)")
    return images


def model_device(model: nn.Module) -> torch.device:
    """Where the model's parameters (or buffers) live; inputs are moved there, results come back to CPU."""
    for t in (*model.parameters(), *model.buffers()):
        return t.device
    return torch.device("cpu")


def modes_for(model: nn.Module, grad_modes: Sequence[str] | None = None) -> list[str]:
    """The gradient modes a model is evaluated under: all three with a fixed front-end, else only exact."""
    if grad_modes is not None:
        return [GradMode.parse(m).value for m in grad_modes]
    if has_fixed_front_end(model):
        return [m.value for m in GradMode]
    return [GradMode.EXACT.value]


def mode_context(model: nn.Module, mode: str) -> contextlib.AbstractContextManager:
    """``grad_mode(model, mode)`` for models with a fixed front-end; a no-op (exact) for the rest."""
    if has_fixed_front_end(model):
        return grad_mode(model, mode)
    if GradMode.parse(mode) is not GradMode.EXACT:
        raise ValueError(f"model has no fixed front-end, so only grad mode 'exact' applies (got {mode!r})")
    return contextlib.nullcontext(model)


def margin_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Per-example ``max_{j != y} z_j - z_y`` (Carlini & Wagner): never saturates like softmax CE does."""
    true = logits.gather(1, labels[:, None]).squeeze(1)
    other = logits.scatter(1, labels[:, None], float("-inf")).amax(1)
    return other - true


def input_gradient(
    model: nn.Module, x: torch.Tensor, y: torch.Tensor, loss: str = "ce"
) -> tuple[torch.Tensor, torch.Tensor]:
    """Gradient of the summed per-example loss w.r.t. the input, and the logits.

    A model whose output does not depend differentiably on ``x`` (e.g. ``blocked`` mode, or a hard
    quantizer) returns an all-zero gradient instead of raising, which is what an attack would see.
    """
    x = x.detach().clone().requires_grad_(True)
    with torch.enable_grad():
        logits = model(x)
        per_example = (
            margin_loss(logits, y) if loss == "margin" else F.cross_entropy(logits, y, reduction="none")
        )
        if not per_example.requires_grad:
            return torch.zeros_like(x), logits.detach()
        (grad,) = torch.autograd.grad(per_example.sum(), x, allow_unused=True)
    if grad is None:
        grad = torch.zeros_like(x)
    return grad.detach(), logits.detach()


def _example_generator(seed: int, example_id: int, restart: int) -> torch.Generator:
    """Per-example randomness: a point's random start is independent of batch size and position."""
    return torch.Generator().manual_seed((seed * 1_000_003 + example_id) * 1_009 + restart)


def _per_example_noise(
    shape: Sequence[int], example_ids: Sequence[int], seed: int, restart: int, kind: str
) -> torch.Tensor:
    out = []
    for eid in example_ids:
        gen = _example_generator(seed, int(eid), restart)
        if kind == "uniform":
            out.append(torch.rand(tuple(shape), generator=gen) * 2 - 1)
        else:
            out.append(torch.randn(tuple(shape), generator=gen))
    return torch.stack(out)


def _random_start(
    shape: Sequence[int], example_ids: Sequence[int], seed: int, restart: int, norm: str, eps: float
) -> torch.Tensor:
    """Uniform in the Linf box, or uniform direction with uniform radius in the L2 ball, per example."""
    out = []
    for eid in example_ids:
        gen = _example_generator(seed, int(eid), restart)
        if norm == "Linf":
            out.append((torch.rand(tuple(shape), generator=gen) * 2 - 1) * eps)
        else:
            d = torch.randn(tuple(shape), generator=gen)
            radius = torch.rand((), generator=gen) * eps
            out.append(d / d.norm().clamp_min(1e-12) * radius)
    return torch.stack(out)


def _lp_norm(delta: torch.Tensor, norm: str) -> torch.Tensor:
    flat = delta.flatten(1)
    return flat.abs().amax(1) if norm == "Linf" else flat.norm(dim=1)


def check_norm(norm: str) -> str:
    if norm not in ("Linf", "L2"):
        raise ValueError(f"threat model must be 'Linf' or 'L2', got {norm!r}")
    return norm


# --------------------------------------------------------------------------------------------------------
# projections
# --------------------------------------------------------------------------------------------------------
def _check_level(x: torch.Tensor, level: int) -> int:
    k = 2**level
    if level < 0 or x.shape[-1] % k or x.shape[-2] % k:
        raise ValueError(
            f"image size {tuple(x.shape[-2:])} is not divisible by 2^level = {k}; choose a smaller level"
        )
    return k


def block_mean_project(delta: torch.Tensor, level: int) -> torch.Tensor:
    """Orthogonal projection onto images constant on ``2^level`` blocks (= the Haar LL band at that level)."""
    k = _check_level(delta, level)
    if k == 1:
        return delta
    return F.avg_pool2d(delta, k).repeat_interleave(k, dim=-2).repeat_interleave(k, dim=-1)


def wavelet_ll_project(delta: torch.Tensor, level: int, wavelet: str) -> torch.Tensor:
    """Orthogonal projection onto the span of ``wavelet``'s level-``level`` approximation band.

    Uses the lead's periodized torch DWT (orthogonal, so zeroing the details and inverting is the
    orthogonal projection).  Equals :func:`block_mean_project` for db1.
    """
    from robustbench_wave.models.wavelet import filter_bank, wavedec2, waverec2

    _check_level(delta, level)
    bank = filter_bank(wavelet)
    approx, details = wavedec2(delta, bank, level)
    return waverec2(approx, [torch.zeros_like(d) for d in details], bank)


def _block_box(x: torch.Tensor, level: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-block bounds [lo, hi] on a block-constant delta that keep x + delta in [0, 1] on every pixel."""
    k = 2**level
    lo = F.max_pool2d(-x, k) if k > 1 else -x  # -min over the block
    hi = 1.0 - (F.max_pool2d(x, k) if k > 1 else x)
    if k > 1:
        lo = lo.repeat_interleave(k, dim=-2).repeat_interleave(k, dim=-1)
        hi = hi.repeat_interleave(k, dim=-2).repeat_interleave(k, dim=-1)
    return lo, hi


def lowfreq_projector(
    level: int, eps: float, norm: str, basis: str = "haar", wavelet: str = "db1"
) -> Projector:
    """Projection onto {block-constant delta} ∩ {||delta|| <= eps} ∩ {x + delta in [0, 1]}.

    Linf: clipping a block-constant delta to [-eps, eps] keeps it block-constant, but clipping x + delta to
    [0, 1] would not (x varies inside a block).  Instead each block's value is clipped to
    ``[-min_block(x), 1 - max_block(x)] ∩ [-eps, eps]``; because the constraint set is a product of
    intervals over blocks, this is the exact Euclidean projection, and the result stays in the subspace.
    L2: clip to the same per-block box, then rescale into the eps-ball (the box contains 0 and is convex, so
    rescaling stays feasible).  This is feasible but not the exact projection onto the intersection, the
    usual choice in PGD.  ``basis="wavelet"`` (non-Haar wavelets) alternates three times between the
    wavelet's LL band and the box, ending on the box: feasible, approximately in the band.
    """
    check_norm(norm)
    if basis not in ("haar", "wavelet"):
        raise ValueError(f"basis must be 'haar' (block averages, exact for db1) or 'wavelet', got {basis!r}")

    def subspace(d: torch.Tensor) -> torch.Tensor:
        if basis == "haar":
            return block_mean_project(d, level)
        return wavelet_ll_project(d, level, wavelet)

    def project(delta: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        lo, hi = _block_box(x, level) if basis == "haar" else (-x, 1.0 - x)
        if norm == "Linf":
            lo, hi = lo.clamp(min=-eps), hi.clamp(max=eps)
        for _ in range(1 if basis == "haar" else 3):
            delta = torch.maximum(torch.minimum(subspace(delta), hi), lo)
        if norm == "L2":
            scale = (eps / delta.flatten(1).norm(dim=1).clamp_min(1e-12)).clamp(max=1.0)
            delta = delta * scale.view(-1, *([1] * (delta.dim() - 1)))
        return delta

    return project


def ball_projector(eps: float, norm: str) -> Projector:
    """Plain pixel-space projection onto the eps-ball and the [0, 1] box (standard PGD, Madry et al.)."""
    check_norm(norm)

    def project(delta: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        if norm == "Linf":
            delta = delta.clamp(-eps, eps)
        else:
            scale = (eps / delta.flatten(1).norm(dim=1).clamp_min(1e-12)).clamp(max=1.0)
            delta = delta * scale.view(-1, *([1] * (delta.dim() - 1)))
        return (x + delta).clamp(0, 1) - x

    return project


# --------------------------------------------------------------------------------------------------------
# PGD with a pluggable projection
# --------------------------------------------------------------------------------------------------------
def projected_gradient_attack(
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    *,
    eps: float,
    norm: str,
    steps: int,
    step_size: float | None = None,
    restarts: int = 1,
    seed: int = 0,
    example_ids: Sequence[int] | None = None,
    project: Projector | None = None,
    direction: Callable[[torch.Tensor], torch.Tensor] | None = None,
    init: Callable[[torch.Tensor], torch.Tensor] | None = None,
    random_start: bool = True,
) -> dict[str, torch.Tensor]:
    """PGD on the CE loss keeping the best iterate per example (first misclassified, else highest loss).

    ``project`` maps a raw delta to a feasible one; ``direction`` maps the input gradient into the allowed
    subspace before the step (identity for plain PGD); ``init`` shapes the random start (e.g. block-constant).
    Returns ``x_adv`` (best iterate), ``correct``, ``pred``,
    ``correct_last`` (the final iterate of every restart still right -- silent-success bookkeeping),
    ``loss_final`` (per-example loss at ``x_adv``) and ``history`` (steps,) mean loss per step, restart 0.
    """
    check_norm(norm)
    if steps < 1 or restarts < 1:
        raise ValueError(f"steps and restarts must be >= 1, got steps={steps}, restarts={restarts}")
    project = project or ball_projector(eps, norm)
    direction = direction or (lambda g: g)
    init = init or (lambda d: d)
    step_size = step_size if step_size is not None else 2.5 * eps / steps
    ids = list(range(len(x))) if example_ids is None else [int(i) for i in example_ids]
    x = x.detach()
    best = x.clone()
    best_loss = torch.full((len(x),), -math.inf, device=x.device)
    best_wrong = torch.zeros(len(x), dtype=torch.bool, device=x.device)
    last_correct = torch.ones(len(x), dtype=torch.bool, device=x.device)
    history = torch.zeros(steps)

    def consider(x_try: torch.Tensor, loss: torch.Tensor, wrong: torch.Tensor) -> None:
        better = (wrong & ~best_wrong) | ((wrong == best_wrong) & (loss > best_loss))
        best[better] = x_try[better]
        best_loss[better] = loss[better]
        best_wrong[better] = wrong[better]

    for restart in range(restarts):
        if random_start and eps > 0:
            delta = project(init(_random_start(x.shape[1:], ids, seed, restart, norm, eps)).to(x), x)
        else:
            delta = torch.zeros_like(x)
        for step in range(steps):
            grad, logits = input_gradient(model, x + delta, y)
            loss = F.cross_entropy(logits, y, reduction="none")
            wrong = logits.argmax(1) != y
            consider(x + delta, loss, wrong)
            if restart == 0:
                history[step] = float(loss.mean())
            g = direction(grad)
            if norm == "Linf":
                delta = delta + step_size * g.sign()
            else:
                g_norm = g.flatten(1).norm(dim=1).clamp_min(1e-12).view(-1, 1, 1, 1)
                delta = delta + step_size * g / g_norm
            delta = project(delta, x)
        with torch.no_grad():
            logits = model(x + delta)
        loss = F.cross_entropy(logits, y, reduction="none")
        wrong = logits.argmax(1) != y
        consider(x + delta, loss, wrong)
        last_correct &= ~wrong
    x_adv = best.clamp(0, 1)
    with torch.no_grad():
        logits = model(x_adv)
    return {
        "x_adv": x_adv,
        "correct": logits.argmax(1) == y,
        "pred": logits.argmax(1),
        "correct_last": last_correct,
        "loss_final": F.cross_entropy(logits, y, reduction="none"),
        "history": history,
    }


# --------------------------------------------------------------------------------------------------------
# the low-frequency attack and its records
# --------------------------------------------------------------------------------------------------------
def find_wavelet_front_end(model: nn.Module) -> nn.Module | None:
    """The first sub-module with the wavelet front-end interface (``pixel_embedding`` and ``sparsify``)."""
    for module in model.modules():
        if callable(getattr(module, "pixel_embedding", None)) and callable(getattr(module, "sparsify", None)):
            return module
    return None


def wavelet_level(model: nn.Module, default: int | None = None) -> int:
    """The model's wavelet level L (its token grid is ``2^L`` pixels), or ``default`` for other models."""
    front = find_wavelet_front_end(model)
    if front is not None:
        return int(front.levels)
    if default is None:
        raise ValueError("model has no wavelet front-end: pass level= (e.g. the wavelet model's level)")
    return default


def lowfreq_pgd(
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    *,
    eps: float,
    norm: str = "Linf",
    level: int,
    steps: int = 20,
    step_size: float | None = None,
    restarts: int = 1,
    seed: int = 0,
    example_ids: Sequence[int] | None = None,
    basis: str = "haar",
    wavelet: str = "db1",
) -> dict[str, torch.Tensor]:
    """PGD restricted to the coarsest low-frequency band, under the same pixel-space eps budget.

    The ascent direction is the gradient projected onto the band (for Linf its sign is then still
    block-constant, the steepest-ascent step over block values); every iterate is projected by
    :func:`lowfreq_projector`.  Returns the same dict as :func:`projected_gradient_attack`.
    """
    project = lowfreq_projector(level, eps, norm, basis=basis, wavelet=wavelet)

    k = 2**level

    def direction(g: torch.Tensor) -> torch.Tensor:
        return block_mean_project(g, level) if basis == "haar" else wavelet_ll_project(g, level, wavelet)

    def init(noise: torch.Tensor) -> torch.Tensor:  # one random value per block, not a shrunken block mean
        return noise[..., ::k, ::k].repeat_interleave(k, dim=-2).repeat_interleave(k, dim=-1)

    return projected_gradient_attack(
        model,
        x,
        y,
        eps=eps,
        norm=norm,
        steps=steps,
        step_size=step_size,
        restarts=restarts,
        seed=seed,
        example_ids=example_ids,
        project=project,
        direction=direction,
        init=init,
    )


def lowfreq_records(
    model: nn.Module,
    images: torch.Tensor,
    labels: torch.Tensor,
    eps_list: Sequence[float],
    *,
    model_name: str,
    dataset: str,
    norm: str = "Linf",
    level: int | None = None,
    grad_modes: Sequence[str] | None = None,
    steps: int = 20,
    step_size: float | None = None,
    restarts: int = 1,
    seed: int = 0,
    batch_size: int = 128,
    example_ids: Sequence[int] | None = None,
    basis: str = "haar",
    skip_ids: Mapping[tuple[str, float], Collection[int]] | None = None,
) -> pd.DataFrame:
    """Run :func:`lowfreq_pgd` at every eps (and grad mode) and return contract-schema records.

    Only clean-correct points are attacked (the rest inherit ``correct=False`` with ``attacked=False``),
    as in AutoAttack's bookkeeping (Croce & Hein 2020); ``skip_ids[(mode, eps)]`` names further example ids
    already broken by the benchmark at that budget (the benchmark's ``skip_broken``), which are skipped the
    same way -- the attack's column then counts on top of the suite, and the run is much cheaper.  ``example_ids`` default to ``0..N-1``: pass the
    indices used by the benchmark run so the records join its tables.
    """
    check_norm(norm)
    x_all = as_float_images(images)
    y_all = labels.long()
    ids = np.arange(len(x_all)) if example_ids is None else np.asarray(example_ids, dtype=int)
    if len(ids) != len(x_all):
        raise ValueError(f"example_ids has {len(ids)} entries for {len(x_all)} images")
    level = wavelet_level(model, default=level) if level is None else level
    front = find_wavelet_front_end(model)
    wavelet = str(getattr(front, "wavelet", "db1")) if front is not None else "db1"
    attack_name = f"lowfreq_pgd_{norm.lower()}"
    rows: list[pd.DataFrame] = []
    dev = model_device(model)
    with eval_mode(model):
        with torch.no_grad():
            clean_pred = torch.cat(
                [
                    model(x_all[i : i + batch_size].to(dev)).argmax(1).cpu()
                    for i in range(0, len(x_all), batch_size)
                ]
            )
        clean_ok = clean_pred == y_all
        for mode in modes_for(model, grad_modes):
            with mode_context(model, mode):
                for eps in eps_list:
                    pred = torch.full((len(x_all),), -1, dtype=torch.long)
                    correct = torch.zeros(len(x_all), dtype=torch.bool)
                    last = torch.full((len(x_all),), float("nan"))
                    loss_final = torch.full((len(x_all),), float("nan"))
                    norms = torch.full((len(x_all),), float("nan"))
                    attacked = clean_ok.clone()
                    if skip_ids is not None:
                        skip = set(skip_ids.get((mode, float(eps)), ()))
                        attacked &= torch.tensor([int(i) not in skip for i in ids], dtype=torch.bool)
                    todo = torch.nonzero(attacked).flatten()
                    for start in range(0, len(todo), batch_size):
                        idx = todo[start : start + batch_size]
                        out = {
                            k: v.cpu()
                            for k, v in lowfreq_pgd(
                                model,
                                x_all[idx].to(dev),
                                y_all[idx].to(dev),
                                eps=float(eps),
                                norm=norm,
                                level=level,
                                steps=steps,
                                step_size=step_size,
                                restarts=restarts,
                                seed=seed,
                                example_ids=ids[idx.numpy()].tolist(),
                                basis=basis,
                                wavelet=wavelet,
                            ).items()
                        }
                        pred[idx] = out["pred"]
                        correct[idx] = out["correct"]
                        last[idx] = out["correct_last"].float()
                        loss_final[idx] = out["loss_final"]
                        norms[idx] = _lp_norm(out["x_adv"] - x_all[idx], norm)
                    frame = pd.DataFrame(
                        {
                            "model": model_name,
                            "dataset": dataset,
                            "grad_mode": mode,
                            "attack": attack_name,
                            "family": LOWFREQ_FAMILY,
                            "kind": "white-box",
                            "threat": norm,
                            "eps": float(eps),
                            "backend": "builtin",
                            "example_id": ids,
                            "label": y_all.numpy(),
                            "pred": pd.array([None if p < 0 else p for p in pred.tolist()], dtype="Int64"),
                            "correct": correct.numpy(),
                            "norm": norms.double().numpy(),
                            "attacked": attacked.numpy(),
                            "correct_last": pd.array(
                                [None if math.isnan(v) else bool(v) for v in last.tolist()], dtype="boolean"
                            ),
                            "loss_final": loss_final.double().numpy(),
                        }
                    )
                    rows.append(frame)
                    log.info(
                        "%s [%s] %s eps=%.4g: robust %.1f%%",
                        model_name,
                        mode,
                        attack_name,
                        eps,
                        100 * float(correct.float().mean()),
                    )
    return pd.concat(rows, ignore_index=True)[list(RECORD_COLUMNS)]
