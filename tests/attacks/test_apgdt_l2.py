"""APGD-T at L2 keeps one step size per point (attacks/apgdt.py), as the paper and the authors' code do.

torchattacks' ``APGDT`` takes the first row's L2 step size for the whole batch (``step_size[0]``), so a point's
iterates depended on its batch mates. Oracles: the same point attacked alone (its random start drawn from the
same place of the stream), the authors' ``APGDAttack_targeted`` (when ``pyautoattack`` is importable), and the
source of torchattacks' own ``APGD`` iteration that ours runs.
"""

from __future__ import annotations

import difflib
import inspect

import pytest
import torch

from robustbench_wave.attacks import GradSafe, apgdt, attack_mode
from robustbench_wave.attacks.torchattacks_backend import _apgdt_class
from tests.support.attack_models import template_data, trained_patch_model


def _single_runs(cls: type, eps: float) -> tuple[list[bool], int]:
    """Per point of a 12-point batch: does its run inside the batch equal its run alone? And how many broke."""
    model = trained_patch_model()
    x, y = template_data(12, seed=5)
    with attack_mode(model):
        atk = cls(GradSafe(model), norm="L2", eps=eps, steps=20, n_restarts=1, seed=0, n_classes=10)
        atk.target_class = 2
        torch.manual_seed(3)
        best, acc, _, adv = atk.attack_single_run(x, y)
        same = []
        for k in range(len(x)):
            torch.manual_seed(3)
            torch.randn(k, *x.shape[1:])  # the random starts of the rows before k
            best_k, acc_k, _, adv_k = atk.attack_single_run(x[k : k + 1], y[k : k + 1])
            same.append(
                torch.equal(best_k[0], best[k]) and torch.equal(adv_k[0], adv[k]) and acc_k[0] == acc[k]
            )
    return same, int((~acc).sum())


@pytest.mark.slow
def test_a_points_l2_iterates_do_not_depend_on_its_batch() -> None:
    """Each point attacked inside a batch gets what it gets alone; torchattacks' own APGDT does not."""
    import torchattacks

    same, broken = _single_runs(_apgdt_class(), eps=0.12)
    assert 0 < broken < len(same)
    assert all(same)
    coupled, _ = _single_runs(torchattacks.APGDT, eps=0.12)
    assert coupled[0] and not all(coupled[1:])  # row 0 sets everyone's step in torchattacks' L2 update


@pytest.mark.slow
def test_l2_apgd_t_returns_the_authors_points() -> None:
    """Bit for bit the authors' APGD-T on a zoo wavelet model (same seed, targets, batch).

    The budget is a power of two: torchattacks scales the random start and the step as (eps * t) / ||t|| where
    the authors' code takes eps * (t / ||t||); the two round alike only when eps and the step are powers of
    two (Fashion-MNIST's L2 1.0, CIFAR-10's 0.25 and 0.5), and differ in the last bits otherwise."""
    autopgd = pytest.importorskip("pyautoattack.autopgd_base")
    from robustbench_wave.data import dataset_info
    from tests.support.byom_models import fit_data, stand_in_zoo
    from tests.support.datasets import GRAY

    data = fit_data(GRAY, 32)
    model, _ = stand_in_zoo("wavelet", dataset_info(GRAY), data)
    x, y = data[0][-32:], data[1][-32:]
    eps, steps = 0.125, 30
    with attack_mode(model):
        wrapped = GradSafe(model)
        with torch.no_grad():
            correct = wrapped(x).argmax(1) == y
        x, y = x[correct], y[correct]
        atk = _apgdt_class()(wrapped, norm="L2", eps=eps, steps=steps, n_restarts=1, seed=0, n_classes=10)
        acc, ours = atk.perturb(x, y)
        ref = autopgd.APGDAttack_targeted(
            wrapped, n_iter=steps, norm="L2", eps=eps, seed=0, n_target_classes=9, device=x.device
        ).perturb(x, y)
    assert 0 < int(acc.sum()) < len(x)
    assert torch.equal(ours, ref)


def test_targeted_dlr_is_rounded_as_the_authors_loss() -> None:
    """``targeted_dlr`` equals the authors' ``dlr_loss_targeted`` bit for bit, on logits where torchattacks'
    rounding of the same formula (z_pi1 - z_pi3 / 2 - z_pi4 / 2) does not."""
    autopgd = pytest.importorskip("pyautoattack.autopgd_base")
    import torchattacks

    g = torch.Generator().manual_seed(0)
    logits = 3 * torch.randn(512, 10, generator=g)
    y, targets = torch.randint(0, 10, (512,), generator=g), torch.randint(0, 10, (512,), generator=g)
    authors = autopgd.APGDAttack_targeted(torch.nn.Identity(), eps=1.0)
    authors.y_target = targets
    reference = authors.dlr_loss_targeted(logits, y)
    assert torch.equal(apgdt.targeted_dlr(logits, y, targets), reference)
    theirs = torchattacks.APGDT(torch.nn.Identity()).dlr_loss_targeted(logits, y, targets)
    assert not torch.equal(theirs, reference)


def _source_lines(cls: type) -> list[str]:
    """``cls.attack_single_run``'s code lines without comments and blank lines."""
    lines = (line.split("#")[0].strip() for line in inspect.getsource(cls.attack_single_run).splitlines())
    return [line for line in lines if line]


def test_our_l2_iteration_is_torchattacks_apgdt_but_for_the_step_and_the_loss() -> None:
    """``l2_single_run`` runs torchattacks' ``APGD.attack_single_run``: it must differ from ``APGDT``'s only in
    the per-row step, the loss it is given and ``APGDT``'s target forward (done before the start in ours, as
    the authors do). A torchattacks release that changes either iteration fails here."""
    import torchattacks

    diff = difflib.ndiff(_source_lines(torchattacks.APGDT), _source_lines(torchattacks.APGD))
    changed = sorted(line for line in diff if line[:2] in ("- ", "+ "))
    assert changed == sorted(
        [
            "- output = self.get_logits(x)",
            "- y_target = output.sort(dim=1)[1][:, -self.target_class]",
            "- loss_indiv = self.dlr_loss_targeted(logits, y, y_target)",
            "- loss_indiv = self.dlr_loss_targeted(logits, y, y_target)",
            "- x_adv_1 = x_adv + step_size[0] * grad / (",
            "+ x_adv_1 = x_adv + step_size * grad / (",
            '+ if self.loss == "ce":',
            '+ criterion_indiv = nn.CrossEntropyLoss(reduction="none")',
            '+ elif self.loss == "dlr":',
            "+ criterion_indiv = self.dlr_loss",
            "+ else:",
            '+ raise ValueError("unknown loss")',
            "+ loss_indiv = criterion_indiv(logits, y)",
            "+ loss_indiv = criterion_indiv(logits, y)",
            "+ counter = 0",
            "+ n_reduced = fl_oscillation.astype(float).sum()",
        ]
    )


@pytest.mark.parametrize(("numel", "concatenates"), [(64, True), (784, True), (25, False), (100, False)])
def test_side_by_side_l2_only_where_randn_rows_concatenate(numel: int, concatenates: bool) -> None:
    """One randn of g×n rows is g randn of n rows only for rows of a multiple of 16 numbers (torch's CPU
    normal sampler); ``batchable`` follows that rule."""
    torch.manual_seed(0)
    once = torch.randn(6, numel)
    torch.manual_seed(0)
    in_turn = torch.cat([torch.randn(2, numel) for _ in range(3)])
    assert torch.equal(once, in_turn) == concatenates
    atk = _apgdt_class()(torch.nn.Identity(), norm="L2", eps=1.0, n_restarts=1, n_classes=10)
    assert apgdt.batchable(atk, torch.zeros(2, 1, numel)) == concatenates
