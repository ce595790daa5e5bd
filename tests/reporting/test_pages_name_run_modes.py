"""Every page names only the gradient modes that ran (issue 30): the verdict says nothing of masking for a
candidate without blocked-gradient records (``masking`` None, not false), and report.md's "gradient modes
whose checks all pass" lists only modes with records, whatever a folder's diagnostics.json says, and the
checklist judges only those."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from robustbench_wave.analysis.verdict import judge
from robustbench_wave.attackrun.measure import recorded_modes
from robustbench_wave.reporting.markdown import diagnostics_markdown
from robustbench_wave.reporting.runs import RunFolder
from tests.support.external_models import quantized_linear
from tests.support.masking_models import NUM_CLASSES, baseline_spec, masking_spec, synthetic_records


def _records(candidate: dict) -> pd.DataFrame:
    return pd.concat(
        [synthetic_records("cand", candidate), synthetic_records("base", baseline_spec())], ignore_index=True
    )


def test_masking_is_not_said_without_blocked_records() -> None:
    spec = masking_spec()
    with_blocked = judge(_records(spec), num_classes=NUM_CLASSES, threats=("Linf",), baseline="base")
    assert with_blocked.details["cand@Linf"]["masking"] is True  # blocked 90%, worst case 3%
    no_blocked = {k: v for k, v in spec.items() if k[0] != "blocked"}  # exact and bpda ran, blocked did not
    judged = judge(_records(no_blocked), num_classes=NUM_CLASSES, threats=("Linf",), baseline="base")
    assert judged.details["cand@Linf"]["masking"] is None


def test_report_lists_only_modes_with_records() -> None:
    records = synthetic_records("cand", {k: v for k, v in masking_spec().items() if k[0] == "exact"})
    diagnostics = [{"model": "cand", "status": "reliable", "trusted_modes": ["exact", "bpda"], "checks": []}]
    text = diagnostics_markdown([RunFolder(Path("run"), records, {}, diagnostics)])
    assert "gradient modes whose checks all pass: exact)" in text and "bpda" not in text


def test_the_checklist_judges_only_modes_with_records() -> None:
    """A wavelet-style model offers every mode; asked for exact alone, its checklist judges exact alone."""
    model = quantized_linear(NUM_CLASSES)
    exact_only = synthetic_records("cand", {k: v for k, v in masking_spec().items() if k[0] == "exact"})
    assert recorded_modes(model, exact_only) == ["exact"]
    assert recorded_modes(model, synthetic_records("cand", masking_spec())) == ["exact", "blocked", "bpda"]
