"""The attack command escalates by itself (issue 30, part 3; docs/escalation.md).

One run of three factories computing the same linear function (:mod:`tests.support.escalation_models`): the
undefended one given as ``--baseline`` (so ``--surrogate auto`` takes it), one behind a NumPy round trip that
no scan links (no gradient: escalated from the scan, before the checklist) and one with saturated logits (nothing for the
scan to find; every check of its one mode fails: escalated after the checklist). Both escalations run Square
at every budget of L∞ and L2 (at 500 queries here, not 5,000: tests/support/escalation_queries.py) and
transfer from the baseline at L2 (the suite's transfer is L∞ only); the same function under the same seeds gets
the same escalation rows either way. The baseline is not escalated and its records are those of a run without
the others; the escalated run resumes, and is not escalated again; its tables mark the failed models' cells and
its verdict calls them unverified.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from robustbench_wave import attack
from robustbench_wave.analysis.verdict import UNVERIFIED
from robustbench_wave.attackrun import finalize, measure
from robustbench_wave.data import load_split, to_float
from robustbench_wave.evaluation.records import read_run
from robustbench_wave.models.external import ExternalSpec
from robustbench_wave.reporting.tables import MARK, MARK_COLUMN
from tests.support import external_models as ext
from tests.support.escalation_queries import fewer_square_queries

PLAIN = "tests.support.external_models:pooled_linear"
LOST = "tests.support.escalation_models:flat_pooled_linear"
SATURATED = "tests.support.escalation_models:saturated_pooled_linear"
PREFIX = {PLAIN: "", LOST: "1.", SATURATED: "net."}
ESCALATION = [
    ("escalation_square_5000_linf", 0.03), ("escalation_square_5000_linf", 0.1),
    ("escalation_square_5000_l2", 0.5), ("escalation_square_5000_l2", 1.0),
    ("escalation_transfer_l2", 0.5), ("escalation_transfer_l2", 1.0),
]  # fmt: skip
KEY = ["attack", "eps", "example_id", "attacked", "correct", "pred"]


def _run(tmp_path: Path, models: list[str], *extra: str) -> Path:
    tmp_path.mkdir(parents=True, exist_ok=True)
    images, labels, _ = load_split("synthetic", "train")
    fitted = ext.fit_pooled_linear(to_float(images[:2000]), labels[:2000])
    args = ["--dataset", "synthetic", "--suite", "smoke", "--n-examples", "16", "--batch-size", "16"]
    args += ["--attacks", "fgsm,pgd_linf,pgd_l2,square,transfer_pgd_linf", "--cross-check", "off"]
    for ref in models:
        weights = tmp_path / f"{len(PREFIX[ref])}.safetensors"
        ext.save_weights({f"{PREFIX[ref]}{k}": v for k, v in fitted.items()}, str(weights))
        args += ["--model", ref, "--weights", str(weights)]
    args += ["--baseline", PLAIN, "--no-progress", "--device", "cpu", "--out", str(tmp_path / "out")]
    args += ["--n-diagnostics", "16", *extra]
    assert attack.main(args) == 0
    (run,) = (tmp_path / "out" / "attack" / "synthetic").iterdir()
    return run


@pytest.mark.slow
def test_lost_and_masked_gradients_escalate_and_the_baseline_does_not(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fewer_square_queries(monkeypatch)
    checked: list[str] = []  # the checklist's models in call order, and whether each pass measured energy
    energy: list[bool] = []
    checklist, measure_run = measure.run_diagnostics, finalize.measure_run
    monkeypatch.setattr(
        measure, "run_diagnostics", lambda *a, **k: checked.append(k["model_name"]) or checklist(*a, **k)
    )
    monkeypatch.setattr(
        finalize, "measure_run", lambda *a, **k: energy.append(k["energy"]) or measure_run(*a, **k)
    )
    run = _run(tmp_path / "three", [PLAIN, LOST, SATURATED])
    plain, lost, saturated = (ExternalSpec(r).slug for r in (PLAIN, LOST, SATURATED))
    # after the checklist escalated the saturated model, only it was checked again, without a second energy pass
    assert checked == [plain, lost, saturated, saturated] and energy == [True, False]
    records, meta = read_run(run)
    config = json.loads((run / "config.json").read_text())
    assert config["surrogate"] == PLAIN and config["baseline"] == plain  # --surrogate auto took the baseline
    assert meta["models"][lost]["surrogate_choice"] == f"--surrogate auto: {plain} (the run's --baseline)"
    notes = {m: meta["models"][m].get("escalation") for m in (plain, lost, saturated)}
    assert notes[plain] is None
    assert notes[lost]["stage"] == "scan" and notes[lost]["reason"].startswith(
        "no gradient reaches the input"
    )
    assert notes[saturated]["stage"] == "checklist" and "gradient_health[exact]" in notes[saturated]["reason"]
    assert notes[lost]["surrogate"] == notes[saturated]["surrogate"] == plain
    rows = {
        m: records[(records["model"] == m) & records["attack"].str.startswith("escalation_")] for m in notes
    }
    assert rows[plain].empty
    for m in (lost, saturated):
        assert sorted(set(zip(rows[m]["attack"], rows[m]["eps"]))) == sorted(ESCALATION)
        assert (rows[m].groupby(["attack", "eps"])["example_id"].nunique() == 16).all()
    same = [r[KEY].sort_values(KEY[:3]).reset_index(drop=True) for r in (rows[lost], rows[saturated])]
    pd.testing.assert_frame_equal(*same)  # one function, one seed: one escalation, whichever gradient failed
    # the escalation's breaks count: at L2 the suite's own attacks (gradient PGD only) broke nothing
    summary = pd.read_csv(run / "summary.csv")
    worst = summary[
        (summary["attack"] == "worst-case") & (summary["threat"] == "L2") & (summary["eps"] == 1.0)
    ]
    acc = dict(zip(worst["model"], worst["robust_accuracy"]))
    pgd = summary[(summary["attack"] == "pgd_l2") & (summary["eps"] == 1.0)]
    assert dict(zip(pgd["model"], pgd["robust_accuracy"]))[lost] == 1.0 and acc[lost] < 1.0
    # marks: the two failed models' attack cells, in text, CSV and LaTeX; the baseline's are clean
    flags = summary[summary["attack"] != "clean"].groupby("model")[MARK_COLUMN].all()
    assert flags.to_dict() == {plain: False, lost: True, saturated: True}
    text = (run / "table.txt").read_text(encoding="utf-8")
    assert any(line.startswith(f"{lost}/exact") and MARK in line for line in text.splitlines())
    assert not any(line.startswith(f"{plain}/exact") and MARK in line for line in text.splitlines())
    assert r"$^\dagger$" in (run / "table.tex").read_text(encoding="utf-8")
    table = pd.read_csv(run / "table.csv", header=[0, 1, 2], index_col=[0, 1])
    assert table.xs(MARK_COLUMN, axis=1, level=0).iloc[:, 0].to_dict() == {
        (plain, "exact"): False, (lost, "exact"): True, (saturated, "exact"): True,
    }  # fmt: skip
    # the verdict: unverified, never a robust accuracy
    verdict = json.loads((run / "verdict.json").read_text())
    assert {k: v for k, v in verdict["categories"].items()} == {
        f"{m}@{t}": UNVERIFIED for m in (lost, saturated) for t in ("Linf", "L2")
    }
    assert f"**{lost}** keeps" not in verdict["text"] and f"**{saturated}** keeps" not in verdict["text"]
    # a second invocation resumes every chunk, the escalations' included, and escalates nothing anew
    again = _run(tmp_path / "three", [PLAIN, LOST, SATURATED])
    records2, meta2 = read_run(again)
    pd.testing.assert_frame_equal(records, records2)
    assert meta2["models"][saturated]["escalation"]["resumed_chunks"] == 3
    assert meta2["models"][lost]["escalation"]["resumed_chunks"] == 3
    # the honest baseline's records are those of a run without the others
    alone, _ = read_run(_run(tmp_path / "alone", [PLAIN], "--no-diagnostics"))
    pd.testing.assert_frame_equal(records[records["model"] == plain].reset_index(drop=True), alone)


@pytest.mark.slow
def test_escalation_off_leaves_a_lost_gradient_marked(tmp_path: Path) -> None:
    run = _run(tmp_path, [PLAIN, LOST], "--escalation", "off", "--no-diagnostics")
    lost = ExternalSpec(LOST).slug
    records, meta = read_run(run)
    assert json.loads((run / "config.json").read_text())["escalation"] == "off"
    assert (
        "escalation" not in meta["models"][lost] and not records["attack"].str.startswith("escalation_").any()
    )
    summary = pd.read_csv(run / "summary.csv")
    marked = summary[summary[MARK_COLUMN]]
    assert set(marked["model"]) == {lost} and (marked["attack"] != "clean").all()
    assert MARK in (run / "table.txt").read_text(encoding="utf-8")  # before (and without) any checklist


def test_a_baseline_must_be_a_model_of_the_run(tmp_path: Path) -> None:
    argv = ["--model", "patch", "--baseline", "wavelet", "--dataset", "synthetic", "--out", str(tmp_path)]
    with pytest.raises(
        SystemExit, match=r"--baseline wavelet is not a --model of this run; give one of \['patch'\]"
    ):
        attack.main([*argv, "--device", "cpu"])
    assert not any(tmp_path.iterdir())  # refused before anything was written


@pytest.mark.slow
def test_a_suite_of_corruptions_alone_is_not_escalated(tmp_path: Path) -> None:
    """Common corruptions have no L∞ / L2 budget for Square or a transfer attack to lower: a lost or masked
    gradient there is no reason to escalate, and the run finishes (it used to stop with a traceback)."""
    images, labels, _ = load_split("synthetic", "train")
    fitted = ext.fit_pooled_linear(to_float(images[:2000]), labels[:2000])
    args = ["--dataset", "synthetic", "--suite", "corruptions", "--attacks", "gaussian_noise"]
    args += ["--n-examples", "16", "--n-diagnostics", "16", "--no-progress", "--device", "cpu"]
    for ref in (LOST, SATURATED):
        weights = tmp_path / f"{len(PREFIX[ref])}.safetensors"
        ext.save_weights({f"{PREFIX[ref]}{k}": v for k, v in fitted.items()}, str(weights))
        args += ["--model", ref, "--weights", str(weights)]
    assert attack.main([*args, "--out", str(tmp_path / "out")]) == 0
    (run,) = (tmp_path / "out" / "attack" / "synthetic").iterdir()
    records, meta = read_run(run)
    assert not records["attack"].str.startswith("escalation_").any()
    assert not any("escalation" in entry for entry in meta["models"].values())
