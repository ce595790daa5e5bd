"""Round trips out of torch in bpda mode (:mod:`robustbench_wave.models.roundtrip`): a defence that sends the
image through PIL, NumPy or a Python list and back is linked by the identity (Athalye et al. 2018), so its
bpda input gradient is the undefended network's gradient at the defended image, ``f'(g(x))``, computed here
by plain autograd on ``g(x)``; the forward values stay bit-identical; values that come back in another shape
are reported unhandled and the model keeps its "no gradient path" line; tensors made in torch are never
taken for returns. End to end, the PIL JPEG defence of the issue falls to its undefended twin under bpda."""

from __future__ import annotations

import pandas as pd
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from robustbench_wave.attacks import parse_suite
from robustbench_wave.data import load_split, to_float
from robustbench_wave.evaluation import EvalSettings, evaluate, metrics
from robustbench_wave.models import autobpda as ab
from robustbench_wave.models import roundtrip as rt
from robustbench_wave.models.frontend import GradMode, grad_mode
from robustbench_wave.models.roundtrip import RoundTrip, change_of_units, misfit
from tests.support import external_models as ext
from tests.support.autobpda_models import NumpyHalve
from tests.support.roundtrip_models import (
    ByteNumpy,
    Inverted,
    ListCopy,
    NumpySevenths,
    PilJpeg,
    Reversed,
    TensorConstructor,
    jpeg_pooled_linear,
    undefended_pooled_linear,
)

FROM_NUMPY = "from outside torch (first used by {})"
N = 4  # images per probe: the scan runs all of them (fewer than ab.PROBE_ROWS)
# front: (channels, what left, how it came back, the shape it came back in per call, units, calls per probe)
CASES = {
    "pil_jpeg_gray": (PilJpeg(), 1, "Tensor.numpy", FROM_NUMPY.format("Tensor.view"), (16, 16), 255.0, N),
    "pil_jpeg_rgb": (PilJpeg(), 3, "Tensor.numpy", FROM_NUMPY.format("Tensor.view"), (16, 16, 3), 255.0, N),
    "numpy": (NumpySevenths(), 1, "Tensor.numpy", FROM_NUMPY.format("conv2d"), (N, 1, 16, 16), 1.0, 1),
    "tensor_constructor": (
        TensorConstructor(),
        1,
        "Tensor.numpy",
        FROM_NUMPY.format("conv2d"),
        (N, 1, 16, 16),
        1.0,
        1,
    ),
    "tolist": (ListCopy(), 1, "Tensor.tolist", "tensor", (N, 1, 16, 16), 1.0, 1),
    "uint8": (ByteNumpy(), 1, "Tensor.numpy", FROM_NUMPY.format("Tensor.float"), (N, 1, 16, 16), 1.0, 1),
}


def _cnn(channels: int, seed: int = 0) -> nn.Module:
    """A small CNN with frozen parameters (as the attacks hold them)."""
    torch.manual_seed(seed)
    net = nn.Sequential(
        nn.Conv2d(channels, 4, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 16 * 16, 3)
    )
    return net.eval().requires_grad_(False)


def _images(channels: int, n: int = N) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(channels)
    return torch.rand(n, channels, 16, 16, generator=g), torch.arange(n) % 3


def _input_gradient(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    xr = x.clone().requires_grad_(True)
    logits = model(xr)
    (grad,) = torch.autograd.grad(F.cross_entropy(logits, y, reduction="sum"), xr)
    return logits.detach(), grad


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_round_trip_is_linked_by_the_identity_and_its_gradient_is_the_nets_at_the_defended_image(
    case: str,
) -> None:
    front, channels, left, back, shape, scale, calls = CASES[case]
    net, (x, y) = _cnn(channels), _images(channels)
    model = ab.auto_bpda(nn.Sequential(front, net).eval(), x)
    path = model.path
    assert path.modes == (GradMode.EXACT, GradMode.BPDA) and path.reaches_input and not path.exact_gradient
    assert (ab.LEAVES_TORCH, left, ab.ROUND_TRIP) in {(f.kind, f.op, f.rule) for f in path.findings}
    assert path.round_trips == (RoundTrip(left, back, shape, scale),) * calls
    trips = path.to_dict()["round_trips"]
    assert trips == [{"left": left, "back": back, "shape": list(shape), "scale": scale, "count": calls}]
    assert "round trips out of torch linked: " in path.summary
    with torch.no_grad():
        defended = front(x)  # g(x), the round trip's values
        plain = net(defended)
    with grad_mode(model, "bpda"):
        logits, grad = _input_gradient(model, x, y)
    _, oracle = _input_gradient(net, defended, y)  # f'(g(x)): the net's gradient at the defended images
    assert torch.equal(logits, plain)  # forward values bit-identical
    assert oracle.abs().max() > 0 and torch.allclose(grad, oracle, rtol=1e-5, atol=1e-7)


def test_exact_mode_keeps_the_missing_gradient() -> None:
    model = ab.auto_bpda(nn.Sequential(NumpySevenths(), _cnn(1)).eval(), _images(1)[0])
    xr = _images(1)[0].requires_grad_(True)
    assert not model(xr).requires_grad  # exact: the round trip cuts the graph, as the plain forward does


def test_values_that_come_back_in_another_shape_are_unhandled_and_leave_no_gradient_path() -> None:
    x, _ = _images(1)
    path = ab.scan(nn.Sequential(NumpyHalve(), _cnn(1)).eval(), x)
    found = {(f.kind, f.op, f.rule) for f in path.findings}
    assert (ab.LEAVES_TORCH, "Tensor.numpy", ab.LOST) in found
    assert (ab.ENTERS_TORCH, FROM_NUMPY.format("Tensor.to"), ab.UNHANDLED) in found
    assert path.round_trips == () and not path.reaches_input and path.modes == (GradMode.EXACT,)
    assert path.summary.startswith("no gradient reaches the input")


def test_returns_in_another_order_are_linked_to_the_departures_whose_values_they_follow() -> None:
    net, (noise, y) = _cnn(1), _images(1)
    halves = torch.zeros_like(noise)  # four images on disjoint quarters: none resembles another
    for i, (r, c) in enumerate([(0, 0), (0, 8), (8, 0), (8, 8)]):
        halves[i, :, r : r + 8, c : c + 8] = 0.5 + 0.5 * noise[i, :, r : r + 8, c : c + 8]
    model = ab.auto_bpda(nn.Sequential(Reversed(), net).eval(), halves)
    with grad_mode(model, "bpda"):
        logits, grad = _input_gradient(model, halves, y)
    xr = halves.clone().requires_grad_(True)  # the oracle: the net on the flipped batch, by plain autograd
    (oracle,) = torch.autograd.grad(F.cross_entropy(net(xr.flip(0)), y, reduction="sum"), xr)
    assert torch.equal(logits, net(halves.flip(0))) and torch.allclose(grad, oracle, rtol=1e-5, atol=1e-7)


def test_values_that_do_not_follow_the_departed_ones_are_not_linked() -> None:
    x, _ = _images(1)
    path = ab.scan(nn.Sequential(Inverted(), _cnn(1)).eval(), x)  # 1 - x: the identity would flip the sign
    assert (ab.ENTERS_TORCH, FROM_NUMPY.format("conv2d"), ab.UNHANDLED) in {
        (f.kind, f.op, f.rule) for f in path.findings
    }
    assert path.round_trips == () and not path.reaches_input


def test_inverted_mid_grey_images_are_not_linked() -> None:
    """On images near 0.5, ``1 - x`` is close to ``x`` through the origin (relative residual ~0.1): only
    the correlation of the deviations (-1) tells that the identity would flip the gradient's sign."""
    x = 0.5 + 0.05 * _images(1)[0]
    assert rt.misfit(x, 1 - x, rt.change_of_units(x, 1 - x)) < rt.FIT_TOLERANCE  # the trap
    assert rt.correlation(x, 1 - x) < -0.99
    path = ab.scan(nn.Sequential(Inverted(), _cnn(1)).eval(), x)
    assert path.round_trips == () and not path.reaches_input


class LogsAndAddsAConstant(nn.Module):
    """Sends the input to NumPy for a statistic only, then adds a constant made in torch of the same shape:
    the constant is no return, the statistic never comes back, and the exact gradient passes."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.mean = float(x.detach().numpy().mean())
        return x + torch.full(x.shape, 0.5)


def test_tensors_made_in_torch_are_never_taken_for_returns() -> None:
    x, _ = _images(1)
    path = ab.scan(nn.Sequential(LogsAndAddsAConstant(), _cnn(1)).eval(), x)
    assert path.round_trips == () and path.exact_gradient and path.modes == (GradMode.EXACT,)
    assert (ab.LEAVES_TORCH, "Tensor.numpy", ab.LOST) in {(f.kind, f.op, f.rule) for f in path.findings}


def test_the_misfit_is_the_relative_residual_by_hand() -> None:
    d = torch.tensor([1.0, 0.0])
    assert misfit(d, torch.tensor([1.0, 1.0]), 1.0) == pytest.approx(1 / 2**0.5)
    assert misfit(d, 255 * d, 255.0) == 0.0 and misfit(torch.zeros(2), torch.zeros(2), 1.0) == 0.0


def test_the_change_of_units_is_the_least_squares_slope_snapped_to_8_bit_levels() -> None:
    d = torch.tensor([0.2, 0.4, 0.8])
    assert change_of_units(d, d * 255) == 255.0  # [0, 1] floats back as 8-bit levels
    assert change_of_units(d, torch.round(d * 255 * 1.1)) == 255.0  # within 20 %: snapped
    assert change_of_units(d * 255, d) == 1 / 255
    assert change_of_units(d, d + 0.01) == 1.0
    assert change_of_units(d, 3 * d) == pytest.approx(3.0)  # no unit near: as measured
    assert change_of_units(torch.zeros(3), torch.zeros(3)) == 1.0  # undefined: the identity


def _robust(records: pd.DataFrame, eps: float) -> tuple[float, int]:
    """The per-example worst case over every row given (all gradient modes together)."""
    return metrics.robust_accuracy(records, "Linf", eps)


@pytest.mark.slow
def test_the_pil_jpeg_defence_falls_to_its_undefended_twin_under_the_linked_bpda_mode() -> None:
    images, labels, _ = load_split("synthetic", "train")
    state = {f"1.{k}": v for k, v in ext.fit_pooled_linear(to_float(images[:2000]), labels[:2000]).items()}
    twin, jpeg = undefended_pooled_linear().eval(), jpeg_pooled_linear().eval()
    twin.load_state_dict(state)
    jpeg.load_state_dict(state)
    test_images, test_labels, _ = load_split("synthetic", "test")
    x, y = to_float(test_images[:100]), test_labels[:100]
    pgd = {"name": "pgd", "family": "pgd", "threat": "Linf", "steps": 10, "rel_step_size": 0.25}
    suite = parse_suite(
        {"eps": {"default": {"Linf": [0.03]}}, "attack": [{"name": "clean", "family": "clean"}, pgd]}
    )
    model = ab.auto_bpda(jpeg, x)
    result = evaluate(model, x, y, suite, EvalSettings(model_name="jpeg"), progress=False)
    twin_records = evaluate(twin, x, y, suite, EvalSettings(model_name="twin"), progress=False).records
    meta = result.meta["models"]["jpeg"]
    assert meta["grad_modes"] == ["exact", "bpda"]
    assert meta["gradient_path"]["round_trips"][0]["scale"] == 255.0
    acc, n = _robust(twin_records, 0.03)
    low, high = metrics.wilson_interval(acc * n, n)
    exact, _ = _robust(result.records[result.records["grad_mode"] == "exact"], 0.03)
    worst, _ = _robust(result.records, 0.03)
    assert exact > high + 0.1  # exact gradients: the round trip hides the gradient, the attack fails
    assert low <= worst <= high, (worst, (low, high))  # the linked bpda mode: the twin's number
