"""APGD-T with its targets side by side (attacks/apgdt.py) returns the sequential loop's points exactly.

At L∞ the oracle is ``torchattacks.APGDT``'s own sequential loop; at L2 it is that loop with one step size per
point (our class with the side-by-side loop switched off: torchattacks' L2 step couples the rows, see
``test_apgdt_l2.py``). With groups of every size, including groups cut short when an early target breaks a
point (the random stream is then rewound), on a trained 10-class model (where the first target breaks all it
can) and on a linear model whose second target breaks points and whose third breaks points the second left
(so the points after a rewind count).
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from robustbench_wave.attacks import GradSafe, apgdt, attack_mode, fab
from robustbench_wave.attacks.torchattacks_backend import _apgdt_class
from tests.support.attack_models import template_data, trained_patch_model


def _attack(
    cls: type, model: nn.Module, x: torch.Tensor, y: torch.Tensor, norm: str, eps: float, classes: int
):
    return cls(model, norm=norm, eps=eps, steps=15, n_restarts=1, seed=7, n_classes=classes)(x, y)


FULL = fab.ROWS


def _decoy() -> tuple[nn.Module, torch.Tensor, torch.Tensor]:
    """Four classes, label 0: class 1 is next by logit but barely moves (weight 0.1), classes 2 and 3 move
    fast along orthogonal directions, so targets 2 and 3 break what target 1 cannot; 8 points near grey."""
    g = torch.Generator().manual_seed(0)
    u = torch.linalg.qr(torch.randn(64, 3, generator=g))[0].T
    w = torch.stack([torch.zeros(64), 0.1 * u[0], 5 * u[1], 10 * u[2]])
    lin = nn.Linear(64, 4)
    with torch.no_grad():
        lin.weight.copy_(w)
        lin.bias.copy_(torch.tensor([1.0, 0.9, 0.0, -0.3]) - w @ torch.full((64,), 0.5))
    x = (0.5 + 0.05 * torch.randn(8, 1, 8, 8, generator=torch.Generator().manual_seed(1))).clamp(0, 1)
    return nn.Sequential(nn.Flatten(), lin).eval(), x, torch.zeros(8, dtype=torch.long)


def _case(name: str) -> tuple[nn.Module, torch.Tensor, torch.Tensor, int]:
    if name == "decoy":
        return (*_decoy(), 4)
    return (trained_patch_model(), *template_data(6, seed=5), 10)


def _all_at_once(last: int, broke: bool, targets_left: int, points: int) -> int:
    return max(1, min(targets_left, fab.ROWS // points))


def _sequential(norm: str) -> type:
    """The sequential loop the side-by-side one must reproduce at ``norm``."""
    import torchattacks

    if norm == "Linf":
        return torchattacks.APGDT
    cls = _apgdt_class()

    class Sequential(cls):  # type: ignore[misc, valid-type]
        def perturb(self, x_in, y_in, best_loss=False, cheap=True):
            with pytest.MonkeyPatch.context() as m:
                m.setattr(apgdt, "batchable", lambda atk, x: False)
                return super().perturb(x_in, y_in, best_loss=best_loss, cheap=cheap)

    return Sequential


_REFERENCES: dict[tuple[str, str, float], torch.Tensor] = {}


def _reference(case: str, norm: str, eps: float) -> torch.Tensor:
    """The sequential loop's points for a case. They do not depend on the grouping under test (the sequential
    loop reads neither ``fab.ROWS`` nor the schedule), so each is computed once per process, before a test
    patches those, and shared by the six groupings of its case."""
    key = (case, norm, eps)
    if key not in _REFERENCES:
        model, x, y, classes = _case(case)
        with attack_mode(model):
            _REFERENCES[key] = _attack(_sequential(norm), GradSafe(model), x, y, norm, eps, classes)
    return _REFERENCES[key]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("case", "norm", "eps"),
    [
        ("trained", "Linf", 4 / 255),
        ("trained", "L2", 0.2),
        ("decoy", "Linf", 0.03),
        ("decoy", "L2", 0.2),
    ],
)
@pytest.mark.parametrize("rows", [1, 12, FULL])
@pytest.mark.parametrize("schedule", ["doubling", "all at once"])
def test_side_by_side_targets_return_the_sequential_points(
    case: str, norm: str, eps: float, rows: int, schedule: str, monkeypatch
) -> None:
    """Every grouping of the targets gives the sequential loop's points: the shipped schedule, and every
    target in one group (where groups are cut short at a break and the random stream rewound)."""
    reference = _reference(case, norm, eps)
    model, x, y, classes = _case(case)
    monkeypatch.setattr(fab, "ROWS", rows)
    if schedule == "all at once":
        monkeypatch.setattr(apgdt, "group_size", _all_at_once)
    cut, broke_after_cut = [], []
    run_group = apgdt._run_group

    def spy(*args, **kwargs):
        used, fooled, points = run_group(*args, **kwargs)
        broke_after_cut.append(any(cut) and bool(fooled.any()))
        cut.append(used < args[-1])
        return used, fooled, points

    monkeypatch.setattr(apgdt, "_run_group", spy)
    with attack_mode(model):
        wrapped = GradSafe(model)
        ours = _attack(_apgdt_class(), wrapped, x, y, norm, eps, classes)
        assert cut  # the side-by-side loop ran
        with torch.no_grad():
            broken = int((model(ours).argmax(1) != y).sum())
    assert 0 < broken < len(x)
    assert torch.equal(ours, reference)
    if case == "decoy" and rows == FULL:  # a group was cut short, the stream rewound, later points broken
        assert any(cut) and any(broke_after_cut)
    elif case == "trained" and rows > 1 and schedule == "all at once":
        assert any(cut)  # a group was cut short and the random stream rewound
