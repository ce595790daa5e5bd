"""The attack command and ``benchmark`` honour a request or refuse it before any file is written (issue 30):
``--grad-modes`` (for every model, or per model as ``MODEL=MODES``) against what each model offers, ``--eps``
budgets instead of the suite's grid, and ``benchmark(eps=...)`` attacking the budget it reports."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

import robustbench_wave
from robustbench_wave import attack, attackrun
from robustbench_wave.attackrun.settings import DEFAULT_GRAD_MODES
from robustbench_wave.evaluation import metrics
from tests.support import external_models as ext

QUANTISED = "tests.support.autobpda_models:quantized_pooled_linear"  # automatic BPDA: exact and bpda


def _resolve(*extra: str, out: Path = Path("unused")):
    return attack.resolve(["--model", "patch", "--model", "wavelet", "--out", str(out), *extra])


def test_per_model_grad_modes_are_parsed_and_kept_in_the_configuration() -> None:
    settings, _, suite = _resolve("--grad-modes", "exact", "--grad-modes", "wavelet=exact,blocked,bpda")
    request = settings.grad_modes  # the request itself, tuples of modes until config.json's one line
    assert request.modes_for("patch", "patch") == ("exact",)
    assert request.modes_for("wavelet", "wavelet") == ("exact", "blocked", "bpda")
    text = settings.to_config(suite, {})["grad_modes"]
    assert text == "exact;wavelet=exact,blocked,bpda"
    assert attackrun.parse_grad_modes(text) == request  # config.json's text reads back
    settings, _, _ = _resolve("--grad-modes", "wavelet=bpda", "--grad-modes", "wavelet=exact")
    request = settings.grad_modes
    assert request.modes_for("patch", "patch") is None  # not named: every mode it offers
    assert request.modes_for("wavelet", "wavelet") == ("bpda", "exact")


def test_no_grad_modes_keeps_the_default_and_its_configuration() -> None:
    settings, _, suite = _resolve()
    assert settings.grad_modes == attackrun.GradModeRequest()
    config = settings.to_config(suite, {})
    assert config["grad_modes"] == DEFAULT_GRAD_MODES == "exact,blocked,bpda"  # what config.json always held
    assert "reference" not in config["suite"]


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (("--grad-modes", "resnet=exact"), "names model\\(s\\) \\['resnet'\\] that are not attacked"),
        (("--grad-modes", "wavelet="), "names no gradient mode"),
        (("--grad-modes", "exact,magic"), "unknown --grad-modes"),
        (("--eps", "Linf=8"), "Linf budgets must lie in \\[0, 1\\]"),
        (("--eps", "Linf=0"), "must be > 0"),
        (("--eps", "0.1"), "THREAT=BUDGET"),
        (("--attacks", "fgsm", "--eps", "L2=0.5"), "has no attack of threat \\['L2'\\]"),
        (("--reference-eps", "Linf=0.1"), "give --eps too"),
        (("--eps", "Linf=0.1", "--reference-eps", "Linf=0.2"), "not among the --eps budgets"),
    ],
)
def test_requests_that_cannot_be_honoured_end_with_one_line(flags, message, tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match=message):
        _resolve(*flags, out=tmp_path)
    assert not any(tmp_path.iterdir())  # nothing written


def test_eps_sets_the_grid_of_the_threats_named_and_their_reference(tmp_path: Path) -> None:
    settings, _, suite = _resolve("--suite", "autoattack", "--eps", "Linf=2/255,8/255", "--eps", "L2=0.5")
    assert suite.resolved_eps("fashion-mnist") == {"Linf": [2 / 255, 8 / 255], "L2": [0.5]}
    assert suite.declared_reference("fashion-mnist") == {"Linf": 8 / 255, "L2": 0.5}
    _, _, linf_only = _resolve(
        "--suite", "autoattack", "--eps", "Linf=4/255", "--reference-eps", "Linf=4/255"
    )
    assert {a.threat for a in linf_only.attacks} == {"none", "Linf"}  # L2 not asked for: not run
    _, _, plain = _resolve("--suite", "autoattack")
    assert settings.to_config(suite, {})["suite"] != settings.to_config(plain, {})["suite"]  # another config


def test_help_documents_the_per_model_form_and_the_budgets(capsys) -> None:
    with pytest.raises(SystemExit):
        attack.main(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "MODEL=MODES to one model" in text and "refused before any attack" in text
    assert "--eps THREAT=EPS" in text and "Only the threats named are run" in text


@pytest.mark.slow  # loads the synthetic test images and builds the factory (seconds)
def test_blocked_on_an_automatic_bpda_model_is_refused_before_any_write(tmp_path: Path) -> None:
    weights = tmp_path / "w.safetensors"
    ext.save_weights({f"1.{k}": v for k, v in ext.pooled_linear(10).state_dict().items()}, str(weights))
    out = tmp_path / "out"
    args = ["--model", QUANTISED, "--weights", str(weights), "--dataset", "synthetic", "--n-examples", "8"]
    args += [
        "--suite",
        "smoke",
        "--attacks",
        "fgsm",
        "--surrogate",
        "none",
        "--out",
        str(out),
        "--no-progress",
    ]
    for modes in ("blocked", "exact,blocked,bpda"):  # alone, and mixed with the modes it offers
        with pytest.raises(
            SystemExit,
            match=r"does not offer gradient mode\(s\) \['blocked'\]; it offers \['exact', 'bpda'\]",
        ):
            attack.main([*args, "--grad-modes", modes])
    assert not out.exists() or not any(out.rglob("*.json"))


@pytest.mark.slow  # three small runs of one attack (~10 s)
def test_benchmark_attacks_the_budget_it_reports() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.AvgPool2d(4), nn.Flatten(), nn.Linear(64, 10))
    kw = dict(
        n_examples=16, dataset="synthetic", suite="smoke", device="cpu", surrogate="none", diagnostics=False
    )
    kw |= {"attacks": ["fgsm"]}  # the smoke suite's grid is Linf 0.03 and 0.1: 8/255 is not on it
    result = robustbench_wave.benchmark(model, eps="8/255", **kw)
    rows = result.records[result.records["model"] == result.model]
    assert sorted(set(rows["eps"])) == [0.0, 8 / 255] and result.eps == 8 / 255
    assert result.robust_accuracy == metrics.robust_accuracy(rows, "Linf", 8 / 255)[0]
    assert result.robust_accuracy_at(8 / 255) == result.robust_accuracy
    for eps in (0.01, 0.03, 0.1):  # below the grid (the clean accuracy, before), and the suite's own budgets
        with pytest.raises(ValueError, match="not evaluated"):
            result.robust_accuracy_at(eps)
    with pytest.raises(ValueError, match="does not offer gradient mode"):
        robustbench_wave.benchmark(model, grad_modes=["blocked"], **kw)
    tiny = robustbench_wave.benchmark(model, eps=[0.001, "1/100"], **kw)  # below the old grid: attacked
    assert set(tiny.records["eps"]) == {0.0, 0.001, 0.01}
    assert tiny.eps == 0.01  # the largest, carried by meta.json (the grid's lower middle would be 0.001)
