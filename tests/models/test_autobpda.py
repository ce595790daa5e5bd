"""Automatic BPDA (:mod:`robustbench_wave.models.autobpda`): the scan finds each kind of operation that stops
the input's gradient in small hand-made models and nothing in a plain CNN; the straight-through gradient of
``round(8x)/8`` in front of a linear model is the unquantised twin's, computed by hand; the forward values
never change; a module's own ``bpda_approximation`` replaces the automatic rules inside it; the gradient-mode
machinery offers exact and bpda for such a model, all three only with a ``FixedFrontEnd``."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from robustbench_wave.attacks import GradSafe, modes_for
from robustbench_wave.evaluation import resolve_grad_modes
from robustbench_wave.models import autobpda as ab
from robustbench_wave.models.frontend import GradMode, grad_mode, supported_grad_modes
from tests.support.attack_models import frontend_model, toy_data
from tests.support.autobpda_models import (
    OP_CASES,
    Quantize,
    Thermometer,
    Transform,
    defended,
    linear_head,
    plain_cnn,
    quantize,
)

X = toy_data(6, seed=3)
Y = torch.tensor([0, 1, 2, 0, 1, 2])


def _input_gradient(model: torch.nn.Module, x: torch.Tensor = X) -> torch.Tensor:
    xr = x.clone().requires_grad_(True)
    loss = F.cross_entropy(model(xr), Y[: len(x)], reduction="sum")
    (grad,) = torch.autograd.grad(loss, xr, allow_unused=True)
    return torch.zeros_like(x) if grad is None else grad


@pytest.mark.parametrize("case", sorted(OP_CASES))
def test_the_scan_finds_each_kind_of_operation_and_its_rule(case: str) -> None:
    expected = OP_CASES[case]
    path = ab.scan(defended(Transform(expected.fn)), X)
    assert (expected.kind, expected.rule) in {(f.kind, f.rule) for f in path.findings}, path.findings
    if expected.rule in (ab.STRAIGHT_THROUGH, ab.ROUND_TRIP) and expected.bpda:  # round trip: linked
        assert path.modes == (GradMode.EXACT, GradMode.BPDA) and path.bpda_gradient
    elif expected.rule == ab.STRAIGHT_THROUGH:  # the rule's gradient is the exact one: no mode to add
        assert path.modes == (GradMode.EXACT,) and path.exact_gradient and not path.bpda_changes
    elif expected.rule == ab.GATE:
        assert path.modes == (GradMode.EXACT,) and path.exact_gradient
    else:  # the values leave torch and come back in another shape: nothing links them
        assert not path.reaches_input and path.summary.startswith("no gradient reaches the input")


def test_a_plain_cnn_has_nothing_to_find_and_stays_as_it_is() -> None:
    cnn = plain_cnn()
    path = ab.scan(cnn, X)
    assert path.findings == () and path.exact_gradient
    assert ab.auto_bpda(cnn, X) is cnn and supported_grad_modes(cnn) == ["exact"]


def test_straight_through_gradient_of_round_is_the_unquantised_twins_by_hand() -> None:
    head = linear_head()
    model = ab.auto_bpda(defended(Quantize(), head), X)
    assert isinstance(model, ab.AutoBPDA) and not model.training  # as handed over: in eval mode
    weight, bias = head[1].weight.detach(), head[1].bias.detach()
    q = quantize(X).flatten(1)  # the oracle: d CE / d x of the linear model at the quantised point
    probs = torch.softmax(q @ weight.T + bias, dim=1)
    by_hand = ((probs - F.one_hot(Y, 3).float()) @ weight).view_as(X)
    with grad_mode(model, "bpda"):
        bpda = _input_gradient(model)
        bpda_logits = model(X.clone().requires_grad_(True)).detach()
    assert torch.allclose(bpda, by_hand, atol=1e-6)
    assert torch.equal(_input_gradient(model), torch.zeros_like(X))  # exact: round's gradient is zero
    with torch.no_grad():
        assert torch.equal(bpda_logits, model(X)) and torch.equal(model(X), head(quantize(X)))


def test_a_models_own_bpda_approximation_replaces_the_automatic_rules_inside_it() -> None:
    thermometer, head = Thermometer(), linear_head()
    model = ab.auto_bpda(defended(thermometer, head), X)
    assert [(f.kind, f.op, f.rule) for f in model.path.findings] == [(ab.APPROXIMATION, "0", ab.MODEL_RULE)]
    h = thermometer(X).requires_grad_(True)  # the oracle: the head's gradient at the exact encoding,
    (upstream,) = torch.autograd.grad(F.cross_entropy(head(h), Y, reduction="sum"), h)
    _, oracle = torch.autograd.functional.vjp(
        thermometer.bpda_approximation, X, upstream
    )  # through the smooth one
    with grad_mode(model, "bpda"):
        assert torch.allclose(_input_gradient(model), oracle, atol=1e-6)


def test_the_gradient_modes_offered_follow_what_the_model_has() -> None:
    auto = ab.auto_bpda(defended(Quantize()), X)
    assert supported_grad_modes(auto) == modes_for(auto) == ["exact", "bpda"]
    assert resolve_grad_modes(auto, None) == ["exact", "bpda"]
    with pytest.raises(ValueError, match=r"\['blocked'\]; it offers \['exact', 'bpda'\]"):  # never a fallback
        resolve_grad_modes(auto, ["exact", "blocked", "bpda"])
    assert resolve_grad_modes(plain_cnn(), None) == ["exact"]
    with pytest.raises(ValueError, match="offers grad modes"), grad_mode(auto, "blocked"):
        pass
    wrapped = GradSafe(auto)
    with grad_mode(wrapped, "bpda"):
        assert auto.grad_mode is GradMode.BPDA and _input_gradient(wrapped).abs().sum() > 0
    assert auto.grad_mode is GradMode.EXACT
    fixed = frontend_model()  # a FixedFrontEnd keeps its own BPDA and every mode: it is not scanned
    assert ab.auto_bpda(fixed, X) is fixed and resolve_grad_modes(fixed, None) == ["exact", "blocked", "bpda"]


def test_the_finding_is_recorded_for_meta_and_the_scan_leaves_the_random_state_alone() -> None:
    class Noisy(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return quantize(x + 0.01 * torch.randn_like(x))

    model = defended(Noisy())
    state = torch.get_rng_state()
    auto = ab.auto_bpda(model, X)
    assert torch.equal(torch.get_rng_state(), state)
    meta = ab.gradient_path_meta(auto)["gradient_path"]
    assert meta["modes"] == ["exact", "bpda"] and not meta["exact_gradient"] and meta["bpda_gradient"]
    assert meta["findings"] == [{"kind": ab.ZERO_GRADIENT, "op": "round", "rule": ab.STRAIGHT_THROUGH}]
    assert "bpda mode goes straight through" in meta["summary"]
    assert ab.gradient_path_meta(plain_cnn()) == {}


@pytest.mark.slow
def test_a_timm_vision_transformer_has_nothing_to_find() -> None:
    import timm

    vit = timm.create_model("vit_tiny_patch16_224", pretrained=False, num_classes=3, img_size=8, patch_size=2,
                            in_chans=1, depth=2).eval()  # fmt: skip
    path = ab.scan(vit, X)
    assert path.findings == () and path.exact_gradient
