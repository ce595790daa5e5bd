"""The low-frequency attack and the energy-removed measurement, against independent oracles.

Oracles: PyWavelets (the LL band), the closed-form optimal Linf attack on a linear model of quadrant means,
a high-frequency-only model that a low-frequency perturbation cannot move, and the orthogonality of the DWT
(white noise spreads its energy evenly over coefficients, so sparsification removes about the zeroed share).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import pywt
import torch
from torch import nn

from robustbench_wave.analysis.energy import energy_removed, energy_summary, sparsification_energy
from robustbench_wave.attacks import (
    GradSafe,
    LowFreqPGD,
    attack_mode,
    block_mean_project,
    lowfreq_projector,
    parse_suite,
    resolve_level,
    wavelet_ll_project,
)
from robustbench_wave.evaluation import evaluate
from robustbench_wave.evaluation import records as rec
from tests.support.masking_models import QuadrantLinear, WaveletQuadrant, quadrant_data, quadrant_means


def _lowfreq(
    model: nn.Module, x: torch.Tensor, y: torch.Tensor, *, eps: float, level: int, steps: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """The low-frequency attack on the PGD engine (step 2.5 eps / steps); returns (x_adv, still correct)."""
    attack = LowFreqPGD(eps=eps, norm="Linf", steps=steps, step_size=2.5 * eps / steps, level=level)
    with attack_mode(model):
        x_adv, _, _ = attack.run(GradSafe(model), x, y, torch.arange(len(x)))
        with torch.no_grad():
            return x_adv, model(x_adv).argmax(1) == y


def _pywt_ll_project(d: np.ndarray, level: int, wavelet: str) -> np.ndarray:
    coeffs = pywt.wavedec2(d, wavelet, mode="periodization", level=level)
    kept = [coeffs[0]] + [tuple(np.zeros_like(c) for c in detail) for detail in coeffs[1:]]
    return pywt.waverec2(kept, wavelet, mode="periodization")


@pytest.mark.parametrize("level", [1, 2])
def test_block_mean_is_the_haar_ll_band(level):
    d = torch.randn(2, 1, 16, 16, generator=torch.Generator().manual_seed(level), dtype=torch.float64)
    p = block_mean_project(d, level)
    oracle = _pywt_ll_project(d[0, 0].numpy(), level, "db1")
    np.testing.assert_allclose(p[0, 0].numpy(), oracle, atol=1e-10)
    torch.testing.assert_close(wavelet_ll_project(d, level, "db1"), p, atol=1e-10, rtol=0)
    torch.testing.assert_close(block_mean_project(p, level), p)  # idempotent
    assert abs(float(((d - p) * p).sum())) < 1e-9  # orthogonal projection


def test_wavelet_ll_projection_matches_pywavelets_for_coif1():
    d = torch.randn(1, 1, 32, 32, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    np.testing.assert_allclose(
        wavelet_ll_project(d, 2, "coif1")[0, 0].numpy(),
        _pywt_ll_project(d[0, 0].numpy(), 2, "coif1"),
        atol=1e-9,
    )


@pytest.mark.parametrize("norm, eps", [("Linf", 0.1), ("L2", 0.5)])
def test_lowfreq_projection_is_feasible_and_stays_in_the_band(norm, eps):
    gen = torch.Generator().manual_seed(0)
    x = torch.rand(4, 1, 16, 16, generator=gen)
    x[0, :, :4, :4] = 0.0  # a block touching the box
    delta = torch.randn(4, 1, 16, 16, generator=gen)
    out = lowfreq_projector(2, eps, norm)(delta, x)
    torch.testing.assert_close(block_mean_project(out, 2), out)  # block-constant
    assert float((x + out).min()) >= 0.0 and float((x + out).max()) <= 1.0
    size = out.flatten(1).abs().amax(1) if norm == "Linf" else out.flatten(1).norm(dim=1)
    assert bool((size <= eps + 1e-6).all())
    if norm == "Linf":  # exact projection: a feasible block-constant delta is left unchanged
        small = block_mean_project(torch.rand(4, 1, 16, 16, generator=gen) * 0.0 + 0.01, 2)
        torch.testing.assert_close(lowfreq_projector(2, eps, norm)(small, x.clamp(0.05, 0.95)), small)


def test_lowfreq_pgd_finds_the_optimal_attack_on_a_quadrant_model():
    """Level-2 blocks on 8x8 images are the quadrants, where the optimal Linf attack lives: lower the true
    quadrant by eps, raise the best other one by eps. It breaks a point iff margin < 2 eps (no box contact)."""
    x, y = quadrant_data(16)
    model = QuadrantLinear().eval()
    m = quadrant_means(x)
    true = m.gather(1, y[:, None]).squeeze(1)
    other = m.scatter(1, y[:, None], -1.0).amax(1)
    for eps in (0.05, 0.077, 0.15):
        x_adv, correct = _lowfreq(model, x, y, eps=eps, level=2, steps=20)
        oracle_robust = (true - other) > 2 * eps
        if eps == 0.077:
            assert 0 < int(oracle_robust.sum()) < len(y)  # the budget splits the points
        assert torch.equal(correct, oracle_robust), eps
        d = x_adv - x
        assert float(d.abs().max()) <= eps + 1e-6
        torch.testing.assert_close(block_mean_project(d, 2), d, atol=1e-6, rtol=0)


class _Checkerboard(nn.Module):
    """Two classes read only from the finest checkerboard pattern: invisible to block-constant perturbations."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h, w = x.shape[-2:]
        board = ((torch.arange(h)[:, None] + torch.arange(w)[None, :]) % 2 * 2 - 1).to(x)
        s = (x * board).flatten(1).sum(1)
        return torch.stack([s, -s], 1)


def test_lowfreq_attack_cannot_touch_high_frequencies():
    gen = torch.Generator().manual_seed(1)
    x = (0.5 + 0.05 * torch.randn(8, 1, 8, 8, generator=gen)).clamp(0, 1)
    model = _Checkerboard()
    y = model(x).argmax(1)
    x_adv, correct = _lowfreq(model, x, y, eps=0.3, level=1, steps=5)
    torch.testing.assert_close(model(x_adv), model(x), atol=1e-4, rtol=0)
    assert bool(correct.all())


def _lowfreq_suite(**params: object):
    return parse_suite(
        {
            "eps": {"default": {"Linf": [0.077, 0.15]}},
            "attack": [{"name": "lowfreq_pgd_linf", "family": "lowfreq-pgd", "threat": "Linf", **params}],
        }
    )


def test_lowfreq_suite_family_gets_the_evaluation_bookkeeping():
    """As a registered family the attack gets the record schema, the audit, skip-broken and batch invariance."""
    x, y = quadrant_data(12)
    model = QuadrantLinear().eval()
    y_wrong = y.clone()
    y_wrong[0] = (y[0] + 1) % 4  # one clean error: never attacked
    suite = _lowfreq_suite(steps=4, rel_step_size=0.5, level=2)
    a = evaluate(model, x, y_wrong, suite, batch_size=5, progress=False).records
    b = evaluate(model, x, y_wrong, suite, batch_size=12, progress=False).records
    assert list(a.columns) == rec.COLUMNS
    pd.testing.assert_frame_equal(a, b)
    low = a[a["family"] == "lowfreq-pgd"]
    assert set(low["attack"]) == {"lowfreq_pgd_linf"} and set(low["kind"]) == {"white-box"}
    first = low[low["example_id"] == 0]
    assert not first["attacked"].any() and not first["correct"].any()
    hit = low[low["attacked"]]
    assert bool((hit["norm"] <= hit["eps"] + 1e-6).all()) and hit["correct_last"].notna().all()
    # skip_broken: a point broken at 0.077 is not attacked again at 0.15
    by_eps = low.pivot(index="example_id", columns="eps", values="attacked")
    broken = low[(low["eps"] == 0.077) & low["attacked"] & ~low["correct"]]["example_id"]
    assert len(broken) and not by_eps.loc[broken, 0.15].any()


class _Patches(nn.Module):
    """A stand-in patch tokenizer: timm's ``PatchEmbed`` exposes ``patch_size`` as a pair."""

    def __init__(self, patch: int) -> None:
        super().__init__()
        self.embed = nn.Conv2d(1, 2, patch, stride=patch)
        self.embed.patch_size = (patch, patch)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.embed(x).flatten(1)


def test_auto_level_reads_the_model_and_otherwise_says_what_to_set():
    assert resolve_level(WaveletQuadrant(), "auto") == 2  # the wavelet front-end's levels
    assert resolve_level(_Patches(4), "auto") == 2  # log2 of the patch size
    assert resolve_level(_Patches(4), 1) == 1  # an explicit level wins
    for model in (QuadrantLinear(), _Patches(3)):
        with pytest.raises(ValueError, match="set `level = N` in the suite entry"):
            resolve_level(model, "auto")
    x, y = quadrant_data(4)  # 8x8 images: no band of 2^N blocks keeps 8x8 coefficients, so no level to take
    result = evaluate(QuadrantLinear(), x, y, _lowfreq_suite(steps=2), progress=False)
    assert "lowfreq_pgd_linf" not in set(result.records["attack"])  # skipped before any attack, and said why
    assert "set `level = N`" in result.meta["models"]["model"]["plan"]["not_applicable"]["lowfreq_pgd_linf"]


def test_energy_removed_oracles():
    x, _ = quadrant_data(8)
    # approximation exempt: a block-constant (LL-only) perturbation loses nothing to sparsification
    model = WaveletQuadrant(zero_fraction=0.5, exempt_approximation=True).eval()
    d = block_mean_project(torch.randn(8, 1, 8, 8, generator=torch.Generator().manual_seed(0)), 2) * 0.02
    energy = sparsification_energy(model, x, (x + d).clamp(0, 1))
    assert float(energy["energy_removed"].abs().max()) < 1e-6
    # nothing zeroed: nothing removed
    dense = WaveletQuadrant(zero_fraction=0.0).eval()
    noise = (x + 0.05 * torch.randn(8, 1, 8, 8, generator=torch.Generator().manual_seed(1))).clamp(0, 1)
    assert float(sparsification_energy(dense, x, noise)["energy_removed"].max()) < 1e-6


def test_energy_removed_table_compares_noise_and_attacks():
    x, y = quadrant_data(8)
    model = WaveletQuadrant(zero_fraction=0.75, exempt_approximation=False).eval()
    df = energy_removed(model, x, y, eps=0.03, model_name="w", steps=5)
    assert set(df["perturbation"]) == {"random_sign", "uniform", "gaussian_matched", "pgd", "lowfreq_pgd"}
    assert df["energy_removed"].between(0, 1).all()
    summ = energy_summary(df).set_index("perturbation")
    # the DWT is orthogonal, so white noise spreads evenly: removed share ~ zeroed share of the detail entries
    assert 0.5 < summ.loc["random_sign", "removed_mean"] < 0.95
    # the model reads only approximation coefficients, so its gradient-driven perturbation lives there
    assert summ.loc["pgd", "removed_mean"] < summ.loc["random_sign", "removed_mean"]
    matched = df[df["perturbation"] == "gaussian_matched"]["norm_l2"].to_numpy()
    pgd = df[df["perturbation"] == "pgd"]["norm_l2"].to_numpy()
    np.testing.assert_allclose(matched, pgd, rtol=0.05)  # same energy (up to clipping)
    with pytest.raises(ValueError, match="no wavelet front-end"):
        energy_removed(QuadrantLinear(), x, y, eps=0.03)
