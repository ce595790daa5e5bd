"""Models from outside the zoo through the attack CLI (``--model MODULE:FACTORY`` / ``timm:ARCH`` with
``--weights``), checked against oracles computed here from the same weights on the same images: the clean
predictions, FGSM's closed-form point on a linear model, a model whose logits ignore the image (robust
accuracy = clean accuracy), timm's own model with its normalisation, the gradient-mode opt-in of a fixed
front-end, and the provenance that refuses a changed weights file. Bad references and weights are in
``tests/cli/test_bad_inputs.py``'s matrix."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import timm
import torch
import torch.nn.functional as F
from safetensors.torch import load_file

from robustbench_wave import attack
from robustbench_wave.data import load_split, to_float
from robustbench_wave.evaluation import metrics
from robustbench_wave.evaluation.records import read_run
from robustbench_wave.models.external import ExternalSpec, parse_normalize
from tests.support import external_models as ext

N = 16
LINEAR = "tests.support.external_models:pooled_linear"
BASE = [
    "--n-examples", str(N), "--suite", "smoke", "--batch-size", "8", "--no-progress", "--no-diagnostics",
    "--device", "cpu",
]  # fmt: skip


def _images(dataset: str, split: str, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    images, labels, _ = load_split(dataset, split)
    return to_float(images[:n]), labels[:n]


@pytest.fixture(scope="module")
def linear_weights(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Least-squares weights of the pooled linear model on 2000 training images (100% on the first test ones)."""
    path = tmp_path_factory.mktemp("external") / "linear.safetensors"
    ext.save_weights(ext.fit_pooled_linear(*_images("synthetic", "train", 2000)), str(path))
    return path


def _run(out: Path, *args: str, dataset: str = "synthetic") -> tuple[Path, pd.DataFrame, dict]:
    assert attack.main([*BASE, "--dataset", dataset, "--out", str(out), *args]) == 0
    (run,) = (out / "attack").glob("*/*")
    records, meta = read_run(run)
    return run, records, meta


def _linear(weights: Path) -> torch.nn.Module:
    model = ext.pooled_linear()
    model.load_state_dict(load_file(str(weights)))
    return model.eval()


def _assert_audited(records: pd.DataFrame) -> None:
    """Every attacked point within its budget (the records' own norms, re-checked here)."""
    attacked = records[records["attacked"] & (records["kind"] != "clean")]
    assert len(attacked) and (attacked["norm"] <= attacked["eps"] + 1e-6).all()


def _clean(records: pd.DataFrame, model: str) -> pd.DataFrame:
    return records[(records["attack"] == "clean") & (records["model"] == model)].sort_values("example_id")


def test_a_factory_model_matches_the_oracle_clean_and_under_fgsm(
    tmp_path: Path, linear_weights: Path
) -> None:
    run, records, meta = _run(
        tmp_path,
        "--model",
        LINEAR,
        "--weights",
        str(linear_weights),
        "--attacks",
        "fgsm",
        "--surrogate",
        "none",
    )
    slug = ExternalSpec(LINEAR).slug
    assert slug.startswith("ext-pooled_linear-") and run.name.startswith(slug)
    assert list(meta["models"]) == [slug] and meta["models"][slug]["grad_modes"] == ["exact"]
    x, y = _images("synthetic", "test", N)
    model = _linear(linear_weights)
    with torch.no_grad():
        clean_pred = model(x).argmax(1)
    clean = _clean(records, slug)
    assert clean["pred"].tolist() == clean_pred.tolist()
    assert clean["correct"].mean() == pytest.approx((clean_pred == y).float().mean().item())
    assert clean["correct"].mean() == 1.0  # so that FGSM has every point to attack
    broken = 0
    for eps in (0.03, 0.1):  # FGSM of a linear model: x + eps * sign(W^T (softmax - onehot)), clipped
        xr = x.clone().requires_grad_(True)
        (grad,) = torch.autograd.grad(F.cross_entropy(model(xr), y, reduction="sum"), xr)
        with torch.no_grad():
            oracle = model((x + eps * grad.sign()).clamp(0, 1)).argmax(1)
        rows = records[records["attack"].str.startswith("fgsm") & np.isclose(records["eps"], eps)]
        rows = rows[rows["attacked"]]
        assert len(rows) and rows["pred"].tolist() == oracle[rows["example_id"].tolist()].tolist()
        broken += int((~rows["correct"]).sum())
    assert broken > 0
    _assert_audited(records)


def test_a_model_that_ignores_its_input_keeps_its_clean_accuracy(
    tmp_path: Path, linear_weights: Path
) -> None:
    """Known answer: constant logits can be broken by no attack (the transfer one crafted on an external
    surrogate included), so robust accuracy equals clean accuracy at every budget of every threat."""
    _, y = _images("synthetic", "test", N)
    favourite = int(y[0])
    weights = tmp_path / "constant.safetensors"
    ext.save_weights({"logits": F.one_hot(torch.tensor(favourite), 10).float()}, str(weights))
    ref = "tests.support.external_models:constant"
    attacks = "noise_uniform,fgsm,pgd_linf,pgd_l2,square,transfer_pgd_linf"
    _, records, meta = _run(
        tmp_path, "--model", ref, "--weights", str(weights), "--attacks", attacks,
        "--surrogate", LINEAR, "--surrogate-weights", str(linear_weights),
    )  # fmt: skip
    slug = ExternalSpec(ref).slug
    assert meta["models"][slug]["surrogate"]["name"] == ExternalSpec(LINEAR).slug
    clean_acc = (y == favourite).float().mean().item()
    assert _clean(records, slug)["correct"].mean() == pytest.approx(clean_acc)
    attacked = records[records["attacked"]]
    assert set(attacked["pred"]) == {favourite}
    assert {"transfer_pgd_linf", "square", "pgd_l2"} <= set(attacked["attack"])
    for threat in ("Linf", "L2"):
        for eps in metrics.threat_eps(records, threat):
            assert metrics.robust_accuracy(records, threat, eps)[0] == pytest.approx(clean_acc)
    _assert_audited(records)


def test_a_timm_architecture_is_normalised_hashed_and_refused_when_its_weights_change(tmp_path: Path) -> None:
    torch.manual_seed(0)
    net = timm.create_model("test_vit", pretrained=False, num_classes=10, in_chans=3, img_size=32).eval()
    train_x, train_y = _images("synthetic-rgb", "train", 1000)
    ext.fit_timm_head(net, (train_x - 0.5) / 0.5, train_y)
    weights = tmp_path / "vit.safetensors"
    ext.save_weights(net.state_dict(), str(weights))
    args = ["--model", "timm:test_vit", "--weights", str(weights), "--attacks", "fgsm", "--surrogate", "none"]
    out = tmp_path / "out"
    run, records, meta = _run(out, *args, dataset="synthetic-rgb")
    x, _ = _images("synthetic-rgb", "test", N)
    with torch.no_grad():  # timm's pretrained_cfg: mean = std = 0.5 per channel
        oracle = net((x - 0.5) / 0.5).argmax(1)
    clean = _clean(records, "timm-test_vit")
    assert clean["pred"].tolist() == oracle.tolist() and clean["correct"].mean() > 0.5
    config = json.loads((run / "config.json").read_text())
    assert config["checkpoints"]["timm-test_vit"] == hashlib.sha256(weights.read_bytes()).hexdigest()
    assert config["external"]["timm:test_vit"]["weights"] == os.path.abspath(weights)
    spec = meta["models"]["timm-test_vit"]["model_spec"]
    assert spec["normalize"] == {"mean": [0.5] * 3, "std": [0.5] * 3}
    assert spec["kwargs"] == {"num_classes": 10, "in_chans": 3, "img_size": 32}
    _assert_audited(records)

    before = (run / "records.csv.gz").read_bytes()
    assert attack.main([*BASE, "--dataset", "synthetic-rgb", "--out", str(out), *args]) == 0  # resumes
    state = load_file(str(weights))
    state["head.bias"] = state["head.bias"] + 1.0
    ext.save_weights(state, str(weights))
    with pytest.raises(SystemExit, match="different configuration"):
        attack.main([*BASE, "--dataset", "synthetic-rgb", "--out", str(out), *args])
    assert (run / "records.csv.gz").read_bytes() == before


def test_a_fixed_front_end_opts_into_every_gradient_mode(tmp_path: Path) -> None:
    """The protocol: a FixedFrontEnd sub-module. Rounding's exact gradient is zero (as blocked's), so FGSM
    moves no point there; BPDA goes straight through and breaks some."""
    x, y = _images("synthetic", "train", 2000)
    state = {f"1.{k}": v for k, v in ext.fit_pooled_linear(torch.round(x * 3) / 3, y).items()}
    weights = tmp_path / "quantized.safetensors"
    ext.save_weights(state, str(weights))
    ref = "tests.support.external_models:quantized_linear"
    _, records, meta = _run(
        tmp_path, "--model", ref, "--weights", str(weights), "--attacks", "fgsm", "--surrogate", "none"
    )
    slug = ExternalSpec(ref).slug
    assert meta["models"][slug]["grad_modes"] == ["exact", "blocked", "bpda"]
    clean_acc = _clean(records, slug)["correct"].mean()
    assert clean_acc > 0.5
    rows = records[records["attack"] == "fgsm"]
    for mode in ("exact", "blocked"):
        in_mode = records[records["grad_mode"] == mode]
        assert (in_mode["attack"] == "clean").sum() == N
        for eps in metrics.threat_eps(records, "Linf"):
            assert metrics.robust_accuracy(in_mode, "Linf", eps)[0] == pytest.approx(clean_acc)
    assert not rows[(rows["grad_mode"] == "bpda") & rows["attacked"]]["correct"].all()
    _assert_audited(records)


def test_references_slugs_and_normalisation_values() -> None:
    here = Path.cwd()
    relative = ExternalSpec("tests/support/external_models.py:pooled_linear")
    absolute = ExternalSpec(f"{here}/tests/support/external_models.py:pooled_linear")
    assert relative.is_file and relative.slug == absolute.slug != ExternalSpec(LINEAR).slug
    assert (
        ExternalSpec("timm:vit_tiny_patch16_224.augreg_in21k").slug
        == "timm-vit_tiny_patch16_224.augreg_in21k"
    )
    assert (
        ExternalSpec(LINEAR).normalize_choice == "none" and ExternalSpec("timm:x").normalize_choice == "cfg"
    )
    for bad in ("timm:", "mod:", ":f", "mod:not-a-name", "mod:1f"):
        with pytest.raises(ValueError, match="neither timm:NAME nor MODULE:FACTORY"):
            ExternalSpec(bad)
    assert parse_normalize(" None ") == "none"
    assert parse_normalize("0.5,0.25") == "0.5,0.25"
    assert parse_normalize("0.4/0.5/0.6,1/2/3") == "0.4/0.5/0.6,1.0/2.0/3.0"
    for bad in ("0.5", "a,b", "0.5,0", "0.5,-1", "nan,1", "1,2,3"):
        with pytest.raises(ValueError, match="--normalize"):
            parse_normalize(bad)
