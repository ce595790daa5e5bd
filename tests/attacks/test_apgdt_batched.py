"""APGD-T at L∞ with its targets side by side (attacks/apgdt.py) returns torchattacks' APGD-T points exactly.

The oracle is ``torchattacks.APGDT``'s own sequential loop on a trained 10-class model, with groups of every
size, including groups cut short when an early target breaks a point (the random stream is then rewound).
"""

from __future__ import annotations

import pytest
import torch

from robustbench_wave.attacks import GradSafe, apgdt, attack_mode, fab
from robustbench_wave.attacks.torchattacks_backend import _apgdt_class
from tests.support.attack_models import template_data, trained_patch_model


def _attack(cls: type, model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, norm: str, eps: float):
    return cls(model, norm=norm, eps=eps, steps=15, n_restarts=1, seed=7, n_classes=10)(x, y)


def _all_at_once(last: int, broke: bool, targets_left: int, points: int) -> int:
    return max(1, min(targets_left, fab.ROWS // points))


@pytest.mark.slow
@pytest.mark.parametrize("rows", [1, 12, fab.ROWS])
@pytest.mark.parametrize("schedule", ["doubling", "all at once"])
def test_side_by_side_targets_return_torchattacks_points(rows: int, schedule: str, monkeypatch) -> None:
    """Every grouping of the targets gives torchattacks' points: the shipped schedule, and every target in
    one group (where groups are cut short at a break and the random stream rewound)."""
    import torchattacks

    model = trained_patch_model()
    x, y = template_data(6, seed=5)
    eps = 4 / 255
    monkeypatch.setattr(fab, "ROWS", rows)
    if schedule == "all at once":
        monkeypatch.setattr(apgdt, "group_size", _all_at_once)
    cut = []
    run_group = apgdt._run_group

    def spy(*args, **kwargs):
        used, fooled, points = run_group(*args, **kwargs)
        cut.append(used < args[-1])
        return used, fooled, points

    monkeypatch.setattr(apgdt, "_run_group", spy)
    with attack_mode(model):
        wrapped = GradSafe(model)
        ours = _attack(_apgdt_class(), wrapped, x, y, "Linf", eps)
        reference = _attack(torchattacks.APGDT, wrapped, x, y, "Linf", eps)
        with torch.no_grad():
            broken = int((model(ours).argmax(1) != y).sum())
    assert 0 < broken < len(x)
    assert torch.equal(ours, reference)
    if rows > 1 and schedule == "all at once":
        assert any(cut)  # a group was cut short and the random stream rewound


def test_l2_keeps_torchattacks_sequential_loop(monkeypatch) -> None:
    """torchattacks' L2 step couples the rows (step_size[0]): L2 never takes the side-by-side loop."""
    import torchattacks

    def refuse(*args, **kwargs):
        raise AssertionError("the side-by-side loop ran at L2")

    monkeypatch.setattr(apgdt, "perturb_side_by_side", refuse)
    model = trained_patch_model()
    x, y = template_data(4, seed=5)
    with attack_mode(model):
        wrapped = GradSafe(model)
        ours = _attack(_apgdt_class(), wrapped, x, y, "L2", 0.2)
        assert torch.equal(ours, _attack(torchattacks.APGDT, wrapped, x, y, "L2", 0.2))
