"""A gradient mode scoped to one kind of fixed front-end (``bpda-assignment``): only the cluster
assignment's backward rule changes, every other fixed front-end stays exact.

Oracle: a planted two-stage model whose input gradient is known in closed form under every combination of
the two stages' rules (one stage masks, the other does not, and the converse), and the zoo's
``wavelet-tokenpool`` whose wavelet mask must stay exact while its pooling layers run BPDA."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from robustbench_wave.data import DatasetInfo
from robustbench_wave.evaluation import resolve_grad_modes
from robustbench_wave.models.frontend import (
    ASSIGNMENT,
    MODE_NAMES,
    FixedFrontEnd,
    GradMode,
    grad_mode,
    grad_switches,
    offered_modes,
    parse_mode,
    supported_grad_modes,
)
from robustbench_wave.models.tokenpool import TokenPooling
from robustbench_wave.models.vit import build_model

INFO = DatasetInfo("synthetic", "synthetic", 10, 1, 32, (0.5,), (0.25,), tuple(str(i) for i in range(10)))


class Stage(FixedFrontEnd):
    """``scale * x`` exactly (``masks``: rounded, so the exact gradient is zero), ``scale * x`` smoothly."""

    def __init__(self, scale: float, masks: bool, kind: str = "") -> None:
        super().__init__()
        self.scale, self.masks, self.kind = scale, masks, kind

    def transform(self, x: torch.Tensor) -> torch.Tensor:
        return torch.round(self.scale * x * 4) / 4 if self.masks else self.scale * x

    def smooth_transform(self, x: torch.Tensor) -> torch.Tensor:
        return self.scale * x


def planted(mask_masks: bool) -> nn.Sequential:
    """A mask stage (x3, no kind) then an assignment stage (x2, kind "assignment"); exactly one rounds."""
    return nn.Sequential(Stage(3.0, mask_masks), Stage(2.0, not mask_masks, kind=ASSIGNMENT))


def input_grad(model: nn.Module, mode: str) -> float:
    x = torch.full((1, 4), 0.3, requires_grad=True)
    with grad_mode(model, mode):
        out = model(x).sum()
    return float(torch.autograd.grad(out, x)[0].mean())


@pytest.mark.parametrize(
    ("mask_masks", "expected"),
    [
        # the mask rounds: straight-through on everything recovers 3*2; on the assignment alone the mask's
        # zero gradient stays, so bpda-assignment equals exact.
        (True, {"exact": 0.0, "bpda": 6.0, "bpda-assignment": 0.0}),
        # the assignment rounds: BPDA on the assignment alone recovers the whole gradient.
        (False, {"exact": 0.0, "bpda": 6.0, "bpda-assignment": 6.0}),
    ],
)
def test_only_the_assignment_changes(mask_masks: bool, expected: dict[str, float]) -> None:
    model = planted(mask_masks)
    assert {m: input_grad(model, m) for m in expected} == pytest.approx(expected)
    assert input_grad(model, "bpda") == input_grad(model, GradMode.BPDA)  # enum and name alike
    x = torch.full((1, 4), 0.3, requires_grad=True)
    with grad_mode(model, "bpda", only=ASSIGNMENT):  # the keyword says the same as the scoped name
        assert [s.grad_mode for s in grad_switches(model)] == [GradMode.EXACT, GradMode.BPDA]
        assert float(torch.autograd.grad(model(x).sum(), x)[0].mean()) == expected["bpda-assignment"]
    assert all(s.grad_mode is GradMode.EXACT for s in grad_switches(model))  # restored


def test_scoped_modes_are_named_and_checked() -> None:
    assert "bpda-assignment" in MODE_NAMES and parse_mode("bpda-assignment").name == "bpda-assignment"
    assert parse_mode("bpda", only=ASSIGNMENT).name == "bpda-assignment"
    with pytest.raises(ValueError, match="unknown gradient mode"):
        parse_mode("bpda-everything")
    with pytest.raises(ValueError, match="drop only"):
        parse_mode("bpda-assignment", only="mask")
    plain = nn.Sequential(Stage(3.0, True))  # no switch of kind "assignment": refused, not silently exact
    with pytest.raises(ValueError, match="kind 'assignment'"), grad_mode(plain, "bpda-assignment"):
        pass
    assert offered_modes(plain) == supported_grad_modes(plain) == ["exact", "blocked", "bpda"]


def test_wavelet_tokenpool_keeps_its_mask_exact_and_defaults_unchanged() -> None:
    model = build_model("wavelet-tokenpool", INFO).eval()
    switches = grad_switches(model)
    pools = [s for s in switches if isinstance(s, TokenPooling)]
    others = [s for s in switches if not isinstance(s, TokenPooling)]
    assert pools and others  # the wavelet front-end and three pooling layers
    with grad_mode(model, "bpda-assignment"):
        assert all(p.grad_mode is GradMode.BPDA for p in pools)
        assert all(o.grad_mode is GradMode.EXACT for o in others)
    with grad_mode(model, "bpda"):  # unchanged: every switch at once
        assert all(s.grad_mode is GradMode.BPDA for s in switches)
    # asked for only: the default modes (and so every default record) are the three of before
    assert resolve_grad_modes(model, None) == ["exact", "blocked", "bpda"]
    assert resolve_grad_modes(model, ["exact", "bpda-assignment"]) == ["exact", "bpda-assignment"]
    assert offered_modes(model) == ["exact", "blocked", "bpda", "bpda-assignment"]
    wavelet = build_model("wavelet", INFO).eval()
    with pytest.raises(ValueError, match="bpda-assignment"):  # no Token Pooling: refused, not dropped
        resolve_grad_modes(wavelet, ["exact", "bpda", "bpda-assignment"])
