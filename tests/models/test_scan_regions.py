"""What the automatic-BPDA scan sees beyond single ops (:mod:`robustbench_wave.models.autobpda`): a defence
that acts on dark images only is found on an 8-row probe; values cut from the input's gradient in a region
with no rule (a median filter under ``no_grad``, a JPEG through torchvision's integer codec) and the values
of a forward that optimises from them are linked to the region's entry by the identity (Athalye et al.'s
BPDA for purifiers), so the bpda input gradient is the classifier's gradient at the purified image
(oracle: plain autograd of the classifier at ``g(x)``, and a closed-form total-variation purifier); the
forward values stay bit-identical; a region whose values come back in another shape stays unhandled."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from robustbench_wave.evaluation.trust import path_reason
from robustbench_wave.models import autobpda as ab
from robustbench_wave.models.frontend import GradMode, grad_mode
from tests.support import gradient_models as gm

X = gm.probe_images(8, dark=(6,))  # one dark image, beyond the first two rows
Y = torch.arange(8) % 10


def _loss(logits: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits, Y[: len(logits)], reduction="sum")


def _bpda_gradient(model: nn.Module, x: torch.Tensor = X) -> tuple[torch.Tensor, torch.Tensor]:
    """The bpda-mode logits and input gradient of the loss."""
    xr = x.clone().requires_grad_(True)
    with grad_mode(model, "bpda"):
        logits = model(xr)
        (grad,) = torch.autograd.grad(_loss(logits), xr)
    return logits.detach(), grad


def _oracle(net: nn.Module, purified: torch.Tensor) -> torch.Tensor:
    """The classifier's input gradient at the purified images, by plain autograd."""
    z = purified.detach().clone().requires_grad_(True)
    (grad,) = torch.autograd.grad(_loss(net(z)), z)
    return grad


def _split(model: nn.Module) -> tuple[Callable[[torch.Tensor], torch.Tensor], nn.Module]:
    """The front-end and the classifier behind it of a :func:`gm.defended` model."""
    return model[0], nn.Sequential(*list(model)[1:])


# ------------------------------------------------------------------------------------ beyond two rows


def test_a_defence_on_dark_images_only_is_found_when_one_probe_row_is_dark() -> None:
    assert ab.PROBE_ROWS >= 8
    model = gm.defended(gm.Front(gm.dark_row_quantise))
    auto = ab.auto_bpda(model, X)
    assert isinstance(auto, ab.AutoBPDA)
    assert (ab.ZERO_GRADIENT, "round", ab.STRAIGHT_THROUGH) in {
        (f.kind, f.op, f.rule) for f in auto.path.findings
    }
    assert auto.path.modes == (GradMode.EXACT, GradMode.BPDA) and auto.path.unhandled == ()
    weight = model[2].weight.detach()  # the oracle: a linear model's gradient is the same at every point
    logits, grad = _bpda_gradient(auto)
    probs = torch.softmax(logits, dim=1)
    by_hand = ((probs - F.one_hot(Y, 10).float()) @ weight).view_as(X)
    assert torch.allclose(grad, by_hand, atol=1e-5)
    xr = X.clone().requires_grad_(True)
    (exact,) = torch.autograd.grad(_loss(auto(xr)), xr)  # exact: round cuts the dark row only
    assert torch.equal(exact[6], torch.zeros_like(exact[6])) and exact[0].abs().sum() > 0


def test_bright_probe_rows_find_nothing_in_the_same_defence() -> None:
    model = gm.defended(gm.Front(gm.dark_row_quantise))
    assert (
        ab.scan(model, gm.probe_images(8)).findings == () and ab.auto_bpda(model, gm.probe_images(8)) is model
    )


# ---------------------------------------------------------------------------------------- regions

#: front -> (kind, op) of the cut the region starts with
REGIONS = {
    "median": (gm.median3x3, ab.NO_GRAD, "pad"),
    "median_per_image": (gm.median3x3_per_image, ab.NO_GRAD, "Tensor.unbind"),
    "jpeg": (gm.torchvision_jpeg, ab.INTEGER_CAST, "Tensor.to"),
    "jpeg_batch": (gm.torchvision_jpeg_batch, ab.INTEGER_CAST, "Tensor.to"),
}


@pytest.mark.filterwarnings("ignore:The image decoding and encoding:DeprecationWarning")  # torchvision.io
@pytest.mark.parametrize("name", sorted(REGIONS))
def test_a_region_without_a_rule_is_linked_by_the_identity_and_its_gradient_is_the_nets(name: str) -> None:
    front, kind, op = REGIONS[name]
    model = gm.defended(gm.Front(front), hidden=32)
    auto = ab.auto_bpda(model, X)
    path = auto.path
    assert (kind, op, ab.REGION) in {(f.kind, f.op, f.rule) for f in path.findings}, path.findings
    assert path.unhandled == () and path.modes == (GradMode.EXACT, GradMode.BPDA) and not path.exact_gradient
    assert path_reason(path.to_dict()) is None  # linked: nothing marks it
    _, net = _split(model)
    with torch.no_grad():
        purified = front(X)
        plain = model(X)
    logits, grad = _bpda_gradient(auto)
    assert torch.equal(logits, plain)  # forward values bit-identical
    oracle = _oracle(net, purified)
    assert oracle.abs().max() > 0 and torch.allclose(grad, oracle, rtol=1e-5, atol=1e-7)


def test_a_region_whose_values_come_back_in_another_shape_stays_unhandled() -> None:
    model = gm.defended(gm.Front(gm.median3x3_valid), features=26 * 26)
    path = ab.scan(model, X)
    assert (ab.NO_GRAD, "Tensor.unfold", ab.UNHANDLED) in {(f.kind, f.op, f.rule) for f in path.findings}
    assert "Tensor.unfold" in path.unhandled and not path.reaches_input
    assert path_reason(path.to_dict()) is not None


# --------------------------------------------------------------------------- optimising in the forward

PURIFIERS = {
    "autograd_grad": gm.tv_purify,
    "no_grad_forward": gm.tv_purify_no_grad,
    "optimiser": gm.tv_purify_optimiser,
}


@pytest.mark.parametrize("name", sorted(PURIFIERS))
def test_a_forward_that_optimises_is_scanned_and_bpda_is_the_identity_across_it(name: str) -> None:
    front = PURIFIERS[name]
    model = gm.defended(gm.Front(front), hidden=32)
    with torch.no_grad():
        plain = model(X)
    auto = ab.auto_bpda(model, X)
    path = auto.path
    assert (ab.NEW_LEAF, ab.REGION) in {(f.kind, f.rule) for f in path.findings}, path.findings
    assert path.unhandled == () and GradMode.BPDA in path.modes and path_reason(path.to_dict()) is None
    logits, grad = _bpda_gradient(auto)
    assert torch.equal(logits, plain)  # the inner optimisation ran as written
    purified = gm.tv_purify_reference(X)  # the oracle: the same steps in closed form
    assert torch.allclose(front(X), purified, atol=1e-5)
    _, net = _split(model)
    assert torch.allclose(grad, _oracle(net, purified), rtol=1e-4, atol=1e-6)


def test_an_optimised_leaf_that_reaches_the_logits_stays_unhandled() -> None:
    path = ab.scan(gm.defended(gm.Front(gm.tv_purify_kept_leaf)), X)
    assert "Tensor.requires_grad_" in path.unhandled and not path.reaches_input
    assert path_reason(path.to_dict()) is not None
