"""A resumed chunk must have run with the parameters fitted to the model: the low-frequency attack's
resolved ``level = "auto"`` joins the chunk fingerprint (a chunk made under another resolution is not reused)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from robustbench_wave.attacks import parse_suite
from robustbench_wave.attacks import suite as suite_module
from robustbench_wave.evaluation import EvalSettings, evaluate
from tests.support.attack_models import labelled, patch_model, toy_data

SUITE = {
    "eps": {"default": {"Linf": [0.05]}},
    "attack": [
        {"name": "clean", "family": "clean"},
        {"name": "lowfreq", "family": "lowfreq-pgd", "threat": "Linf", "steps": 2, "rel_step_size": 0.5,
         "restarts": 1, "level": "auto"},
    ],
}  # fmt: skip


def _run(cache: Path) -> dict:
    x = toy_data(8, seed=2)
    model = patch_model()
    result = evaluate(
        model, x, labelled(model, x), parse_suite(SUITE), EvalSettings(), progress=False, cache_dir=cache
    )
    return result.meta


def test_a_chunk_made_under_another_resolved_level_is_not_resumed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = _run(tmp_path)
    assert _run(tmp_path)["models"]["model"]["resumed_chunks"] == 1  # same resolution: resumed
    real = suite_module.choose_level

    def other_level(*args, **kwargs):  # type: ignore[no-untyped-def]
        choice = real(*args, **kwargs)
        return dataclasses.replace(choice, level=choice.level + 1, note="another rule")

    monkeypatch.setattr(suite_module, "choose_level", other_level)
    moved = _run(tmp_path)
    assert moved["models"]["model"]["resumed_chunks"] == 0
    assert moved["settings"]["fingerprint"] != first["settings"]["fingerprint"]
