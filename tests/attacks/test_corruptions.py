"""Common corruptions (the ``corruption`` family, attacks/corruptions.toml): operators against known answers,
determinism independent of batch and shard, the mCE arithmetic on hand-made records, corruption rows kept out
of every worst case, and the gray and colour paths end to end through the attack and report commands."""

from __future__ import annotations

import colorsys
import io
import itertools
import math

import numpy as np
import pandas as pd
import pytest
import torch
from PIL import Image
from torch import nn

from robustbench_wave import attack, report
from robustbench_wave.attacks import load_suite, parse_suite
from robustbench_wave.attacks.corruptions import (
    JPEG_QUALITY,
    box_pixelate,
    clipped_zoom,
    corrupt,
    corruption_generators,
    disk_kernel,
    list_corruptions,
    motion_taps,
    pixelate_sizes,
    plasma_fractal,
)
from robustbench_wave.attacks.suite import SUITE_DIR
from robustbench_wave.data import load_split, to_float
from robustbench_wave.evaluation import EvalSettings, evaluate
from robustbench_wave.evaluation import records as rec
from robustbench_wave.evaluation.metrics import (
    corruption_accuracy,
    corruption_errors,
    corruption_summary,
    summarize,
)
from robustbench_wave.evaluation.records import read_run
from robustbench_wave.training import checkpoint
from tests.support.attack_models import ToyFrontEnd, template_data, trained_patch_model

SEVERITIES = (1, 2, 3, 4, 5)
RANDOM = {"gaussian_noise", "shot_noise", "impulse_noise", "motion_blur", "fog", "elastic_transform"}


def _images(channels: int, n: int = 16) -> torch.Tensor:
    """Smooth-ish natural-like test images: the synthetic gratings (gray or colour)."""
    images, _, _ = load_split("synthetic" if channels == 1 else "synthetic-rgb", "test")
    return to_float(images[:n])


def _run(x: torch.Tensor, name: str, severity: int, ids: torch.Tensor | None = None, seed: int = 0):
    ids = torch.arange(len(x)) if ids is None else ids
    return corrupt(x, name, severity, corruption_generators(seed, name, ids, severity))


# ------------------------------------------------------------------------------------------------ operators
def test_the_twelve_corruptions_in_hendrycks_order() -> None:
    assert list_corruptions() == [
        "gaussian_noise", "shot_noise", "impulse_noise", "defocus_blur", "motion_blur", "zoom_blur", "fog",
        "brightness", "contrast", "elastic_transform", "pixelate", "jpeg_compression",
    ]  # fmt: skip


@pytest.mark.parametrize("channels", [1, 3])
@pytest.mark.parametrize("name", list_corruptions())
def test_shapes_dtype_and_range_for_gray_and_colour(name: str, channels: int) -> None:
    x = _images(channels, 6)
    for severity in SEVERITIES:
        out = _run(x, name, severity)
        assert out.shape == x.shape and out.dtype == x.dtype and torch.isfinite(out).all()
        assert out.min() >= 0 and out.max() <= 1
        assert not torch.equal(out, x)


def test_brightness_matches_the_hsv_round_trip_of_colorsys() -> None:
    """V + c in HSV (skimage in Hendrycks' code; colorsys here, the same model), on random colours and black."""
    g = torch.Generator().manual_seed(0)
    x = torch.rand(1, 3, 4, 4, generator=g)
    x[0, :, 0, 0] = 0.0  # black: V = 0
    for severity, c in zip(SEVERITIES, (0.05, 0.1, 0.15, 0.2, 0.3)):
        out = corrupt(x, "brightness", severity)
        for i in range(4):
            for j in range(4):
                h, s, v = colorsys.rgb_to_hsv(*x[0, :, i, j].tolist())
                want = colorsys.hsv_to_rgb(h, s, min(v + c, 1.0))
                assert out[0, :, i, j].tolist() == pytest.approx(want, abs=1e-6)
    gray = torch.full((1, 1, 2, 2), 0.5)
    assert torch.allclose(corrupt(gray, "brightness", 5), torch.full_like(gray, 0.8))
    assert torch.equal(corrupt(torch.full((1, 1, 2, 2), 0.9), "brightness", 5), torch.ones(1, 1, 2, 2))


def test_contrast_on_constant_and_two_valued_images() -> None:
    const = torch.full((2, 3, 8, 8), 0.3)
    for severity in SEVERITIES:
        assert torch.allclose(corrupt(const, "contrast", severity), const)
    x = torch.zeros(1, 1, 4, 4)
    x[..., :2, :] = 1.0  # mean 0.5
    for severity, c in zip(SEVERITIES, (0.75, 0.5, 0.4, 0.3, 0.15)):
        out = corrupt(x, "contrast", severity)
        assert out[0, 0, 0, 0].item() == pytest.approx(0.5 + 0.5 * c)
        assert out[0, 0, 3, 0].item() == pytest.approx(0.5 - 0.5 * c)


@pytest.mark.parametrize("channels", [1, 3])
def test_jpeg_uses_hendrycks_qualities_on_the_uint8_image(channels: int) -> None:
    assert JPEG_QUALITY == (80, 65, 58, 50, 40)
    x = _images(channels, 3)
    errors = []
    for severity, quality in zip(SEVERITIES, JPEG_QUALITY):
        out = corrupt(x, "jpeg_compression", severity)
        for k in range(3):  # PIL's round trip of the uint8 image, as make_cifar_c.jpeg_compression
            u8 = (x[k] * 255).round().to(torch.uint8).permute(1, 2, 0).numpy().squeeze()
            buf = io.BytesIO()
            Image.fromarray(u8).save(buf, format="JPEG", quality=quality)
            want = np.asarray(Image.open(io.BytesIO(buf.getvalue()))).reshape(32, 32, channels) / 255
            assert np.allclose(out[k].permute(1, 2, 0).numpy(), want, atol=1e-6)
        errors.append((out - x).abs().mean().item())
    assert errors == sorted(errors)
    const = torch.full((1, channels, 16, 16), 100 / 255)
    assert torch.allclose(corrupt(const, "jpeg_compression", 5), const, atol=1.5 / 255)


def test_pixelate_sizes_exactness_and_agreement_with_pil() -> None:
    assert [pixelate_sizes(32, 32, s) for s in SEVERITIES] == [
        (30, 30),
        (28, 28),
        (27, 27),
        (24, 24),
        (20, 20),
    ]
    blocky = torch.rand(2, 3, 16, 16).repeat_interleave(2, 2).repeat_interleave(2, 3)  # constant 2x2 blocks
    assert torch.allclose(box_pixelate(blocky, (16, 16)), blocky, atol=1e-6)
    const = torch.full((1, 1, 32, 32), 0.7)
    for severity in SEVERITIES:
        assert torch.allclose(corrupt(const, "pixelate", severity), const, atol=1e-6)
    x = _images(1, 2)  # PIL's own 2-D BOX resize of the float image, down and up
    for severity in SEVERITIES:
        small = pixelate_sizes(32, 32, severity)
        for k in range(2):
            img = Image.fromarray(x[k, 0].numpy())
            back = img.resize(small[::-1], Image.Resampling.BOX).resize((32, 32), Image.Resampling.BOX)
            ours = corrupt(x[k : k + 1], "pixelate", severity)[0, 0].numpy()
            assert np.allclose(ours, np.clip(np.asarray(back), 0, 1), atol=1e-5)


def test_defocus_kernel_and_blurs_keep_a_constant_image() -> None:
    k = disk_kernel(0.3, 0.4)  # a one-pixel disk: its anti-aliasing is the 3x3 Gaussian of sigma 0.4
    g = torch.exp(-torch.tensor([1.0, 0.0, 1.0]) / (2 * 0.4**2))
    assert k.shape == (3, 3) and torch.allclose(k, torch.outer(g, g) / g.sum() ** 2, atol=1e-6)
    for radius, alias in ((0.3, 0.4), (0.4, 0.5), (0.5, 0.6), (1, 0.2), (1.5, 0.1)):
        k = disk_kernel(radius, alias)
        assert k.sum().item() == pytest.approx(1.0, abs=1e-6) and torch.equal(k, k.flip(0).T.flip(1).T)
    const = torch.full((3, 2, 32, 32), 0.4)
    for name in ("defocus_blur", "motion_blur", "zoom_blur", "elastic_transform"):
        for severity in SEVERITIES:
            assert torch.allclose(_run(const, name, severity, torch.arange(3)), const, atol=1e-5), name


def test_motion_kernels_follow_imagemagick_and_spread_with_severity() -> None:
    params = ((6, 1.0), (6, 1.5), (6, 2.0), (8, 2.0), (9, 2.5))
    spreads = []
    for radius, sigma in params:
        w, off = motion_taps(radius, sigma, torch.tensor([0.0, 90.0]))
        i = torch.arange(len(w), dtype=torch.float64)
        assert len(w) == 2 * radius + 1 and w.sum().item() == pytest.approx(1.0)
        assert torch.allclose(
            w, torch.exp(-(i**2) / (2 * sigma**2)) / torch.exp(-(i**2) / (2 * sigma**2)).sum()
        )
        assert torch.equal(off[0, :, 0], i.long()) and not off[0, :, 1].any()  # angle 0: along +x
        assert torch.equal(off[1, :, 1], i.long()) and not off[1, :, 0].any()  # angle 90: along +y
        spreads.append(float((w * i**2).sum()))
    assert spreads == sorted(spreads) and len(set(spreads)) == 5


def test_zoom_factors_and_identity_zoom() -> None:
    x = _images(3, 2)
    assert torch.equal(clipped_zoom(x, 1.0), x)
    # np.arange's float end as in Hendrycks' code: 1.06 and 1.11 are included (7 and 12 zooms)
    assert [len(np.arange(1, s, 0.01)) for s in (1.06, 1.11, 1.16, 1.21, 1.26)] == [7, 12, 16, 21, 26]


def test_noise_statistics() -> None:
    x = torch.full((64, 3, 32, 32), 0.5)
    for severity, c in zip(SEVERITIES, (0.04, 0.06, 0.08, 0.09, 0.10)):
        d = _run(x, "gaussian_noise", severity) - x
        assert d.std().item() == pytest.approx(c, rel=0.02) and abs(d.mean().item()) < 1e-3
    for severity, c in zip(SEVERITIES, (500, 250, 100, 75, 50)):  # Poisson(c x) / c: variance x / c
        d = _run(x, "shot_noise", severity) - x
        assert d.var().item() == pytest.approx(0.5 / c, rel=0.03) and abs(d.mean().item()) < 2e-3
    for severity, c in zip(SEVERITIES, (0.01, 0.02, 0.03, 0.05, 0.07)):
        out = _run(x, "impulse_noise", severity)
        changed = out != x
        assert changed.float().mean().item() == pytest.approx(c, rel=0.06)
        assert set(out[changed].unique().tolist()) == {0.0, 1.0}
        assert (out[changed] == 1).float().mean().item() == pytest.approx(0.5, abs=0.03)


def test_plasma_fractal_range_and_determinism() -> None:
    a = plasma_fractal(32, 3.0, torch.Generator().manual_seed(5))
    b = plasma_fractal(32, 3.0, torch.Generator().manual_seed(5))
    assert torch.equal(a, b) and a.min().item() == 0.0 and a.max().item() == 1.0
    assert not torch.equal(a, plasma_fractal(32, 3.0, torch.Generator().manual_seed(6)))


@pytest.mark.parametrize("channels", [1, 3])
def test_distortion_grows_with_severity(channels: int) -> None:
    """Mean ||corrupted - clean|| rises with severity for every corruption, with two exceptions of
    Hendrycks' parameters: motion blur's severities 3 and 4 share sigma 2 (a longer, near-zero tail: its
    kernels spread further, tested above; measured on isotropic noise, as the blur's random angle decides
    how much it changes a grating), and elastic trades a shrinking affine jitter (8% -> 3% of the
    size) for a growing elastic part, so its plain distance falls."""
    x = _images(channels, 32)
    for name in list_corruptions():
        dist = [(_run(x, name, s) - x).flatten(1).norm(dim=1).mean().item() for s in SEVERITIES]
        if name == "elastic_transform":
            assert min(dist) > 0
        elif name == "motion_blur":  # the random angle matters on gratings: isotropic noise images instead
            noise = torch.rand(32, channels, 32, 32, generator=torch.Generator().manual_seed(0))
            dist = [(_run(noise, name, s) - noise).flatten(1).norm(dim=1).mean().item() for s in SEVERITIES]
            assert dist[0] < dist[1] < dist[2] < dist[4] and dist[3] > 0.98 * dist[2], dist
        else:
            assert all(a < b for a, b in itertools.pairwise(dist)), (name, dist)


# ---------------------------------------------------------------------------------------------- determinism
@pytest.mark.parametrize("name", list_corruptions())
def test_deterministic_and_independent_of_batch_and_order(name: str) -> None:
    x = _images(3, 12)
    ids = torch.arange(100, 112)
    whole = _run(x, name, 3, ids)
    assert torch.equal(whole, _run(x, name, 3, ids))
    parts = torch.cat([_run(x[:5], name, 3, ids[:5]), _run(x[5:], name, 3, ids[5:])])
    single = torch.cat([_run(x[i : i + 1], name, 3, ids[i : i + 1]) for i in range(12)])
    assert torch.equal(whole, parts) and torch.equal(whole, single)
    perm = torch.randperm(12, generator=torch.Generator().manual_seed(1))
    assert torch.equal(_run(x[perm], name, 3, ids[perm]), whole[perm])
    if name in RANDOM:  # the seed, the example id and the severity all change the draws
        assert not torch.equal(whole, _run(x, name, 3, ids, seed=1))
        assert not torch.equal(whole, _run(x, name, 3, ids + 1))


@pytest.mark.slow
def test_records_do_not_depend_on_batch_size_or_sharding() -> None:
    model = trained_patch_model()
    x, y = template_data(24, seed=3)
    kw = {"progress": False}
    patch = EvalSettings(model_name="patch")
    a = evaluate(model, x, y, "corruptions", patch, batch_size=7, **kw).records
    b = evaluate(model, x, y, "corruptions", patch, batch_size=24, **kw).records
    pd.testing.assert_frame_equal(a, b)
    shards = [  # two shards of whole examples, merged by id: the records of one process
        evaluate(model, x[s], y[s], "corruptions", patch, example_ids=torch.arange(24)[s], **kw).records
        for s in (slice(0, 11), slice(11, 24))
    ]
    merged = pd.concat(shards).sort_values(["attack", "eps", "example_id"], kind="stable")
    pd.testing.assert_frame_equal(
        merged.reset_index(drop=True),
        a.sort_values(["attack", "eps", "example_id"], kind="stable").reset_index(drop=True),
    )


# --------------------------------------------------------------------------------------------- the suite
def test_the_suite_and_its_validation() -> None:
    suite = load_suite("corruptions")
    entries = suite.attacks[1:]
    assert [e.params["corruption"] for e in entries] == list_corruptions()
    assert {e.threat for e in entries} == {"corruption"} and {e.kind for e in entries} == {"corruption"}
    assert all(suite.entry_eps(e, "cifar10") == (1.0, 2.0, 3.0, 4.0, 5.0) for e in entries)

    def parse(eps: list, **entry: str) -> None:
        parse_suite(
            {
                "eps": {"default": {"corruption": eps}},
                "attack": [{"name": "c", "family": "corruption", **entry}],
            }
        )

    parse([1, 5], corruption="fog")
    for bad in ([0.5], [6], [0]):
        with pytest.raises(ValueError, match="severities"):
            parse(bad, corruption="fog")
    with pytest.raises(ValueError, match="choose one of"):
        parse([1], corruption="frost")
    with pytest.raises(ValueError, match="supports threats"):
        parse([1], corruption="fog", threat="Linf")
    with pytest.raises(ValueError, match="supports threats"):
        parse_suite(
            {
                "eps": {"default": {"corruption": [1]}},
                "attack": [
                    {"name": "n", "family": "noise", "distribution": "uniform", "threat": "corruption"}
                ],
            }
        )


# ------------------------------------------------------------------------------------------------- metrics
def _frame(
    model: str, attack: str, eps: float, correct: list[bool], kind: str = "corruption"
) -> pd.DataFrame:
    threat = {"clean": "none", "corruption": "corruption", "white-box": "Linf"}[kind]
    n = len(correct)
    return rec.make_frame(
        {
            "model": model, "dataset": "d", "grad_mode": "exact", "attack": attack,
            "family": {"clean": "clean", "corruption": "corruption", "white-box": "pgd"}[kind], "kind": kind,
            "threat": threat, "eps": eps, "backend": "builtin", "example_id": np.arange(n), "label": 0,
            "pred": np.where(correct, 0, 1), "correct": np.array(correct), "norm": 0.0, "attacked": True,
            "correct_last": None, "loss_final": 0.0,
        },
        n,
    )  # fmt: skip


def _records(spec: dict[str, dict[str, list[int]]], clean: dict[str, int], n: int = 10) -> pd.DataFrame:
    """Hand-made records: per model, clean errors and, per corruption, the errors at severities 1, 2, ..."""
    frames = []
    for model, corr in spec.items():
        frames.append(_frame(model, "clean", 0.0, [i >= clean[model] for i in range(n)], "clean"))
        for name, errors in corr.items():
            for sev, k in enumerate(errors, start=1):
                frames.append(_frame(model, name, float(sev), [i >= k for i in range(n)]))
    return rec.concat(frames)


def test_mce_arithmetic_on_hand_made_records() -> None:
    # errors out of 10 at severities 1, 2: baseline patch a: 2, 4 (sum 6); b: 1, 3 (sum 4); clean 1 error
    records = _records(
        {"patch": {"a": [2, 4], "b": [1, 3]}, "wavelet": {"a": [3, 6], "b": [1, 1]}},
        {"patch": 1, "wavelet": 0},
    )
    acc = corruption_accuracy(records)
    zero = acc[acc["severity"] == 0]
    assert set(zero["accuracy"][zero["model"] == "patch"]) == {0.9}
    assert set(zero["accuracy"][zero["model"] == "wavelet"]) == {1.0}
    ce = corruption_errors(acc).set_index(["model", "corruption"])
    assert ce.loc[("patch", "a"), "ce"] == pytest.approx(1.0)
    assert ce.loc[("wavelet", "a"), "ce"] == pytest.approx(0.9 / 0.6)  # (0.3 + 0.6) / (0.2 + 0.4)
    assert ce.loc[("wavelet", "b"), "ce"] == pytest.approx(0.2 / 0.4)
    # relative: sum_s (E - E_clean): wavelet a 0.9 - 0; patch a 0.6 - 2 * 0.1 = 0.4
    assert ce.loc[("wavelet", "a"), "relative_ce"] == pytest.approx(0.9 / 0.4)
    assert ce.loc[("wavelet", "b"), "relative_ce"] == pytest.approx(0.2 / 0.2)
    summary = corruption_summary(records).set_index("model")
    assert summary.loc["wavelet", "mce"] == pytest.approx((1.5 + 0.5) / 2)
    assert summary.loc["wavelet", "relative_mce"] == pytest.approx((2.25 + 1.0) / 2)
    assert summary.loc["wavelet", "mean_corruption_accuracy"] == pytest.approx(
        1 - (0.3 + 0.6 + 0.1 + 0.1) / 4
    )
    assert summary.loc["patch", "mce"] == pytest.approx(1.0) and set(summary["baseline"]) == {"patch"}
    # another baseline; one whose error is zero leaves that corruption's CE undefined (not counted)
    other = corruption_errors(acc, "wavelet").set_index(["model", "corruption"])
    assert other.loc[("patch", "a"), "ce"] == pytest.approx(0.6 / 0.9)
    clean_b = _records(
        {"patch": {"a": [2, 4], "b": [1, 3]}, "w": {"a": [1, 1], "b": [0, 0]}}, {"patch": 1, "w": 0}
    )
    s = corruption_summary(clean_b, "w").set_index("model")
    assert s.loc["patch", "corruptions"] == 1 and s.loc["patch", "mce"] == pytest.approx(0.6 / 0.2)
    with pytest.raises(ValueError, match="baseline"):
        corruption_errors(acc, "vit")


def test_corruption_rows_never_enter_the_worst_case() -> None:
    base = rec.concat(
        [
            _frame("m", "clean", 0.0, [True] * 4, "clean"),
            _frame("m", "pgd", 0.1, [True, False, True, True], "white-box"),
        ]
    )
    broken = rec.concat([base, _frame("m", "fog", 1.0, [False] * 4), _frame("m", "fog", 2.0, [False] * 4)])
    pd.testing.assert_frame_equal(summarize(broken), summarize(base))


def test_corruptions_neither_skip_nor_mark_points_in_an_evaluation() -> None:
    """A corruption before an L∞ attack changes none of its rows; every example (clean errors included) is
    corrupted; the rows sit under the first gradient mode only."""
    model = nn.Sequential(ToyFrontEnd(), nn.Flatten(), nn.Linear(64, 3)).eval()
    torch.manual_seed(0)
    x, y = torch.rand(12, 1, 8, 8), torch.randint(0, 3, (12,))
    noise = {"name": "u", "family": "noise", "distribution": "uniform", "draws": 2}
    corr = {"name": "fog", "family": "corruption", "corruption": "fog"}
    eps = {"default": {"Linf": [0.1, 0.3], "corruption": [1, 5]}}
    with_c = parse_suite({"eps": eps, "attack": [{"name": "clean", "family": "clean"}, corr, noise]})
    without = parse_suite({"eps": eps, "attack": [{"name": "clean", "family": "clean"}, noise]})
    a = evaluate(model, x, y, with_c, progress=False).records
    b = evaluate(model, x, y, without, progress=False).records
    assert set(a["grad_mode"]) == {"exact", "blocked", "bpda"}
    pd.testing.assert_frame_equal(a[a["attack"] != "fog"].reset_index(drop=True), b)
    fog = a[a["attack"] == "fog"]
    assert set(fog["grad_mode"]) == {"exact"} and fog["attacked"].all() and len(fog) == 2 * len(x)


# ---------------------------------------------------------------------------------------- a trained model
def test_accuracy_falls_with_severity_and_severity_zero_is_clean() -> None:
    model = trained_patch_model()
    x, y = template_data(120, seed=7)
    records = evaluate(model, x, y, "corruptions", EvalSettings(model_name="patch"), progress=False).records
    acc = corruption_accuracy(records)
    clean = records.loc[records["attack"] == "clean", "correct"].mean()
    assert (acc.loc[acc["severity"] == 0, "accuracy"] == clean).all() and clean > 0.8
    mean = acc.groupby("severity")["accuracy"].mean()
    assert mean[5] < mean[3] < mean[1] <= mean[0] and mean[5] < mean[0] - 0.1
    by = acc.pivot(index="corruption", columns="severity", values="accuracy")
    assert (by[5] <= by[1]).sum() >= 11  # every corruption but (at most) elastic's affine-heavy severity 1


# --------------------------------------------------------------------------------- end to end, gray and colour
def _trained(channels: int, wavelet: bool) -> nn.Module:
    images, labels, _ = load_split("synthetic" if channels == 1 else "synthetic-rgb", "train")
    x, y = to_float(images[:1000]), torch.as_tensor(labels[:1000]).long()
    torch.manual_seed(0)
    if wavelet:  # a fixed front-end: three gradient modes, so the rows show corruptions under exact only
        model = nn.Sequential(ToyFrontEnd(), nn.AvgPool2d(2), nn.Flatten(), nn.Linear(4 * 8 * 8, 10))
    else:
        model = nn.Sequential(nn.AvgPool2d(4), nn.Flatten(), nn.Linear(channels * 64, 10))
    opt = torch.optim.Adam(model.parameters(), lr=0.02)
    for _ in range(30):
        opt.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
    return model.eval()


@pytest.fixture(scope="module")
def models() -> dict[tuple[str, str], nn.Module]:
    return {
        ("patch", "synthetic"): _trained(1, False),
        ("wavelet", "synthetic"): _trained(1, True),
        ("patch", "synthetic-rgb"): _trained(3, False),
        ("wavelet", "synthetic-rgb"): _trained(3, False),
    }


@pytest.mark.slow
@pytest.mark.parametrize("dataset", ["synthetic", "synthetic-rgb"])
def test_the_attack_command_runs_the_corruption_suite_gray_and_colour(
    dataset: str, models: dict, tmp_path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    def load_trained(name: str, data: str, results_dir: object = "results", seed: int = 0):  # type: ignore[no-untyped-def]
        return models[(name, data)], {"checkpoint_sha256": f"sha-{name}", "run_dir": f"runs/{name}"}

    monkeypatch.setattr(checkpoint, "load_trained", load_trained)
    args = [
        "--model", "patch", "--model", "wavelet", "--dataset", dataset, "--suite", "corruptions",
        "--n-examples", "12", "--out", str(tmp_path), "--no-progress", "--batch-size", "8", "--no-diagnostics",
        "--run-name", "run",
    ]  # fmt: skip
    assert attack.main(args) == 0
    out = capsys.readouterr().out
    assert "common corruptions" in out and "mCE" in out
    run = tmp_path / "attack" / dataset / "run"
    records, meta = read_run(run)
    corr = records[records["threat"] == "corruption"]
    assert len(corr) == 2 * 12 * 5 * 12 and set(corr["eps"]) == {1.0, 2.0, 3.0, 4.0, 5.0}
    assert set(corr["grad_mode"]) == {"exact"} and corr["attacked"].all()
    assert set(corr["attack"]) == set(list_corruptions()) and set(corr["kind"]) == {"corruption"}
    assert meta["dataset"]["eps"] == {"corruption": [1.0, 2.0, 3.0, 4.0, 5.0]}
    summary = pd.read_csv(run / "corruptions_summary.csv", index_col=[0, 1])
    assert summary.loc[("patch", "exact"), "mCE"] == pytest.approx(1.0)
    tidy = pd.read_csv(run / "corruptions.csv")
    assert len(tidy) == 2 * 12 * 6 and (run / "corruptions.tex").read_text().count("mCE") >= 1
    if dataset == "synthetic":  # the same command again resumes every chunk: the same records
        before = (run / rec.RECORDS_FILE).read_bytes()
        assert attack.main(args) == 0 and capsys.readouterr().out.count("12 chunks resumed") == 2
        assert (run / rec.RECORDS_FILE).read_bytes() == before
    if dataset == "synthetic-rgb":  # the report (and its figure) of a corruption run: once is enough
        assert report.main([str(run), "--quiet"]) == 0
        text = (run / "report.md").read_text(encoding="utf-8")
        assert "## Common corruptions (average case)" in text and "figures/corruptions.png" in text
        assert (run / "figures" / "corruptions.png").stat().st_size > 0
    exact = records[(records["grad_mode"] == "exact") & (records["model"] == "patch")]
    clean = exact.loc[exact["attack"] == "clean", "correct"].mean()
    acc = tidy[(tidy["model"] == "patch") & (tidy["severity"] == 0)]["accuracy"]
    assert np.allclose(acc, clean) and not math.isnan(clean)


@pytest.mark.slow
def test_shard_jobs_merge_to_the_one_process_corruption_records(
    models: dict, tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--shard 0/2 and 1/2 (blocks of 4 examples), joined by ``report merge``: the one-process records."""

    def load_trained(name: str, data: str, results_dir: object = "results", seed: int = 0):  # type: ignore[no-untyped-def]
        return models[(name, data)], {"checkpoint_sha256": f"sha-{name}", "run_dir": f"runs/{name}"}

    monkeypatch.setattr(checkpoint, "load_trained", load_trained)
    suite = tmp_path / "corr.toml"
    text = (SUITE_DIR / "corruptions.toml").read_text(encoding="utf-8")
    suite.write_text(text.replace("[eps.default]", "[settings]\nrng_block = 4\n\n[eps.default]"), "utf-8")

    def args(out: str, *extra: str) -> list[str]:
        return [
            "--model", "patch", "--model", "wavelet", "--dataset", "synthetic", "--suite", str(suite),
            "--attacks", "gaussian_noise,motion_blur,fog,jpeg_compression", "--n-examples", "10",
            "--out", str(tmp_path / out), "--no-progress", "--batch-size", "3", "--no-diagnostics",
            "--run-name", "run", *extra,
        ]  # fmt: skip

    assert attack.main(args("single")) == 0
    for i in (1, 0):
        assert attack.main(args("sharded", "--shard", f"{i}/2")) == 0
    single, sharded = (tmp_path / out / "attack" / "synthetic" / "run" for out in ("single", "sharded"))
    assert report.main(["merge", str(sharded), "--no-diagnostics"]) == 0
    a, b = rec.read_records(sharded / rec.RECORDS_FILE), rec.read_records(single / rec.RECORDS_FILE)
    pd.testing.assert_frame_equal(a, b)  # the same corrupted images, so the same bits everywhere
