"""Tiny models and data with known behaviour, shared by the diagnostics, adaptive and verdict tests.

Data: 1x8x8 images, 4 classes; class k brightens quadrant k by ``CONTRAST`` over a 0.4 background.
* :class:`QuadrantLinear` -- logits = 10 x quadrant means: honest, differentiable; the optimal Linf attack
  moves the margin by 2 eps, so it is robust below eps = CONTRAST/2 and broken above.
* :class:`QuantizedQuadrant` -- the same after ``round(8 m) / 8`` of the quadrant means: a non-differentiable
  input quantizer with an all-zero input gradient (gradient masking by construction); black-box attacks and
  BPDA still break it at eps = 0.15.
* :class:`NoisyQuadrant` -- Gaussian noise injected in eval mode (a randomized defence: needs EOT).
* :class:`SaturatedQuadrant` -- :class:`QuadrantLinear` with logits x 1e4: the softmax underflows, so the
  cross-entropy input gradient is exactly zero on every correctly classified point while the margin gradient
  is not (a CE attack stands still; a margin/DLR attack breaks it). Caught by white-box-side checks alone.
* :class:`NoiseFragileQuadrant` -- no input gradient anywhere (hard decisions), and heavy noise flips its
  prediction: the uniform random start of a PGD at Linf 0.5 alone breaks it, gradient steps never move.
* :class:`RoughnessTrap` -- :class:`QuadrantLinear` on smooth inputs, a zero-gradient quantizer on rough ones:
  a PGD random start at a large budget lands in the trap and stands still, so accuracy rises with eps.
* :class:`QuantizerFrontEnd` / :func:`masked_front_end_model` -- the quantizer as a FixedFrontEnd whose
  smooth (BPDA) transform is the un-quantized mean, so grad modes exact/blocked are masked and bpda is not.

Records: :func:`attack_rows` (one attack's rows) and :func:`synthetic_records` (nested robust sets).
:data:`CHECK_CASES` gives every registered diagnostic a planted input that makes it fire and an honest one
that passes; ``tests/analysis/test_diagnostics.py`` demands one for every check in the registry.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F
from torch import nn

from robustbench_wave.analysis.checks import CheckInputs
from robustbench_wave.models.frontend import FixedFrontEnd

CONTRAST = 0.16
NUM_CLASSES = 4


class Info:
    """Stand-in for DatasetInfo (only the fields diagnostics read)."""

    name = "synthetic-quadrants"
    slug = "synthetic-quadrants"
    num_classes = NUM_CLASSES
    in_chans = 1
    img_size = 8


def quadrant_data(n: int = 32, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    y = torch.arange(n) % NUM_CLASSES
    x = 0.4 + (torch.rand(n, 1, 8, 8, generator=gen) - 0.5) * 0.1
    for i, k in enumerate(y.tolist()):
        r, c = divmod(k, 2)
        x[i, :, 4 * r : 4 * r + 4, 4 * c : 4 * c + 4] += CONTRAST
    return x.clamp(0, 1), y


def quadrant_means(x: torch.Tensor) -> torch.Tensor:
    return F.avg_pool2d(x, 4).flatten(1)  # (B, 4) in class order (row-major quadrants)


class QuadrantLinear(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.tensor(10.0))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.scale * quadrant_means(x)


def _quantize(m: torch.Tensor) -> torch.Tensor:
    return torch.round(m * 8) / 8


class QuantizedQuadrant(QuadrantLinear):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.scale * _quantize(quadrant_means(x))


class SaturatedQuadrant(QuadrantLinear):
    SATURATION = 1e4  # logit margins ~1e3: exp(-margin) underflows to 0 in float32

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.SATURATION * super().forward(x)


def roughness(x: torch.Tensor) -> torch.Tensor:
    """Per image: the std of the pixels around their quadrant's mean (about 0.03 on :func:`quadrant_data`)."""
    means = F.interpolate(F.avg_pool2d(x, 4), scale_factor=4, mode="nearest")
    return (x - means).flatten(1).std(1)


class NoiseFragileQuadrant(QuadrantLinear):
    ROUGH = 0.12  # roughness above which the prediction moves to the next class

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        m = quadrant_means(x)
        pred = m.argmax(1)
        pred = torch.where(roughness(x) > self.ROUGH, (pred + 1) % NUM_CLASSES, pred)
        return self.scale * F.one_hot(pred, NUM_CLASSES).to(x.dtype) + 0.0 * m  # connected, zero gradient


class RoughnessTrap(QuadrantLinear):
    ROUGH = 0.12  # a uniform random start of radius 0.4 is about 0.23 rough, of radius 0.1 about 0.065

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        m = quadrant_means(x)
        rough = (roughness(x) > self.ROUGH)[:, None]
        return torch.where(rough, self.scale * torch.round(m * 64) / 64, self.scale * m)


class NoisyQuadrant(QuadrantLinear):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.scale * quadrant_means(x + 0.05 * torch.randn_like(x))


class QuantizerFrontEnd(FixedFrontEnd):
    def transform(self, x: torch.Tensor) -> torch.Tensor:
        return _quantize(quadrant_means(x))

    def smooth_transform(self, x: torch.Tensor) -> torch.Tensor:
        return quadrant_means(x)


class FrontEndModel(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.front = QuantizerFrontEnd()
        self.scale = nn.Parameter(torch.tensor(10.0))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.scale * self.front(x)


def masked_front_end_model() -> FrontEndModel:
    return FrontEndModel().eval()


class WaveletQuadrant(nn.Module):
    """The package's WaveletFrontEnd (db1, L=2, half of W zeroed, approximation exempt) + a fixed head.

    On 8x8 images the four tokens are the four quadrants and a token's approximation coefficient is
    4 x the quadrant mean, so with the approximation always kept this model computes exactly
    :class:`QuadrantLinear`'s logits: an honest model behind a real wavelet front-end.
    """

    def __init__(self, zero_fraction: float = 0.5, exempt_approximation: bool = True) -> None:
        super().__init__()
        from robustbench_wave.models.wavelet import WaveletFrontEnd

        self.front = WaveletFrontEnd(8, 1, levels=2, wavelet="db1", zero_fraction=zero_fraction,
                                     exempt_approximation=exempt_approximation)  # fmt: skip
        self.scale = nn.Parameter(torch.tensor(2.5))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.scale * self.front(x)[:, :, 0]  # (B, T=4): approximation coefficient per token


def synthetic_records(
    model: str, robust: dict[tuple[str, str, str, str], int], *, n: int = 100, eps: float = 0.1
) -> pd.DataFrame:
    """Records (the evaluation's schema) in which, for each (grad_mode, attack, family, kind), the first
    ``k`` examples stay robust (so the per-example worst case is the minimum). Clean rows for every mode."""
    modes = sorted({m for m, *_ in robust})
    frames = []
    entries = [(m, "clean", "clean", "clean", n) for m in modes] + [(*key, k) for key, k in robust.items()]
    for mode, attack, family, kind, k in entries:
        correct = np.arange(n) < k
        frames.append(
            pd.DataFrame(
                {
                    "model": model,
                    "dataset": "synthetic",
                    "grad_mode": mode,
                    "attack": attack,
                    "family": family,
                    "kind": kind,
                    "threat": "none" if kind == "clean" else "Linf",
                    "eps": 0.0 if kind == "clean" else eps,
                    "backend": "builtin",
                    "example_id": np.arange(n),
                    "label": np.arange(n) % NUM_CLASSES,
                    "pred": np.where(correct, np.arange(n) % NUM_CLASSES, (np.arange(n) + 1) % NUM_CLASSES),
                    "correct": correct,
                    "norm": 0.0 if kind == "clean" else eps,
                    "attacked": True,
                    "correct_last": pd.array([None] * n, dtype="boolean"),
                    "loss_final": np.nan,
                }
            )
        )
    return pd.concat(frames, ignore_index=True)


def masking_spec(blocked: int = 90, exact: int = 5, bpda: int = 3, square: int = 40, transfer: int = 20):
    """A candidate whose robustness exists only under blocked gradients (shared attacks replicated per mode)."""
    spec = {
        ("blocked", "pgd_linf", "pgd", "white-box"): blocked,
        ("exact", "pgd_linf", "pgd", "white-box"): exact,
        ("bpda", "pgd_linf", "pgd", "white-box"): bpda,
    }
    for mode in ("exact", "blocked", "bpda"):
        spec[(mode, "square", "square", "black-box")] = square
        spec[(mode, "transfer", "transfer", "transfer")] = transfer
        spec[(mode, "noise_sign", "noise", "noise")] = 95
    return spec


def baseline_spec(pgd: int = 4, square: int = 30):
    return {
        ("exact", "pgd_linf", "pgd", "white-box"): pgd,
        ("exact", "square", "square", "black-box"): square,
        ("exact", "noise_sign", "noise", "noise"): 95,
    }


# ------------------------------------------------------------------------------------ per-check test cases
def attack_rows(
    attack: str,
    family: str,
    kind: str,
    eps: float,
    correct: Sequence[bool],
    attacked: Sequence[bool] | None = None,
    mode: str = "exact",
    last: Sequence[bool | None] | None = None,
) -> pd.DataFrame:
    """One attack's records of model "m" at one Linf eps (clean rows for family "clean")."""
    n = len(correct)
    return pd.DataFrame(
        {
            "model": "m",
            "dataset": "d",
            "grad_mode": mode,
            "attack": attack,
            "family": family,
            "kind": kind,
            "threat": "none" if family == "clean" else "Linf",
            "eps": eps,
            "backend": "builtin",
            "example_id": np.arange(n),
            "label": 0,
            "pred": 0,
            "correct": np.asarray(correct, dtype=bool),
            "norm": eps,
            "attacked": np.ones(n, bool) if attacked is None else np.asarray(attacked, dtype=bool),
            "correct_last": pd.array([None] * n if last is None else list(last), dtype="boolean"),
            "loss_final": np.nan,
        }
    )


def clean_rows(n: int = 10, mode: str = "exact") -> pd.DataFrame:
    return attack_rows("clean", "clean", "clean", 0.0, [True] * n, mode=mode)


def _pgd(eps: float, correct: Sequence[bool], **kw: Any) -> pd.DataFrame:
    return attack_rows("pgd", "pgd", "white-box", eps, correct, **kw)


def _records(*frames: pd.DataFrame) -> CheckInputs:
    n = len(frames[0]) if frames else 10
    return CheckInputs(records=pd.concat([clean_rows(n), *frames], ignore_index=True))


def held(k: int, n: int = 20) -> list[bool]:
    """The first ``k`` of ``n`` examples held (correct), the rest broken."""
    return [True] * k + [False] * (n - k)


def _mode_gap_records() -> CheckInputs:
    """Blocked gradients keep 80%; BPDA keeps 10% and Square 40% (of 20): masked for 'blocked' (14 points
    blocked PGD holds fall to the others, none the other way), honest for 'bpda'."""
    clean = pd.concat([clean_rows(20, mode=m) for m in ("blocked", "bpda")])
    blocked = _pgd(0.1, held(16), mode="blocked")
    bpda = _pgd(0.1, held(2), mode="bpda")
    square = pd.concat(
        [attack_rows("square", "square", "black-box", 0.1, held(8), mode=m) for m in ("blocked", "bpda")]
    )
    return CheckInputs(records=pd.concat([clean, blocked, bpda, square], ignore_index=True))


def _on_model(
    model_cls: type[nn.Module], n: int = 16, eps: float = 0.15, steps: int = 4
) -> Callable[[], CheckInputs]:
    def build() -> CheckInputs:
        x, y = quadrant_data(n)
        return CheckInputs(model=model_cls().eval(), x=x, y=y, num_classes=NUM_CLASSES, eps=eps, steps=steps)

    return build


def _swept(
    model_cls: type[nn.Module], eps: float = 0.2, n: int = 16, steps: int = 5
) -> Callable[[], CheckInputs]:
    """The diagnostics' budget sweep (the subset's PGD at 0.5, 1 and 2 x ``eps``, no skip-broken) on a model."""

    def build() -> CheckInputs:
        from robustbench_wave.analysis.diagnostics import sweep_suite
        from robustbench_wave.evaluation import EvalSettings, evaluate

        x, y = quadrant_data(n)
        settings = EvalSettings(model_name="m", dataset=Info(), grad_modes=("exact",), skip_broken=False)
        sweep = evaluate(model_cls().eval(), x, y, sweep_suite(eps, steps=steps), settings, progress=False)
        return CheckInputs(sweep_records=sweep.records)

    return build


_BREAKS_FIRST_8 = [False] * 8 + [True] * 12  # 8 of 20 broken: enough for the paired test (2^-8 < 0.01)
_FGSM_BREAKS_8 = attack_rows("fgsm", "fgsm", "white-box", 0.1, _BREAKS_FIRST_8)
_NOISE_BREAKS_8 = attack_rows("noise_sign", "noise", "noise", 0.1, _BREAKS_FIRST_8)


def square_breaks_held(
    n: int = 500, square_share: float = 0.05, pgd_held: float = 0.6, mode: str = "exact", reverse: int = 0
) -> pd.DataFrame:
    """Records of a planted model: PGD holds the first ``pgd_held`` of ``n`` points, Square breaks
    ``square_share`` of them -- more than the 2% the pairwise checks tolerate at 5%, an honest attack pair's
    share at 1%. With ``reverse`` = 0 Square ran skip-broken (only on the points PGD held); otherwise on every
    point, holding ``reverse`` of those PGD broke (the reverse pairs the old McNemar rule let excuse it)."""
    held = round(pgd_held * n)
    breaks = round(square_share * held)
    pgd = _pgd(0.1, [i < held for i in range(n)], mode=mode)
    ran = [i < held for i in range(n)] if reverse == 0 else [True] * n
    correct = [breaks <= i < held + reverse for i in range(n)]
    square = attack_rows("square", "square", "black-box", 0.1, correct, ran, mode=mode)
    return pd.concat([clean_rows(n, mode=mode), pgd, square], ignore_index=True)


@dataclass(frozen=True)
class CheckCase:
    """A check's planted case (it must fail) and honest case (it must pass), each judged under a mode;
    ``params`` override the check's thresholds/settings (kept small so the tests stay fast); ``also_fire``
    are further planted inputs that must fail under ``fire_mode`` (another way to mask gradients)."""

    fire: Callable[[], CheckInputs]
    honest: Callable[[], CheckInputs]
    fire_mode: str | None = "exact"
    honest_mode: str | None = "exact"
    params: dict[str, Any] = field(default_factory=dict)
    also_fire: tuple[Callable[[], CheckInputs], ...] = ()


CHECK_CASES: dict[str, CheckCase] = {
    # FGSM breaks examples 0-7 which PGD misses (8 of 20, none the other way), vs PGD breaking them and more
    "iterative_beats_single_step": CheckCase(
        fire=lambda: _records(_FGSM_BREAKS_8, _pgd(0.1, [True] * 20)),
        honest=lambda: _records(_FGSM_BREAKS_8, _pgd(0.1, [False] * 12 + [True] * 8)),
    ),
    # accuracy 30% -> 60% from eps 0.1 to 0.2, vs 60% -> 30% (every point attacked at both budgets);
    # and a model whose PGD random start at a large budget lands in a zero-gradient trap (the budget sweep)
    "eps_monotone": CheckCase(
        fire=lambda: _records(_pgd(0.1, [True] * 3 + [False] * 7), _pgd(0.2, [True] * 6 + [False] * 4)),
        honest=lambda: _records(_pgd(0.1, [True] * 6 + [False] * 4), _pgd(0.2, [True] * 3 + [False] * 7)),
        also_fire=(_swept(RoughnessTrap),),
    ),
    # and Square breaking 5% of the 300 points PGD held (n = 500): above the tolerated 2% (one-sided binomial)
    "whitebox_beats_blackbox": CheckCase(
        fire=_mode_gap_records,
        honest=_mode_gap_records,
        fire_mode="blocked",
        honest_mode="bpda",
        also_fire=(lambda: CheckInputs(records=square_breaks_held(500, 0.05, mode="blocked")),),
    ),
    # noise breaks examples 0-7 which the white-box attack holds, vs the white-box attack breaking them too
    "whitebox_beats_noise": CheckCase(
        fire=lambda: _records(_NOISE_BREAKS_8, _pgd(0.1, [True] * 20)),
        honest=lambda: _records(_NOISE_BREAKS_8, _pgd(0.1, [False] * 12 + [True] * 8)),
    ),
    "gradient_mode_gap": CheckCase(
        fire=_mode_gap_records, honest=_mode_gap_records, fire_mode="blocked", honest_mode="bpda"
    ),
    # example 9's last iterate was misclassified yet the record says robust, vs silent successes counted
    "best_vs_last_iterate": CheckCase(
        fire=lambda: _records(_pgd(0.1, [False] * 5 + [True] * 5, last=[False] * 10)),
        honest=lambda: _records(
            _pgd(0.1, [False] * 5 + [True] * 5, last=[True] * 3 + [False] * 2 + [True] * 5)
        ),
    ),
    # zero gradients; and zero gradients where the random start alone would have broken the model
    "large_eps_to_chance": CheckCase(
        fire=_on_model(QuantizedQuadrant),
        honest=_on_model(QuadrantLinear),
        params={"steps": 5},
        also_fire=(_on_model(NoiseFragileQuadrant),),
    ),
    "attack_convergence": CheckCase(
        fire=_on_model(QuantizedQuadrant), honest=_on_model(QuadrantLinear), params={"more": 2}
    ),
    # zero gradients (a quantizer), and saturated logits whose cross-entropy gradient underflows
    "gradient_health": CheckCase(
        fire=_on_model(QuantizedQuadrant),
        honest=_on_model(QuadrantLinear),
        also_fire=(_on_model(SaturatedQuadrant),),
    ),
    "deterministic": CheckCase(
        fire=_on_model(NoisyQuadrant), honest=_on_model(QuadrantLinear), fire_mode=None, honest_mode=None
    ),
}
