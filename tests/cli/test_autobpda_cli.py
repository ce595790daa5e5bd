"""A user's defended factory models through the attack command, unchanged (no ``FixedFrontEnd``): ``round(8x)/8``
in front of a linear model gets the ``bpda`` mode from the automatic scan, recorded in meta.json and the
report; the same quantiser through NumPy gets it too (the round trip linked by the identity); 2x2 pooling in
NumPy (another shape back) is reported as having no gradient path and keeps its gradient-free rows; the checklist runs in both modes (the smoke suite's low-frequency entry needs a patch size these
models do not have, so it is left out here)."""

from __future__ import annotations

from pathlib import Path

import pytest

from robustbench_wave import attack
from robustbench_wave.data import load_split, to_float
from robustbench_wave.evaluation.records import read_run
from robustbench_wave.models.external import ExternalSpec
from tests.support import external_models as ext
from tests.support.escalation_queries import fewer_square_queries

QUANTISED = "tests.support.autobpda_models:quantized_pooled_linear"
NUMPY = "tests.support.autobpda_models:numpy_pooled_linear"
HALVED = "tests.support.autobpda_models:numpy_halved_pooled_linear"


@pytest.mark.slow
def test_defended_factories_get_automatic_bpda_or_a_no_gradient_line(
    tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the halved model (no gradient path) is escalated: its Square at 500 queries, not 5,000 (two thirds of
    # the run's time; nothing here reads the escalation's rows), as tests/support/escalation_queries.py says
    fewer_square_queries(monkeypatch)
    images, labels, _ = load_split("synthetic", "train")
    fitted = ext.fit_pooled_linear(to_float(images[:2000]), labels[:2000])
    weights = tmp_path / "quantised.safetensors"
    ext.save_weights(
        {f"1.{k}": v for k, v in fitted.items()}, str(weights)
    )  # behind the parameter-free quantiser
    args = ["--dataset", "synthetic", "--suite", "smoke", "--n-examples", "16", "--batch-size", "16"]
    args += ["--attacks", "noise_uniform,fgsm,pgd_linf,pgd_l2,apgd_ce,square,apgd_t,fab_t"]
    args += ["--model", QUANTISED, "--weights", str(weights), "--model", NUMPY, "--weights", str(weights)]
    args += ["--model", HALVED, "--weights", str(weights)]
    args += ["--surrogate", "none", "--no-progress", "--device", "cpu", "--out", str(tmp_path / "out")]
    assert attack.main(args) == 0
    (run,) = (tmp_path / "out" / "attack").glob("*/*")
    records, meta = read_run(run)
    quantised, numpy, halved = (ExternalSpec(ref).slug for ref in (QUANTISED, NUMPY, HALVED))
    for linked in (quantised, numpy):
        assert meta["models"][linked]["grad_modes"] == ["exact", "bpda"]
        assert set(records[records["model"] == linked]["grad_mode"]) == {"exact", "bpda"}
    (trip,) = meta["models"][numpy]["gradient_path"]["round_trips"]
    assert trip["left"] == "Tensor.numpy" and trip["shape"] == [8, 1, 32, 32] and trip["scale"] == 1
    bpda = records[(records["model"] == numpy) & (records["grad_mode"] == "bpda")]
    quantised_bpda = records[(records["model"] == quantised) & (records["grad_mode"] == "bpda")]
    assert (
        bpda["correct"].tolist() == quantised_bpda["correct"].tolist()
    )  # the same gradient, the same numbers
    assert meta["models"][halved]["grad_modes"] == ["exact"]
    path = meta["models"][halved]["gradient_path"]
    assert not path["exact_gradient"] and not path["bpda_gradient"]
    gradient_free = records[
        (records["model"] == halved) & records["attack"].isin(["square", "noise_uniform"])
    ]
    assert gradient_free["attacked"].any()
    printed = capsys.readouterr().out  # the terminal shows what the scan found, at the default log level
    summary = meta["models"][quantised]["gradient_path"]["summary"]
    assert f"{quantised}: gradient path: {summary}; attacked under exact, bpda" in printed
    assert f"{halved}: gradient path: no gradient reaches the input" in printed
    report = (run / "report.md").read_text()
    assert f"  - gradient path: {meta['models'][quantised]['gradient_path']['summary']}" in report
    assert "  - gradient path: no gradient reaches the input" in report
