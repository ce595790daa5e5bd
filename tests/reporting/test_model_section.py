"""A report about the model the user brought: report.md opens with the external models (clean and worst case
per budget beside the baseline, the scan's findings and rules, the checklist's failures in words, the
verdict's sentences about them); the source paper's wavelet claim is worded only when a wavelet model is in
the run; meta.json is linked, not pasted."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from robustbench_wave.evaluation import metrics
from robustbench_wave.reporting.markdown import WAVELET_CLAIM, render_report, run_verdict
from robustbench_wave.reporting.model_section import accuracy_table, external_models, has_wavelet_model
from robustbench_wave.reporting.runs import RunFolder
from robustbench_wave.reporting.tables import MARK
from tests.support.masking_models import baseline_spec, synthetic_records

JPEG, CNN = "jpeg-q40", "cnn"
FAILED = {
    "name": "gradient_health",
    "grad_mode": "exact",
    "passed": False,
    "meaning": "all-zero input gradient",
    "numbers": {"zero_share": 1.0},
}
PATH = {
    "summary": "...",
    "findings": [
        {"kind": "leaves torch", "op": "Tensor.numpy", "rule": "identity across the round trip (BPDA)"},
        {"kind": "threshold", "op": "Tensor.eq", "rule": "unhandled"},
    ],
    "unhandled": ["Tensor.eq"],
    "round_trips": [{"left": "Tensor.numpy", "back": "torch.tensor", "shape": [1, 32, 32], "scale": 255.0}],
}


def _defended() -> dict:
    return {
        ("exact", "pgd_linf", "pgd", "white-box"): 80,
        ("bpda", "pgd_linf", "pgd", "white-box"): 12,
        ("exact", "square", "square", "black-box"): 30,
    }


def _run(tmp_path: Path, tokenizer: str | None = None) -> RunFolder:
    records = pd.concat(
        [synthetic_records(JPEG, _defended()), synthetic_records(CNN, baseline_spec())], ignore_index=True
    )
    models = {
        JPEG: {
            "external": {"reference": "nets.py:jpeg"},
            "grad_modes": ["exact", "bpda"],
            "gradient_path": PATH,
        },
        CNN: {"external": {"reference": "nets.py:cnn"}, "grad_modes": ["exact"]},
    }
    if tokenizer:
        models["wavelet"] = {"model_spec": {"tokenizer": tokenizer}}
    meta = {"models": models, "dataset": {"name": "synthetic"}}
    diagnostics = [
        {"model": JPEG, "checks": [FAILED], "status": "suspicious", "trusted_modes": ["bpda"]},
        {"model": CNN, "checks": [], "status": "reliable", "trusted_modes": ["exact"]},
    ]
    return RunFolder(tmp_path, records, meta, diagnostics)


def _report(run: RunFolder) -> str:
    v = run_verdict([run], num_classes=10, baseline=CNN)
    return render_report([run], v, "_no figures._", baseline=CNN, report_dir=run.path)


def test_the_report_opens_with_the_users_models(tmp_path: Path) -> None:
    run = _run(tmp_path)
    text = _report(run)
    titles = [line for line in text.splitlines() if line.startswith("## ")]
    assert titles[:2] == ["## Your models", "## Verdict"]
    first_screen = text[: text.index("## Verdict")]
    assert "`Tensor.numpy` [leaves torch]: identity across the round trip (BPDA)" in first_screen
    assert (
        "**unhandled: `Tensor.eq`**" in first_screen
        and "`Tensor.eq` [threshold]: **unhandled**" in first_screen
    )
    assert "`gradient_health` under exact: all-zero input gradient" in first_screen
    about = [
        p for p in run_verdict([run], num_classes=10, baseline=CNN).text.split("\n\n") if f"**{JPEG}**" in p
    ]
    assert about and all(p in first_screen for p in about)  # the verdict's own sentences about it
    assert "Zhu & Soricut" not in text and WAVELET_CLAIM not in text  # no wavelet model in this run
    assert "```json" not in text and "[meta.json](meta.json)" in text  # linked, not pasted


def test_the_accuracy_table_is_the_records_worst_case(tmp_path: Path) -> None:
    run = _run(tmp_path)
    marks = {(JPEG, "exact"): "failed gradient checks: gradient_health"}
    table = accuracy_table(run.records, JPEG, CNN, marks).set_index(["threat", "eps"])
    rows = run.records[run.records["model"] == JPEG]
    for mode in ("exact", "bpda"):
        expected = metrics.robust_accuracy(rows[rows["grad_mode"] == mode], "Linf", 0.1)[0]
        assert table.loc[("Linf", "0.1"), mode].rstrip(MARK) == f"{100 * expected:.1f}%"
    assert table.loc[("Linf", "0.1"), "exact"].endswith(MARK) and not table.loc[
        ("Linf", "0.1"), "bpda"
    ].endswith(MARK)
    worst = metrics.robust_accuracy(rows, "Linf", 0.1)[0]
    baseline = metrics.robust_accuracy(run.records[run.records["model"] == CNN], "Linf", 0.1)[0]
    assert table.loc[("Linf", "0.1"), "worst"] == f"{100 * worst:.1f}%" == "12.0%"
    assert table.loc[("Linf", "0.1"), f"{CNN} (baseline)"] == f"{100 * baseline:.1f}%" == "4.0%"


def test_zoo_runs_keep_the_wavelet_claim_and_have_no_model_section(tmp_path: Path) -> None:
    run = _run(tmp_path, tokenizer="wavelet")
    assert has_wavelet_model([run])
    zoo = RunFolder(tmp_path, run.records, {"models": {"wavelet": {"model_spec": {"tokenizer": "wavelet"}}}})
    assert external_models([zoo]) == [] and has_wavelet_model([zoo])
    text = render_report([zoo], run_verdict([zoo], num_classes=10), "", report_dir=tmp_path)
    assert "## Your model" not in text and "## Verdict on the claim" in text and WAVELET_CLAIM in text


def test_a_run_without_a_checklist_never_reads_every_check_passed(tmp_path: Path) -> None:
    """Without diagnostics.json the section said "every check passed (or did not apply)" of checks that never
    ran (issue 39: no sentence says more than its rule allows)."""
    run = _run(tmp_path)
    bare = RunFolder(tmp_path, run.records, run.meta, [])
    first_screen = _report(bare).split("## Verdict")[0]
    assert "every check passed" not in first_screen
    assert "**Checklist:** none ran, so no number of this model is verified" in first_screen
