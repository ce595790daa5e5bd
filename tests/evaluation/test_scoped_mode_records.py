"""Records of the scoped gradient mode ``bpda-assignment``, end to end through ``evaluate`` and claim 5.

Oracle: on ``patch-tokenpool`` the Token Pooling layers are the only fixed front-end, so BPDA through the
assignment alone *is* plain BPDA: the two modes' records must be identical, row for row. On
``wavelet-tokenpool`` claim 5 must read the scoped rows (the assignment's gap), not exact − bpda."""

from __future__ import annotations

import pandas as pd
import pytest
import torch

from robustbench_wave.analysis import claim_rules as cl
from robustbench_wave.analysis.diagnostics import run_diagnostics
from robustbench_wave.attackrun.measure import recorded_modes
from robustbench_wave.attacks import load_suite
from robustbench_wave.data import DatasetInfo
from robustbench_wave.evaluation import EvalSettings, escalation, evaluate
from robustbench_wave.models.vit import build_model

INFO = DatasetInfo("synthetic", "synthetic", 10, 1, 32, (0.5,), (0.25,), tuple(str(i) for i in range(10)))
MODES = ("exact", "bpda", "bpda-assignment")


def _attacked(name: str) -> tuple[torch.nn.Module, torch.Tensor, torch.Tensor, pd.DataFrame]:
    """The model, its images and labels, and its records under every one of :data:`MODES`."""
    torch.manual_seed(0)
    model = build_model(name, INFO).eval()
    x, y = torch.rand(8, 1, 32, 32), torch.arange(8) % 10
    suite = load_suite("smoke").select(["pgd_linf"])
    settings = EvalSettings(model_name=name, dataset=INFO, grad_modes=MODES)
    return model, x, y, evaluate(model, x, y, suite, settings, progress=False).records


def _records(name: str) -> pd.DataFrame:
    return _attacked(name)[3]


@pytest.mark.slow
def test_bpda_assignment_records_and_claim5() -> None:
    patch = _records("patch-tokenpool")
    assert list(dict.fromkeys(patch["grad_mode"])) == list(MODES)
    cols = ["attack", "eps", "example_id", "pred", "correct", "norm"]
    bpda, scoped = (patch[patch["grad_mode"] == m][cols].reset_index(drop=True) for m in MODES[1:])
    pd.testing.assert_frame_equal(bpda, scoped)  # the assignment is its only front-end: the same attack

    wavelet = _records("wavelet-tokenpool")
    assert set(wavelet["grad_mode"]) == set(MODES)
    (f,) = cl.assignment_masking_claim([wavelet], scope="s", assignment_only=set(), threats=("Linf",))
    assert "assignment only" in f.measured and "exact vs bpda-assignment" in f.reason
    assert list(f.table["comparison"]) == ["exact − bpda-assignment", "exact − bpda"]


@pytest.mark.slow
def test_the_checklist_judges_the_scoped_mode() -> None:
    """A run attacked under ``bpda-assignment`` has that mode judged by the checklist, as the attack command's
    finalisation picks the modes (:func:`recorded_modes`). It read the model's default modes alone, so the
    mode claim 5 reads went unjudged, and a mask there would neither mark its cells nor escalate the model."""
    model, x, y, records = _attacked("wavelet-tokenpool")
    modes = recorded_modes(model, records)
    assert modes == list(MODES)
    report = run_diagnostics(
        model, x, y, records, info=INFO, model_name="wavelet-tokenpool", grad_modes=modes, n=4, steps=2,
        square_queries=10,
    )  # fmt: skip
    judged = {c.grad_mode for c in report.checks if c.grad_mode}
    assert judged == set(MODES)
    entry = report.to_dict()
    every_mode_failed = [c | {"passed": False} for c in entry["checks"]]
    assert "bpda-assignment" in escalation.checklist_reason({"checks": every_mode_failed})
    scoped_passes = [
        c | {"passed": c["grad_mode"] == "bpda-assignment"} for c in entry["checks"] if c["grad_mode"]
    ]
    assert (
        escalation.checklist_reason({"checks": scoped_passes}) is None
    )  # a mode left trusted: not escalated


def test_the_attack_command_accepts_the_scoped_mode() -> None:
    from robustbench_wave.attackrun import parse_grad_modes

    assert parse_grad_modes("exact,blocked,bpda,bpda-assignment").every == (
        "exact",
        "blocked",
        "bpda",
        "bpda-assignment",
    )
    with pytest.raises(ValueError, match="bpda-assignment"):  # the error lists it among the choices
        parse_grad_modes("exact,bpda-everything")
