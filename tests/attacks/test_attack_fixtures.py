"""Checks that the shared test models (tests/support/attack_models.py) are what the tests assume."""

from __future__ import annotations

import torch

from robustbench_wave.attacks import list_families, resolve_level
from robustbench_wave.models.frontend import has_fixed_front_end
from tests.support.attack_models import (
    ToyFrontEnd,
    frontend_model,
    labelled,
    patch_model,
    small_cnn,
    teacher,
    tiny_suite,
    toy_data,
)


def test_tiny_suite_covers_every_family() -> None:
    assert {a.family for a in tiny_suite().attacks} == set(list_families())


def test_patch_model_lets_every_family_run_with_its_defaults() -> None:
    """The registry tests use the families' defaults: lowfreq-pgd's level = "auto" needs a patch tokenizer."""
    assert resolve_level(patch_model(), "auto") == 1  # 2x2 patches


def test_toy_front_end_is_a_sparsified_orthogonal_transform() -> None:
    fe = ToyFrontEnd(threshold=0.0)
    x = toy_data(4)
    w = fe.smooth_transform(x)
    # orthogonal 2x2 Haar: energy preserved, so the smooth transform is invertible and has full gradient
    torch.testing.assert_close(w.pow(2).sum((1, 2, 3)), x.pow(2).sum((1, 2, 3)))
    fe.threshold = 0.15
    assert (fe.transform(x) == 0).any() and has_fixed_front_end(frontend_model())


def test_labelled_toy_problems_are_neither_trivial_nor_saturated() -> None:
    """What the attack tests rely on: the CNNs' labels are not one class, and the teacher's margins spread.

    (The teacher labels uniform [0,1] data with one class: its logits are dominated by w . 0.5, so its tests are
    about margins, not about classes.)

    The teacher is linear, so the smallest L∞ perturbation that flips example i is margin_i / ||w_y - w_j||_1
    (closed form): the tests' budgets (0.03 ... 0.3) must break some points and leave others standing.
    """
    x = toy_data(48)
    for m in (small_cnn(), frontend_model(), patch_model()):
        assert len(labelled(m, x).unique()) >= 2, f"{m} labels the toy data with one class only"
    lin = teacher()[1]
    y = labelled(teacher(), x)
    logits = lin(x.flatten(1))
    w = lin.weight.detach()
    flip = torch.full((len(x),), float("inf"))
    for j in range(w.shape[0]):
        margin = (logits.gather(1, y[:, None]).squeeze(1) - logits[:, j]).detach()
        dist = margin / (w[y] - w[j]).abs().sum(1).clamp_min(1e-12)
        flip = torch.where(y == j, flip, torch.minimum(flip, dist))
    assert (flip < 0.1).any() and (flip > 0.1).any()
