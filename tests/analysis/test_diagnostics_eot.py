"""The diagnostics' own attacks treat a randomised model as its run did: the run's ``--eot`` choice, read
from meta.json's settings (absent in runs made before it: the default, automatic)."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from robustbench_wave.analysis import diagnostics
from robustbench_wave.data import dataset_info
from robustbench_wave.evaluation.eot import EotSettings
from tests.support.attack_models import patch_model, toy_data


class _Stop(Exception):
    pass


@pytest.mark.parametrize(
    ("meta", "expected"),
    [
        (None, EotSettings()),
        ({"settings": {"backend": "auto"}}, EotSettings()),
        ({"settings": {"eot": "off", "eot_draws": 5}}, EotSettings("off", 5)),
    ],
)
def test_the_subset_attacks_follow_the_runs_eot_choice(
    monkeypatch: pytest.MonkeyPatch, meta: dict[str, Any] | None, expected: EotSettings
) -> None:
    seen = []

    def stop(*args: Any, **kwargs: Any) -> None:
        seen.append(args[4].eot)
        raise _Stop

    monkeypatch.setattr(diagnostics, "evaluate_suite", stop)
    x = toy_data(8)
    with pytest.raises(_Stop):
        diagnostics.run_diagnostics(
            patch_model(n_classes=3), x, torch.zeros(8, dtype=torch.long), None, info=dataset_info("synthetic"),
            n=4, meta=meta,
        )  # fmt: skip
    assert seen == [expected]
