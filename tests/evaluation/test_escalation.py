"""Escalation (issue 30, part 3): where the gradient is lost, unhandled or masked, Square at AutoAttack's 5,000
queries at every threat and a transfer attack from the undefended baseline run by themselves.

When: from the scan (no gradient reaches the input in any mode, or an operation without a rule) and from the
checklist (every gradient mode failed a check); a model one of whose modes passes -- the published zoo demo's
patch ViT -- is never escalated, its wavelet ViT (every mode failed) is. What: the escalation suite of the headline suite. How much it
matters: a linear model behind a NumPy round trip that no scan links keeps 100% under the suite's
gradient attacks, and the escalation's audited breaks bring it down to, but never below, the exact robust
accuracy of the same linear function under L∞, computed in closed form.
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest
import torch
import torch.nn.functional as F

from robustbench_wave.analysis.diagnostics import run_diagnostics
from robustbench_wave.attackrun.run_escalation import Surrogate, after_checklist
from robustbench_wave.attacks import load_suite, parse_suite
from robustbench_wave.data import LabelledImages, dataset_info, load_split, load_test_images, to_float
from robustbench_wave.evaluation import EvalSettings, evaluate
from robustbench_wave.evaluation import escalation as esc
from robustbench_wave.evaluation.metrics import robust_flags
from robustbench_wave.evaluation.records import read_run
from robustbench_wave.evaluation.trust import Trust
from robustbench_wave.models.autobpda import LOST, NO_RULE, STRAIGHT_THROUGH, auto_bpda
from tests.support import external_models as ext
from tests.support import masking_models as mm
from tests.support.escalation_models import flat_pooled_linear
from tests.support.escalation_queries import fewer_square_queries

REPO = Path(__file__).resolve().parents[2]


def test_the_escalation_suite_is_square_5000_at_every_norm_threat_and_transfer_where_the_suite_has_none() -> (
    None
):
    headline = load_suite("headline")
    info = dataset_info("fashion-mnist")
    suite = esc.escalation_suite(headline, info, transfer=True)
    by_name = {e.name: e for e in suite.attacks}
    assert list(by_name) == [
        "clean",
        "escalation_square_5000_linf",
        "escalation_square_5000_l2",
        "escalation_transfer_l2",
    ]  # fmt: skip  (headline's transfer entry is L∞ only: its L2 twin is added)
    for threat in ("Linf", "L2"):
        square = by_name[f"escalation_square_5000_{threat.lower()}"]
        assert square.family == "square" and square.threat == threat
        assert {k: square.params[k] for k in esc.SQUARE_PARAMS} == {
            "n_queries": 5000,
            "p_init": 0.8,
            "restarts": 1,
            "loss": "margin",
        }  # fmt: skip  AutoAttack's standard Square
        assert suite.entry_eps(square, info) == headline.threat_eps(threat, info)  # every budget of the grid
    (own,) = [e for e in headline.attacks if e.family == "transfer"]
    assert by_name["escalation_transfer_l2"].params == own.params  # the suite's transfer settings, at L2
    assert suite.rng_block == headline.rng_block  # the suite's seeding blocks
    without = esc.escalation_suite(headline, info, transfer=False)
    assert [e.family for e in without.attacks] == ["clean", "square", "square"]
    assert all(esc.is_escalation(e.name) for e in suite.attacks[1:])


def _path(exact: bool, bpda: bool, rules: list[str], unhandled: list[str] | None = None) -> dict:
    modes = ["exact", "bpda"] if bpda and STRAIGHT_THROUGH in rules else ["exact"]
    findings = [{"kind": "zero-gradient", "op": f"op{i}", "rule": r} for i, r in enumerate(rules)]
    out = {
        "summary": "s",
        "modes": modes,
        "exact_gradient": exact,
        "bpda_gradient": bpda,
        "findings": findings,
    }
    return out | ({"unhandled": unhandled} if unhandled is not None else {})


def test_the_scan_escalates_a_lost_or_unhandled_gradient_only() -> None:
    assert esc.path_reason(_path(False, False, [LOST])).startswith("no gradient reaches the input")
    assert esc.path_reason(_path(False, True, [STRAIGHT_THROUGH])) is None  # bpda reaches it: handled
    assert esc.path_reason(_path(True, True, [STRAIGHT_THROUGH, NO_RULE])) == (
        "operations on the input path without a gradient rule: op1 [zero-gradient]"
    )
    assert esc.path_reason(_path(True, False, [], unhandled=["Image.fromarray"])) == (
        "operations on the input path without a gradient rule: Image.fromarray"
    )


def _checks(passed: dict[str | None, bool]) -> dict:
    return {
        "checks": [{"name": f"c{i}", "grad_mode": m, "passed": p} for i, (m, p) in enumerate(passed.items())]
    }


def test_the_checklist_escalates_only_when_every_mode_fails() -> None:
    assert esc.checklist_reason(_checks({"exact": False, "blocked": False, "bpda": True})) is None
    assert esc.checklist_reason(_checks({"exact": False, "blocked": False})) == (
        "every gradient mode (blocked, exact) failed a gradient-masking check: c0[exact], c1[blocked]"
    )
    assert esc.checklist_reason(_checks({None: False, "exact": True})) is not None  # a mode-free failure
    assert esc.checklist_reason(_checks({None: True, "exact": None})) is None  # undecided is no failure


def _published_checklist(name: str) -> list[dict]:
    """diagnostics.json's entries of a published run, from its diagnostics.csv (model, check, mode, passed)."""
    table = pd.read_csv(REPO / "results" / "published" / name / "diagnostics.csv")
    passed = table["passed"].map(lambda v: None if pd.isna(v) else str(v) == "True")
    checks = [
        {"name": c, "grad_mode": None if g == "all" else g, "passed": p}
        for c, g, p in zip(table["check"], table["grad_mode"], passed)
    ]
    return [
        {"model": m, "checks": [c for c, owner in zip(checks, table["model"]) if owner == m]}
        for m in dict.fromkeys(table["model"])
    ]


def test_the_published_zoo_demo_escalates_the_wavelet_vit_whose_every_mode_failed_and_marks_it() -> None:
    """The documented zoo run (patch and wavelet ViTs, `make demo`): the patch ViT's exact mode passes every
    check, so it is never escalated (its records stay what they are); every mode of the wavelet ViT failed a
    check (blocked by design, exact and BPDA gradient_mode_gap at L-inf 0.1), so it is the one escalated and
    all three of its modes are marked."""
    reports = _published_checklist("demo")
    assert [d["model"] for d in reports] == ["patch", "wavelet"]
    patch, wavelet = (esc.checklist_reason(d) for d in reports)
    assert patch is None
    assert wavelet is not None and "every gradient mode (blocked, bpda, exact)" in wavelet
    modes = {"patch": ["exact"], "wavelet": ["exact", "blocked", "bpda"]}
    meta = {"models": {m: {"grad_modes": v} for m, v in modes.items()}}
    assert sorted(Trust.from_run(meta, reports).marks) == [
        ("wavelet", m) for m in ("blocked", "bpda", "exact")
    ]


def exact_linf_robust(linear: torch.nn.Linear, x: torch.Tensor, y: torch.Tensor, eps: float) -> torch.Tensor:
    """Per example: robust under every L∞ perturbation of size ``eps`` inside [0, 1], for the pooled linear
    model (logits A x + b): the best perturbation against class j moves each pixel by eps toward the sign of
    (a_j - a_y), as far as the box lets it -- a closed form, no attack."""
    d = x[0].numel()
    pool = F.avg_pool2d(torch.eye(d).view(d, *x.shape[1:]), ext.POOL).flatten(1)  # (pixels, features)
    a = linear.weight.detach() @ pool.T
    flat = x.flatten(1)
    logits = flat @ a.T + linear.bias.detach()
    up, down = (1 - flat).clamp(max=eps), flat.clamp(max=eps)
    robust = logits.argmax(1) == y
    for j in range(a.shape[0]):
        g = a[j] - a[y]  # (n, pixels): what moving each pixel up gains class j over the label
        gain = torch.where(g > 0, g * up, -g * down).sum(1)
        margin = logits[torch.arange(len(y)), y] - logits[:, j]
        robust &= (j == y) | (margin - gain > 0)
    return robust


@pytest.mark.slow
def test_a_lost_gradient_escalates_and_square_5000_breaks_count() -> None:
    images, labels, _ = load_split("synthetic", "train")
    model = flat_pooled_linear()
    model.load_state_dict(
        {f"1.{k}": v for k, v in ext.fit_pooled_linear(to_float(images[:2000]), labels[:2000]).items()}
    )
    data = load_test_images("synthetic", 16)
    linear = model[1][-1]  # the oracle's weights
    model = auto_bpda(model.eval(), data.images, "list")
    suite = load_suite("smoke").select(["fgsm", "pgd_linf", "pgd_l2", "square"])
    settings = EvalSettings(model_name="list", dataset=data.info, cross_check="off")
    before = evaluate(
        model, data.images, data.labels, suite, settings, batch_size=16, progress=False, escalation=False
    )
    reason = esc.scan_reason(model)
    assert reason is not None and reason.startswith("no gradient reaches the input")
    extra = esc.escalate(
        model, data.images, data.labels, suite, settings, before.records, reason=reason, stage=esc.SCAN,
        batch_size=16, progress=False,
    )  # fmt: skip
    joined = esc.join(before, "list", extra)
    assert extra.meta[esc.META_KEY]["stage"] == esc.SCAN and "transfer" in extra.meta[esc.META_KEY]
    assert set(extra.records["attack"]) == {"escalation_square_5000_linf", "escalation_square_5000_l2"}
    assert len(joined.records) == len(before.records) + len(extra.records)
    assert joined.records.iloc[: len(before.records)].equals(
        before.records
    )  # the suite's rows stay as they were
    # every budget of both threats has its escalation rows, one per example (skipped points recorded as such)
    per = extra.records.groupby(["attack", "eps"])["example_id"].nunique()
    assert sorted(per.index) == [
        ("escalation_square_5000_l2", 0.5), ("escalation_square_5000_l2", 1.0),
        ("escalation_square_5000_linf", 0.03), ("escalation_square_5000_linf", 0.1),
    ] and (per == 16).all()  # fmt: skip
    # a point the suite broke is skipped, not attacked again
    broke = before.records[
        before.records["attacked"] & ~before.records["correct"] & (before.records["eps"] == 0.1)
    ]
    again = extra.records[
        (extra.records["eps"] == 0.1) & extra.records["example_id"].isin(broke["example_id"])
    ]
    assert not again["attacked"].any()
    for eps in (0.03, 0.1):
        suite_only = int(robust_flags(before.records, "Linf", eps).sum())
        escalated = int(robust_flags(joined.records, "Linf", eps).sum())
        exact = int(exact_linf_robust(linear, data.images, data.labels, eps).sum())
        assert exact <= escalated < suite_only or exact == escalated == suite_only == 0
    assert int(robust_flags(before.records, "Linf", 0.03).sum()) == 16  # the gradient attacks saw nothing
    at_l2 = robust_flags(joined.records, "L2", 1.0)
    assert at_l2.sum() < robust_flags(before.records, "L2", 1.0).sum()  # Square at L2 counts too
    assert not math.isnan(joined.robust_accuracy("L2", 1.0))


QUADRANT_SUITE = {
    "name": "quadrants",
    "settings": {"rng_block": 16},
    "eps": {"default": {"Linf": [0.05, 0.1], "L2": [0.2, 0.5]}},
    "attack": [
        {"name": "clean", "family": "clean"},
        {"name": "pgd_linf", "family": "pgd", "threat": "Linf", "steps": 5},
        {"name": "pgd_l2", "family": "pgd", "threat": "L2", "steps": 5},
    ],
}


@pytest.mark.slow
def test_a_masked_model_escalates_after_the_checklist(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The checklist's saturated model (``masking_models.SaturatedQuadrant``: the softmax underflows, every CE
    attack sees a zero gradient, the scan finds nothing) fails in its one mode and escalates after the
    checklist, with transfer from the unsaturated model. Oracle: a quadrant-mean classifier is broken at L∞ eps
    exactly when its quadrant contrast is at most 2 eps (the label's quadrant down by eps, another up), so the
    escalated worst case must be that closed form: none robust at 0.1, all at 0.05 (contrast 0.16).

    Square at 500 queries (tests/support/escalation_queries.py): at 0.05 nothing can be broken, so 5,000 would
    only spend 4,500 more iterations per budget on the same answer; at 0.1 every point still falls."""
    fewer_square_queries(monkeypatch)
    x, y = mm.quadrant_data(16)
    model, honest = mm.SaturatedQuadrant().eval(), mm.QuadrantLinear().eval()
    suite = parse_suite(QUADRANT_SUITE)
    settings = EvalSettings(model_name="sat", dataset=mm.Info(), cross_check="off")
    result = evaluate(model, x, y, suite, settings, batch_size=16, progress=False)
    result.save(tmp_path)
    assert esc.scan_reason(model) is None and int(robust_flags(result.records, "Linf", 0.1).sum()) == 16
    report = run_diagnostics(model, x, y, result.records, info=mm.Info(), model_name="sat", n=16, steps=5)
    assert report.trusted_modes == []
    data = LabelledImages(x, y, mm.Info())
    surrogate = Surrogate(honest, "honest")
    escalated = after_checklist(tmp_path, {"sat": model}, data, [report.to_dict()], surrogate, batch_size=16)
    assert escalated == ["sat"]
    records, meta = read_run(tmp_path)
    note = meta["models"]["sat"][esc.META_KEY]
    assert note["stage"] == esc.CHECKLIST and note["surrogate"] == "honest"
    assert {a for a in records["attack"] if esc.is_escalation(a)} == {
        "escalation_square_5000_linf", "escalation_square_5000_l2",
        "escalation_transfer_linf", "escalation_transfer_l2",
    }  # fmt: skip
    contrast = mm.quadrant_means(x)
    gap = contrast[torch.arange(16), y] - contrast.scatter(1, y[:, None], -1.0).max(1).values
    for eps in (0.05, 0.1):
        assert robust_flags(records, "Linf", eps).to_numpy().tolist() == (gap > 2 * eps).tolist()
    # the run is not escalated twice
    assert after_checklist(tmp_path, {"sat": model}, data, [report.to_dict()], surrogate, batch_size=16) == []
