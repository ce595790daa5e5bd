"""The construction gallery of issue 30 (:mod:`tests.support.constructions`): each construction in front of a
fixed linear head. In bpda mode the forward values are bit-identical to the plain model's; where a rule
applies, the bpda-mode input gradient is the smooth twin's (oracle: the twin's vector-Jacobian product at
the clean input with the head's gradient at the defended activations), equal or -- for the scale-aware
rules -- aligned with it; where none applies the finding says "unhandled", ``to_dict()`` lists it, and
:func:`~robustbench_wave.models.autobpda.auto_bpda` warns. A randomised model's bpda forward draws exactly
what the plain forward draws."""

from __future__ import annotations

import logging

import pandas as pd
import pytest
import torch
import torch.nn.functional as F

from robustbench_wave.attacks import parse_suite
from robustbench_wave.evaluation import EvalSettings, evaluate, metrics
from robustbench_wave.models import autobpda as ab
from robustbench_wave.models.frontend import GradMode, grad_mode
from robustbench_wave.models.gallery import (
    BitDepthReduction,
    Defended,
    JpegQuantization,
    RandomResizePad,
    SmallCNN,
    StochasticActivationPruning,
    ThermometerEncoding,
)
from tests.support.attack_models import labelled, teacher, toy_data
from tests.support.autobpda_models import Transform, defended, linear_head
from tests.support.constructions import CONSTRUCTIONS, NOTHING_TO_FIND, bernoulli_of_detached

X = toy_data(6, seed=3)
Y = torch.tensor([0, 1, 2, 0, 1, 2])


def _loss(logits: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits, Y[: len(logits)], reduction="sum")


def _bpda_gradient(model: torch.nn.Module, seed: int = 0) -> torch.Tensor:
    xr = X.clone().requires_grad_(True)
    torch.manual_seed(seed)
    with grad_mode(model, "bpda"):
        (grad,) = torch.autograd.grad(_loss(model(xr)), xr)
    return grad


def _twin_gradient(name: str, seed: int = 0) -> torch.Tensor:
    """The oracle: the twin's VJP at X with the head's gradient at the defended activations."""
    case, head = CONSTRUCTIONS[name], linear_head()
    torch.manual_seed(seed)
    with torch.no_grad():
        h = case.defence(X)
    h.requires_grad_(True)
    (upstream,) = torch.autograd.grad(_loss(head(h)), h)
    _, oracle = torch.autograd.functional.vjp(case.twin, X, upstream)
    return oracle


@pytest.mark.parametrize("name", sorted(CONSTRUCTIONS))
def test_each_construction_gets_its_rule_or_an_unhandled_finding(name: str) -> None:
    case = CONSTRUCTIONS[name]
    model = defended(Transform(case.defence))
    torch.manual_seed(0)
    path = ab.scan(model, X)
    found = {(f.kind, f.rule) for f in path.findings}
    assert (case.kind, case.rule) in found, path.findings
    if case.op is not None:
        assert case.op in {f.op for f in path.findings if f.kind == case.kind}
    assert (GradMode.BPDA in path.modes) == case.bpda, (path.modes, path.findings)
    if case.rule == ab.UNHANDLED:
        assert case.op in path.to_dict()["unhandled"] and "unhandled" in path.summary
    else:
        assert path.to_dict()["unhandled"] == []


@pytest.mark.parametrize("name", sorted(CONSTRUCTIONS))
def test_the_bpda_forward_is_the_plain_forward_bit_for_bit(name: str) -> None:
    plain_model = defended(Transform(CONSTRUCTIONS[name].defence))
    model = ab.AutoBPDA(plain_model, ab.scan(plain_model, X))
    model.modes = (GradMode.EXACT, GradMode.BPDA)  # run the bpda forward even where it is not offered
    torch.manual_seed(1)
    with torch.no_grad():
        plain = model(X)
    torch.manual_seed(1)
    with grad_mode(model, "bpda"), torch.enable_grad():
        bpda = model(X.clone().requires_grad_(True)).detach()
    assert torch.equal(plain, bpda)


@pytest.mark.parametrize("name", sorted(n for n, c in CONSTRUCTIONS.items() if c.twin is not None and c.bpda))
def test_the_bpda_gradient_is_the_smooth_twins(name: str) -> None:
    case = CONSTRUCTIONS[name]
    torch.manual_seed(0)
    model = ab.auto_bpda(defended(Transform(case.defence)), X)
    bpda, oracle = _bpda_gradient(model), _twin_gradient(name)
    assert bpda.abs().sum() > 0
    if case.exact:
        assert torch.allclose(bpda, oracle, rtol=1e-4, atol=1e-6), (bpda - oracle).abs().max()
    else:  # scale-aware: the direction, and the size within a factor of 1.5
        cosine = F.cosine_similarity(bpda.flatten(), oracle.flatten(), dim=0)
        ratio = bpda.norm() / oracle.norm()
        assert cosine > 0.99 and 1 / 1.5 < ratio < 1.5, (cosine, ratio)


def test_an_unhandled_finding_is_a_warning_at_the_default_log_level(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger=ab.__name__):
        ab.auto_bpda(defended(Transform(CONSTRUCTIONS["rounded_equal"].defence)), X, name="eq")
    assert any(
        r.levelno == logging.WARNING and "unhandled: Tensor.__eq__" in r.message for r in caplog.records
    )


@pytest.mark.parametrize("name", sorted(NOTHING_TO_FIND))
def test_sound_constructions_have_nothing_to_find(name: str) -> None:
    model = defended(Transform(NOTHING_TO_FIND[name]))
    path = ab.scan(model, X)
    assert path.findings == () and path.exact_gradient and ab.auto_bpda(model, X) is model


def test_a_custom_functions_inner_ops_are_not_reported_as_straight_through() -> None:
    path = ab.scan(defended(Transform(CONSTRUCTIONS["function_zero_backward"].defence)), X)
    assert [f.op for f in path.findings] == ["_RoundZeroBackward.apply"]


def test_a_deliberate_detach_before_a_draw_earns_no_bpda_mode() -> None:
    path = ab.scan(defended(Transform(bernoulli_of_detached)), X)
    assert path.modes == (GradMode.EXACT,) and path.exact_gradient and path.unhandled == ()


def _sap(seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    return SmallCNN(3, 1, width=4, activation=StochasticActivationPruning).eval()


RANDOMISED = {
    "sap": _sap,
    "resize_pad": lambda: Defended(RandomResizePad(8, 10), SmallCNN(3, 1, width=4)).eval(),
    "bernoulli_of_rounded": lambda: defended(Transform(CONSTRUCTIONS["bernoulli_of_rounded"].defence)),
    "unlisted_draw": lambda: defended(  # fractional max pooling draws its windows: not in autobpda's list
        Transform(lambda x: F.fractional_max_pool2d((x > 0.5).float(), 2, output_size=(4, 4))),
        linear_head(dim=16),
    ),
    "noisy_round": lambda: defended(
        Transform(lambda x: torch.round(8 * (x + 0.05 * torch.randn_like(x))) / 8)
    ),
}


@pytest.mark.parametrize("name", sorted(RANDOMISED))
def test_a_randomised_models_bpda_forward_draws_what_the_plain_forward_draws(name: str) -> None:
    model = RANDOMISED[name]()
    torch.manual_seed(7)
    with torch.no_grad():
        plain = model(X)
    after_plain = torch.get_rng_state()
    torch.manual_seed(7)
    with torch.enable_grad(), ab.straight_through(model):
        bpda = model(X.clone().requires_grad_(True))
    assert torch.equal(plain, bpda.detach()) and torch.equal(torch.get_rng_state(), after_plain)


def test_sap_has_no_bpda_mode_and_the_bernoulli_of_a_rounded_value_has_one() -> None:
    assert ab.scan(_sap(), X).modes == (GradMode.EXACT,)
    torch.manual_seed(0)
    assert GradMode.BPDA in ab.scan(RANDOMISED["bernoulli_of_rounded"](), X).modes


GALLERY_DEFENCES = {
    "bit_depth": lambda: BitDepthReduction(5),
    "jpeg": lambda: JpegQuantization(75),
    "thermometer": lambda: ThermometerEncoding(4),
}


@pytest.mark.parametrize("name", sorted(GALLERY_DEFENCES))
def test_the_gallery_defences_keep_their_forward_and_their_bpda_mode(name: str) -> None:
    front = GALLERY_DEFENCES[name]()
    torch.manual_seed(0)
    head = SmallCNN(3, 4 if name == "thermometer" else 1, width=4).eval()
    model = Defended(front, head).eval()
    x = toy_data(2, seed=5, shape=(1, 16, 16))
    path = ab.scan(model, x)
    assert path.modes == (GradMode.EXACT, GradMode.BPDA) and path.unhandled == ()
    with torch.no_grad():
        plain = model(x)
    with torch.enable_grad(), ab.straight_through(model):
        assert torch.equal(model(x.clone().requires_grad_(True)).detach(), plain)


# ------------------------------------------------------------------------------------------- end to end

E2E = {  # construction -> its exact gradient is masked (the attack needs the bpda mode)
    "setitem_threshold": False,
    "remainder": True,
    "function_zero_backward": True,
    "bucketize": True,
    "lookup_table": True,
    "steep_sigmoid": False,
    "scaled_threshold": False,  # a binarised image: robust accuracy under exact gradients is its clean one
}
GRID = [0.03, 0.06, 0.1]  # reference budget (lower middle): 0.06


def _robust(records: pd.DataFrame, mode: str) -> tuple[float, int]:
    rows = records[records["grad_mode"] == mode]
    return metrics.robust_accuracy(rows, "Linf", metrics.reference_eps(rows, "Linf"))


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(E2E))
def test_the_builtin_pgd_suite_through_the_rule_brings_the_defence_to_its_twin(name: str) -> None:
    case, head = CONSTRUCTIONS[name], teacher()
    twin = defended(Transform(case.twin), head)
    x = toy_data(200, seed=4)
    y = labelled(twin, x)
    pgd = {"name": "pgd", "family": "pgd", "threat": "Linf", "steps": 20, "rel_step_size": 0.125}
    suite = parse_suite(
        {"eps": {"default": {"Linf": GRID}}, "attack": [{"name": "clean", "family": "clean"}, pgd]}
    )
    model = ab.auto_bpda(defended(Transform(case.defence), head), x)
    twin_records = evaluate(twin, x, y, suite, EvalSettings(model_name="twin"), progress=False).records
    result = evaluate(model, x, y, suite, EvalSettings(model_name="defended"), progress=False)
    assert result.meta["models"]["defended"]["grad_modes"] == ["exact", "bpda"]
    acc, n = _robust(twin_records, "exact")
    low, high = metrics.wilson_interval(acc * n, n)
    rows = result.records
    worst, _ = metrics.robust_accuracy(rows, "Linf", metrics.reference_eps(rows, "Linf"))  # over both modes
    exact, _ = _robust(result.records, "exact")
    assert worst <= high, (name, worst, (low, high), exact)
    if E2E[name]:
        assert exact > high + 0.1, (name, exact, high)  # masked: exact gradients alone would not get there


SCALE_AWARE = ["scaled_threshold", "sign", "steep_sigmoid", "steep_clamp", "one_hot_max", "one_hot_topk"]


@pytest.mark.parametrize("name", SCALE_AWARE)
def test_a_scale_aware_rule_measures_each_example_on_its_own(name: str) -> None:
    model = ab.auto_bpda(defended(Transform(CONSTRUCTIONS[name].defence)), X)

    def gradient(x: torch.Tensor) -> torch.Tensor:
        xr = x.clone().requires_grad_(True)
        with grad_mode(model, "bpda"):
            (grad,) = torch.autograd.grad(_loss(model(xr)), xr)
        return grad

    whole = gradient(X)
    assert torch.allclose(whole[:2], gradient(X[:2]), atol=1e-7)
    assert torch.allclose(whole[3:], gradient(X[3:]), atol=1e-7)
