"""One judge (issue 39): each kind of evidence that makes a number an upper bound -- a failed gradient check,
a gradient the scan found lost (escalated or not), no checklist at all -- planted in one run folder, and the
same answer read through every door that speaks of the run: the tables' marks, the verdict, claim 3, the
gallery's "broken", the RobustBench export and :func:`robustbench_wave.benchmark`'s result."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from robustbench_wave.analysis import claim_rules as cl
from robustbench_wave.analysis.verdict import UNCHECKED, UNVERIFIED, paired_worst_case
from robustbench_wave.api import _read_back
from robustbench_wave.defenses.table import judge_broken
from robustbench_wave.evaluation import records as rec
from robustbench_wave.evaluation.trust import Standing
from robustbench_wave.reporting.export import _unreliable
from robustbench_wave.reporting.markdown import table_marks, write_report
from robustbench_wave.reporting.runs import load_run, run_trust
from robustbench_wave.reporting.tables import write_tables
from tests.support.masking_models import baseline_spec, masking_spec, synthetic_records

MODES = ("exact", "blocked", "bpda")
LOST_PATH = {
    "summary": "s",
    "modes": ["exact"],
    "exact_gradient": False,
    "bpda_gradient": False,
    "findings": [],
}


def _checks(model: str, modes: tuple[str, ...], passed: bool) -> dict:
    checks = [
        {
            "name": "gradient_mode_gap",
            "grad_mode": m,
            "passed": passed,
            "result": "",
            "numbers": {},
            "meaning": "",
        }
        for m in modes
    ]
    status = "reliable" if passed else "suspicious (checks: gradient_mode_gap)"
    return {
        "model": model,
        "status": status,
        "trusted_modes": list(modes) if passed else [],
        "checks": checks,
    }


def _plant(run: Path, kind: str) -> None:
    """A run of an honest-looking candidate (85% under every attack) and the patch baseline, with ``kind``'s
    evidence that the candidate's numbers are upper bounds."""
    records = pd.concat(
        [
            synthetic_records("wavelet", masking_spec(blocked=85, exact=85, bpda=85, square=85, transfer=85)),
            synthetic_records("patch", baseline_spec()),
        ],
        ignore_index=True,
    )
    models = {"wavelet": {"grad_modes": list(MODES)}, "patch": {"grad_modes": ["exact"]}}
    if kind == "lost gradient, escalated":
        models["wavelet"] |= {"gradient_path": LOST_PATH, "escalation": {"stage": "scan"}}
    meta = {"dataset": {"name": "synthetic", "info": {"num_classes": 4}}, "n_examples": 100, "models": models}
    rec.write_records(records, run / rec.RECORDS_FILE)
    rec.write_meta(meta, run / rec.META_FILE)
    if kind != "no checklist":
        entries = [_checks("wavelet", MODES, kind != "failed checks"), _checks("patch", ("exact",), True)]
        (run / "diagnostics.json").write_text(json.dumps({"models": entries}), encoding="utf-8")


@pytest.mark.parametrize(
    ("kind", "standing", "category"),
    [
        ("failed checks", Standing.UNVERIFIED, UNVERIFIED),
        ("lost gradient, escalated", Standing.UNVERIFIED, UNVERIFIED),
        ("no checklist", Standing.UNCHECKED, UNCHECKED),
    ],
)
def test_every_door_reads_the_same_answer(
    tmp_path: Path, kind: str, standing: Standing, category: str
) -> None:
    _plant(tmp_path, kind)
    run = load_run(tmp_path)
    assert (
        run.trust.standing("wavelet") is standing and run.trust.standing("patch") is not Standing.UNVERIFIED
    )
    # the tables: every mode of an unverified candidate marked; an unchecked one is not marked, and not trusted
    marks = table_marks(run) or {}
    assert {m for (model, m) in marks if model == "wavelet"} == (
        set(MODES) if standing is Standing.UNVERIFIED else set()
    )
    write_tables(run.records, tmp_path, meta=run.meta, marks=marks)
    # the verdict (report.md and verdict.json)
    write_report(run, figures=False)
    verdict = json.loads((tmp_path / "verdict.json").read_text())
    assert verdict["categories"] == {"wavelet@Linf": category}
    assert verdict["details"]["wavelet@Linf"]["above_baseline"] is None
    assert "robust under all attacks" not in verdict["text"] and "more robust" not in verdict["text"]
    # claim 3
    found = cl.robustness_claim([run.records], [0], scope="s", num_classes=4, trust=run_trust([run]))
    assert {f.verdict for f in found} == {cl.INCONCLUSIVE}
    assert all(category in f.reason for f in found)
    # the gallery's "broken": never "no", the standing's word instead
    paired = paired_worst_case(run.records, "wavelet", "patch", "Linf", 0.1)
    assert judge_broken(paired, standing=run.trust.standing("wavelet")) == standing.value
    # the export and benchmark()'s result
    assert _unreliable([run], "wavelet")[0] is True
    result = _read_back(tmp_path, "wavelet", "Linf", kept=True)
    assert result.standing == standing.value and result.upper_bound and "†" in repr(result)
    with pytest.warns(UserWarning, match="an upper bound, not robustness"):
        _clean, _robust = result


def test_a_verified_candidate_reads_verified_through_every_door(tmp_path: Path) -> None:
    """The control: every check passed, no lost gradient: nothing is marked and the numbers stand."""
    _plant(tmp_path, "checks passed")
    run = load_run(tmp_path)
    assert run.trust.standing("wavelet") is Standing.VERIFIED and not table_marks(run)
    write_tables(run.records, tmp_path, meta=run.meta)
    assert _unreliable([run], "wavelet")[0] is False
    result = _read_back(tmp_path, "wavelet", "Linf", kept=True)
    assert result.standing == "verified" and not result.upper_bound and "†" not in repr(result)
