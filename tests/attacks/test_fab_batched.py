"""FAB-T with its targets side by side (attacks/fab.py) returns torchattacks' FAB-T points, bit for bit.

The oracle is ``torchattacks.FAB(multi_targeted=True)``, the sequential loop the batched runner replaces, on a
trained 10-class model where some targets break points and others do not.
"""

from __future__ import annotations

import pytest
import torch

from robustbench_wave.attacks import GradSafe, RunContext, attack_mode, fab, get_runner, parse_suite
from tests.support.attack_models import template_data, trained_patch_model


def _torchattacks_fab(
    model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, s: fab.FabSettings, restarts: int
):
    import torchattacks

    atk = torchattacks.FAB(
        model,
        norm=s.norm,
        eps=s.eps,
        steps=s.steps,
        n_restarts=restarts,
        seed=0,
        multi_targeted=True,
        n_classes=10,
    )
    return atk(x, y)


@pytest.mark.slow
@pytest.mark.parametrize(("norm", "eps"), [("Linf", 4 / 255), ("L2", 0.15)])
@pytest.mark.parametrize("rows", [1, 6, fab.ROWS])
def test_batched_targets_return_torchattacks_points(norm: str, eps: float, rows: int, monkeypatch) -> None:
    """Every grouping of the targets (one at a time, a few, all) gives torchattacks' points exactly."""
    model = trained_patch_model()
    x, y = template_data(6, seed=5)
    monkeypatch.setattr(fab, "ROWS", rows)
    s = fab.FabSettings(norm, eps, 15, 0.1, 1.05, 0.9)
    with attack_mode(model):
        wrapped = GradSafe(model)
        ours = fab.fab_t(wrapped, x, y, 9, s)
        reference = _torchattacks_fab(wrapped, x, y, s, restarts=1)
        with torch.no_grad():
            broken = int((model(ours).argmax(1) != y).sum())
    assert 0 < broken < len(x)  # some targets break points, some points stand: the choice of result matters
    assert torch.equal(ours, reference)


def test_runner_batches_one_restart_and_keeps_torchattacks_for_more() -> None:
    """The registered fab-t runner: one restart -> the batched runner; random restarts -> torchattacks' own."""
    model = trained_patch_model()
    x, y = template_data(4, seed=5)
    eps = 4 / 255
    with attack_mode(model):
        wrapped = GradSafe(model)
        for restarts in (1, 2):
            raw = {"name": "t", "family": "fab-t", "threat": "Linf", "steps": 5, "restarts": restarts}
            entry = parse_suite({"eps": {"default": {"Linf": [eps]}}, "attack": [raw]}).attacks[1]
            request = entry.request(wrapped, x, y, torch.arange(4), eps, RunContext(), 0)
            got = get_runner("fab-t", "torchattacks").fn(request).x_adv
            s = fab.FabSettings("Linf", eps, 5, 0.1, 1.05, 0.9)
            assert torch.equal(got, _torchattacks_fab(wrapped, x, y, s, restarts))


def test_group_size_doubles_after_a_group_that_broke_nothing_and_restarts_at_one() -> None:
    assert fab.group_size(0, False, 9, 3) == 1  # the first target alone
    assert fab.group_size(1, False, 8, 3) == 2
    assert fab.group_size(2, False, 6, 3) == 4
    assert fab.group_size(4, False, 2, 3) == 2  # no more than the targets left
    assert fab.group_size(4, True, 5, 3) == 1  # a break: one target again
    assert fab.group_size(8, False, 9, fab.ROWS // 2) == 2  # at most ROWS rows
    assert fab.group_size(8, False, 9, fab.ROWS + 1) == 1
