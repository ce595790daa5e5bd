"""The gradient-reliability probe (:mod:`robustbench_wave.models.gradcheck`, run by the automatic-BPDA scan):
planted gradients that no op shows -- a hook that returns noise, a shattered gradient, a forward that
depends on the grad mode -- each become a finding without a rule, so the model is wrapped, its summary says
so and the trust rule marks it; ordinary networks (a small CNN, a ResNet, a zoo ViT) and every gallery
defence keep exactly what they had (no finding of the probe's, wrapped only where they were before)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from torch import nn

from robustbench_wave.data import dataset_info, load_test_images
from robustbench_wave.evaluation.trust import path_reason
from robustbench_wave.models import autobpda as ab
from robustbench_wave.models import gradcheck
from robustbench_wave.models.gallery import GALLERY, SmallCNN
from robustbench_wave.models.vit import build_model
from tests.support import gradient_models as gm

PROBE_KINDS = {gradcheck.FORWARD_DIFFERS, gradcheck.GRADIENT_DISAGREES}
PLANTED = {
    "random_hook": gradcheck.GRADIENT_DISAGREES,
    "shattered": gradcheck.GRADIENT_DISAGREES,
    "grad_mode_switch": gradcheck.FORWARD_DIFFERS,
}


def _images() -> torch.Tensor:
    """Fashion-MNIST's first 8 test images (padded 32x32) where the machine has them, else synthetic ones."""
    try:
        return load_test_images("fashion-mnist", 8).images
    except (OSError, ValueError):
        return load_test_images("synthetic", 8).images


def _probe_findings(path: ab.GradientPath) -> list[ab.Finding]:
    return [f for f in path.findings if f.kind in PROBE_KINDS]


@pytest.mark.parametrize("name", sorted(PLANTED))
@pytest.mark.parametrize("data", ["planted", "dataset"])
def test_a_planted_gradient_fault_is_a_finding_the_trust_rule_marks(name: str, data: str) -> None:
    x = gm.probe_images(8) if data == "planted" else _images()[:, :, 2:30, 2:30]
    model = gm.defended(gm.Front(gm.WRONG_GRADIENTS[name]))
    auto = ab.auto_bpda(model, x, name=name)
    assert isinstance(auto, ab.AutoBPDA)
    found = _probe_findings(auto.path)
    assert [(f.kind, f.rule) for f in found] == [(PLANTED[name], ab.UNHANDLED)], auto.path.findings
    assert found[0].op in auto.path.unhandled and PLANTED[name] in auto.path.summary
    reason = path_reason(auto.path.to_dict())
    assert reason is not None and PLANTED[name] in reason
    assert auto.path.to_dict()["gradient_check"]["summary"].startswith("gradient probe: ")


def test_the_probe_runs_from_one_random_state_and_leaves_torchs_alone() -> None:
    # the model and images first: building them draws (unless a cache of an earlier test already holds
    # them), which made this test pass or fail with the order the tests ran in
    model, images = gm.defended(gm.Front(gm.WRONG_GRADIENTS["random_hook"])), gm.probe_images(8)
    state = torch.get_rng_state()
    path = ab.scan(model, images)
    assert torch.equal(torch.get_rng_state(), state) and path.gradient_check is not None


def test_what_the_scan_finds_on_a_randomised_model_does_not_depend_on_what_was_drawn_before() -> None:
    """The probe starts from its own seed (``autobpda.PROBE_SEED``): a noisy-gradient model scanned after
    different draws of the process gets the same findings and ratio (before, an evaluation's escalation of it
    depended on the tests that ran before it in the same worker)."""
    model = gm.defended(gm.Front(gm.WRONG_GRADIENTS["random_hook"]))
    x = gm.probe_images(8)
    paths = []
    for seed in (1, 2):
        torch.manual_seed(seed)
        torch.rand(seed * 1000)  # the process drew something else before
        paths.append(ab.scan(model, x))
    assert paths[0].findings == paths[1].findings and paths[0].findings
    assert paths[0].gradient_check == paths[1].gradient_check


def _small_cnn() -> nn.Module:
    torch.manual_seed(0)
    return SmallCNN().eval()


def _vit() -> nn.Module:
    torch.manual_seed(0)
    info = dataclasses.replace(dataset_info("fashion-mnist"), img_size=28)
    return build_model("patch", info).eval()


def _resnet() -> nn.Module:
    import timm

    torch.manual_seed(0)
    return timm.create_model("resnet18", num_classes=10, in_chans=1).eval()


ORDINARY = {"small_cnn": (_small_cnn, 32), "zoo_vit_patch": (_vit, 28), "resnet18": (_resnet, 28)}


@pytest.mark.parametrize("name", sorted(ORDINARY))
def test_an_ordinary_network_has_nothing_to_find(name: str) -> None:
    build, side = ORDINARY[name]
    model, x = build(), _images()
    x = x if side == 32 else x[:, :, 2:30, 2:30]
    path = ab.scan(model, x)
    assert path.findings == () and path.exact_gradient, path.findings
    check = path.gradient_check
    assert check is not None and check.skipped == "" and check.gradient_ratio < 1
    assert ab.auto_bpda(model, x) is model


#: Each gallery defence's findings as the scan made them before the probe existed (kind, rule), and whether
#: it was wrapped.
GALLERY_FINDINGS = {
    "cnn": (set(), False),
    "bit_depth": ({(ab.ZERO_GRADIENT, ab.STRAIGHT_THROUGH)}, True),
    "jpeg": ({(ab.ZERO_GRADIENT, ab.STRAIGHT_THROUGH)}, True),
    "thermometer": ({(ab.THRESHOLD, ab.STRAIGHT_THROUGH)}, True),
    "resize_pad": (set(), False),
    "sap": ({(ab.DETACH, ab.GATE), (ab.RANDOM_DRAW, ab.GATE)}, True),
}


@pytest.mark.parametrize("name", sorted(GALLERY))
def test_a_gallery_defence_keeps_its_findings_and_gets_none_from_the_probe(name: str) -> None:
    torch.manual_seed(0)
    model = GALLERY[name].factory().eval()
    x = _images()
    torch.manual_seed(1)
    path = ab.scan(model, x)
    findings, wrapped = GALLERY_FINDINGS[name]
    assert _probe_findings(path) == [] and path.unhandled == ()
    assert {(f.kind, f.rule) for f in path.findings} == findings, path.findings
    assert (ab.auto_bpda(model, x) is not model) == wrapped


def test_a_forward_that_draws_outside_torch_is_not_probed_and_says_so() -> None:
    rng = np.random.default_rng(0)

    def numpy_noise(x: torch.Tensor) -> torch.Tensor:
        return x + torch.as_tensor(0.01 * rng.standard_normal(x.shape), dtype=x.dtype)

    path = ab.scan(gm.defended(gm.Front(numpy_noise)), gm.probe_images(8))
    check = path.gradient_check
    assert check is not None and check.skipped.startswith(gradcheck.NOT_RUN) and check.failures() == []
    assert _probe_findings(path) == []


def test_autograd_far_from_stable_finite_differences_disagrees_and_kinks_do_not() -> None:
    autograd = torch.tensor([1.0, -2.0, 0.5])
    scale = torch.ones(3)
    close = [autograd * 1.02, autograd * 0.97, autograd * 1.1]  # a kinked network: a few percent off
    assert gradcheck._disagreement(autograd, close, scale)[0] < 1
    shattered = [autograd / 20, autograd / 25, -autograd / 30]  # autograd 20 times the smoothed slope
    ratio, rows = gradcheck._disagreement(autograd, shattered, scale)
    assert ratio > 1 and rows == (0, 1, 2)
    jumpy = [autograd * 0, autograd * 3, -autograd * 2]  # unstable differences (a jump): no verdict
    assert gradcheck._disagreement(autograd, jumpy, scale)[0] < 1
