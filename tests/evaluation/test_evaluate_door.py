"""``evaluate(module)`` is a door like the others: an in-memory model is scanned (``bpda`` where the scan links a
non-differentiable step), escalated where its gradient is lost, and its result says which numbers are upper
bounds (``standing``, ``†`` in its text, a warning when one is read). On main before this change the same
module was attacked under its exact gradient only, never escalated, and read as a plain robust accuracy."""

from __future__ import annotations

import logging

import pytest

from robustbench_wave.attacks import load_suite
from robustbench_wave.data import load_split, load_test_images, to_float
from robustbench_wave.evaluation import EvalSettings, evaluate
from tests.support import external_models as ext
from tests.support.autobpda_models import quantized_pooled_linear
from tests.support.escalation_models import flat_pooled_linear
from tests.support.escalation_queries import fewer_square_queries

SUITE = ["fgsm", "pgd_linf", "pgd_l2"]


def _fitted(factory):  # type: ignore[no-untyped-def]
    images, labels, _ = load_split("synthetic", "train")
    model = factory()
    fitted = ext.fit_pooled_linear(to_float(images[:2000]), labels[:2000])
    model.load_state_dict({f"1.{k}": v for k, v in fitted.items()})
    return model.eval()


def test_an_in_memory_model_is_scanned_and_attacked_with_bpda() -> None:
    data = load_test_images("synthetic", 16)
    settings = EvalSettings(model_name="quantised", dataset=data.info)
    suite = load_suite("smoke").select(SUITE)
    result = evaluate(
        _fitted(quantized_pooled_linear), data.images, data.labels, suite, settings, progress=False
    )
    assert set(result.records["grad_mode"]) == {"exact", "bpda"}
    assert "gradient_path" in result.meta["models"]["quantised"]
    bpda = result.robust_accuracy("Linf", 0.1, grad_mode="bpda")
    assert bpda < result.robust_accuracy("Linf", 0.1, grad_mode="exact")  # BPDA finds what exact cannot
    assert result.standing() == "unchecked"  # no checklist ran: measured, never verified
    assert "unchecked" in str(result) and "†" not in str(result)


@pytest.mark.slow  # the escalation's Square (at 500 queries, not 5,000: tests/support/escalation_queries.py)
def test_a_lost_gradient_is_escalated_and_reads_as_an_upper_bound(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    fewer_square_queries(monkeypatch)  # this door escalates; what 5,000 queries break: test_escalation.py
    data = load_test_images("synthetic", 16)
    settings = EvalSettings(model_name="list", dataset=data.info)
    suite = load_suite("smoke").select(SUITE)
    model = _fitted(flat_pooled_linear)
    with caplog.at_level(logging.WARNING):
        result = evaluate(model, data.images, data.labels, suite, settings, progress=False)
    assert "structurally zero" in caplog.text  # a gradient attack ran on a zero gradient: said, not hidden
    assert result.records["attack"].str.startswith("escalation_square").any()
    assert result.standing() == "unverified" and "gradient lost at the scan" in result.why()["exact"]
    text = str(result)
    assert "†" in text and "upper bound" in text
    with pytest.warns(UserWarning, match="upper bound, not robustness"):
        result.robust_accuracy("Linf", 0.1)
    alone = evaluate(model, data.images, data.labels, suite, settings, progress=False, escalation=False)
    assert not alone.records["attack"].str.startswith("escalation_").any()
    assert alone.standing() == "unverified"  # not escalated: still an upper bound, and said so
