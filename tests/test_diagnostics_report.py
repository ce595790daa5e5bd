"""Plots, the Markdown report (one run and several seeds) and ``finalize_run`` end to end on tiny models."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd
import pytest

from robustbench_wave.analysis.diagnostics import subset_records
from robustbench_wave.evaluation import records as rec
from robustbench_wave.reporting.markdown import REPORT_FILE, finalize_run, main, write_report
from robustbench_wave.reporting.plots import accuracy_curves, plot_energy_removed, write_figures
from tests.support.masking_models import (
    Info,
    QuadrantLinear,
    WaveletQuadrant,
    baseline_spec,
    masking_spec,
    quadrant_data,
    synthetic_records,
)


def _write_run(run_dir: Path, records: pd.DataFrame, **meta) -> Path:
    rec.write_records(records, run_dir / rec.RECORDS_FILE)
    rec.write_meta(
        {"dataset": {"name": "synthetic", "info": {"num_classes": 4}}, "n_examples": 100, **meta},
        run_dir / rec.META_FILE,
    )
    return run_dir


def _synthetic_run(run_dir: Path, blocked: int = 90) -> Path:
    records = pd.concat(
        [synthetic_records("wavelet", masking_spec(blocked=blocked), eps=e) for e in (0.05, 0.1)]
        + [synthetic_records("patch", baseline_spec(), eps=e) for e in (0.05, 0.1)],
        ignore_index=True,
    ).drop_duplicates(["model", "grad_mode", "attack", "eps", "example_id"])
    return _write_run(run_dir, records, models={"wavelet": {"train_seed": blocked}, "patch": {}})


def _links(text: str) -> list[str]:
    return re.findall(r"!\[[^\]]*\]\(([^)]+)\)", text)


def test_report_for_one_run(tmp_path):
    run = _synthetic_run(tmp_path / "run")
    path = write_report(run)
    assert path == run / REPORT_FILE
    text = path.read_text()
    for heading in (
        "## Verdict on the claim",
        "## Robust accuracy",
        "## Diagnostics",
        "## Figures",
        "## Set-up and provenance",
        "## Reproduce",
    ):
        assert heading in text
    assert "Under blocked gradients **wavelet** keeps 90.0%" in text
    assert "| Linf | worst-case | 0.05 |" in text and "±" in text  # CI cells
    links = _links(text)
    assert any("accuracy_vs_eps_Linf.png" in link for link in links)
    for link in links:  # relative links that resolve on GitHub
        assert not Path(link).is_absolute() and (run / link).is_file()
    saved = json.loads((run / "verdict.json").read_text())
    assert saved["categories"] == {"wavelet@Linf": "gradient masking"}


def test_report_for_several_seeds(tmp_path):
    runs = [_synthetic_run(tmp_path / f"seed-{i}", blocked=b) for i, b in enumerate((86, 90, 94))]
    path = write_report(runs)
    assert path == tmp_path / REPORT_FILE
    text = path.read_text()
    assert "90.0 ± 4.0%" in text and "3 training seeds" in text
    assert "mean ± sd of robust accuracy % over 3 runs" in text
    for link in _links(text):
        assert (tmp_path / link).is_file()
    assert main([str(r) for r in runs] + ["--out", str(tmp_path / "again.md"), "--no-figures"]) == 0
    assert "## Verdict" in (tmp_path / "again.md").read_text()


def test_plots_are_written(tmp_path):
    records = pd.concat([synthetic_records("m", baseline_spec(), eps=e) for e in (0.05, 0.1)])
    records = records.drop_duplicates(["model", "grad_mode", "attack", "eps", "example_id"])
    curves = accuracy_curves(records)
    at0 = curves[(curves["eps"] == 0.0)]
    assert at0["robust_accuracy"].tolist() == [1.0]  # eps = 0 is the clean accuracy
    paths = write_figures(
        tmp_path, curves=curves, histories={"m": {"exact:base": [0.1, 0.5, 0.6]}}, chance=0.25
    )
    assert [p.name for p in paths["accuracy"]] == ["accuracy_vs_eps_Linf.png"]
    assert paths["loss"][0].read_bytes()[:4] == b"\x89PNG"
    energy = pd.DataFrame({"model": "w", "perturbation": ["noise", "pgd"], "energy_removed": [0.8, 0.1]})
    assert plot_energy_removed(energy, tmp_path / "e.png").stat().st_size > 0
    assert not list(tmp_path.rglob("*.tmp"))  # atomic writes leave no temporaries


def test_finalize_run_end_to_end(tmp_path):
    """Patch-like and wavelet models with identical forward passes: blocked gradients make the wavelet look
    robust, BPDA/exact/Square break it like the patch model -- the report says gradient masking."""
    x, y = quadrant_data(16)
    models = {"patch": QuadrantLinear().eval(), "wavelet": WaveletQuadrant().eval()}
    frames = []
    for name, model in models.items():
        modes = ["exact"] if name == "patch" else ["exact", "blocked", "bpda"]
        for eps in (0.15, 0.3):  # headline eps = 0.15
            frames.append(
                subset_records(
                    model,
                    x,
                    y,
                    model_name=name,
                    dataset="synthetic",
                    eps=eps,
                    modes=modes,
                    steps=5,
                    square_queries=30,
                )
            )
    records = pd.concat(frames, ignore_index=True).drop_duplicates(
        ["model", "grad_mode", "attack", "eps", "example_id"]
    )
    run = _write_run(tmp_path / "run", records, models={"patch": {}, "wavelet": {}})
    path = finalize_run(
        run,
        models,
        x,
        y,
        Info(),
        n_diagnostics=16,
        diagnostics_steps=4,
        square_queries=30,
        lowfreq_steps=5,
        energy_n=8,
    )
    text = path.read_text()
    assert (run / "adaptive_records.csv.gz").is_file() and (run / "energy.csv").is_file()
    adaptive = rec.read_records(run / "adaptive_records.csv.gz")
    assert set(adaptive["attack"]) == {"lowfreq_pgd_linf"}
    assert set(adaptive.loc[adaptive["model"] == "wavelet", "grad_mode"]) == {"exact", "bpda"}
    # skip_broken bookkeeping: points PGD already broke at a budget are not attacked again
    pgd = records[(records["model"] == "patch") & (records["attack"] == "pgd_linf") & (records["eps"] == 0.3)]
    low = adaptive[(adaptive["model"] == "patch") & (adaptive["eps"] == 0.3)].set_index("example_id")
    broken = pgd.loc[pgd["attacked"] & ~pgd["correct"], "example_id"]
    assert len(broken) > 0 and not low.loc[broken, "attacked"].any()
    assert "lowfreq_pgd_linf" in text  # joined the comparison table
    diag = json.loads((run / "diagnostics.json").read_text())
    status = {d["model"]: d for d in diag["models"]}
    assert status["patch"]["status"] == "reliable"
    assert "gradient_health[blocked]" in status["wavelet"]["status"]
    assert status["wavelet"]["trusted_modes"] == ["bpda", "exact"]
    verdict = json.loads((run / "verdict.json").read_text())
    assert verdict["categories"]["wavelet@Linf"] == "gradient masking"
    assert "Under blocked gradients **wavelet** keeps 100.0%" in text
    for link in _links(text):
        assert (run / link).is_file()


def test_finalize_run_rejects_misaligned_images(tmp_path):
    x, y = quadrant_data(8)
    records = subset_records(
        QuadrantLinear().eval(),
        x,
        y,
        model_name="patch",
        dataset="s",
        eps=0.1,
        modes=["exact"],
        steps=2,
        square_queries=0,
    )
    run = _write_run(tmp_path / "run", records)
    with pytest.raises(ValueError, match="labels disagree"):
        finalize_run(run, {"patch": QuadrantLinear()}, x, (y + 1) % 4, Info())
    with pytest.raises(ValueError, match="no records"):
        finalize_run(run, {"other": QuadrantLinear()}, x, y, Info())
