"""What an attack does to the model it attacks, and what it reads from it.

:func:`attack_mode` puts a model in eval mode with frozen parameters and restores everything afterwards, even
when an attack raises (torchattacks flips the mode itself and does not restore it). :class:`GradSafe` turns a
blocked front-end's missing input gradient into a zero one. :func:`mode_context` / :func:`modes_for` apply the
gradient modes of :mod:`robustbench_wave.models.frontend`; :func:`input_gradient` is the input gradient an
attack sees and :func:`input_gradient_blocked` proves from the autograd graph that it is zero everywhere.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from robustbench_wave.attacks.seeding import host_rngs
from robustbench_wave.models.frontend import (
    grad_mode,
    is_zero_gradient_node,
    offered_modes,
    parse_mode,
    supported_grad_modes,
)


@contextlib.contextmanager
def attack_mode(model: nn.Module | None) -> Iterator[nn.Module | None]:
    """Eval mode and frozen parameters for the duration of an attack; everything is restored even on errors.

    torchattacks flips ``model.train()/eval()`` itself and does not restore it when an attack raises; we save
    every module's ``training`` flag and every parameter's ``requires_grad`` before and put them back after.
    Freezing the parameters also saves the backward pass the work of computing weight gradients.
    """
    if model is None:
        yield None
        return
    modes = [(m, m.training) for m in model.modules()]
    grads = [(p, p.requires_grad) for p in model.parameters()]
    try:
        model.eval()
        for p, _ in grads:
            p.requires_grad_(False)
        yield model
    finally:
        for m, training in modes:
            m.training = training
        for p, req in grads:
            p.requires_grad_(req)


def model_device(model: nn.Module) -> torch.device:
    """Where the model's parameters (or buffers) live; inputs are moved there, results come back to CPU."""
    for t in (*model.parameters(), *model.buffers()):
        return t.device
    return torch.device("cpu")


#: Fewest rows a forward pass through :class:`GradSafe` takes (smaller batches are padded with copies), unless
#: a probe shows that fewer give the same bits (:meth:`GradSafe.rows_for`).
MIN_ROWS = 4


class _ContiguousGrad(torch.autograd.Function):
    """Identity whose backward hands on a contiguous gradient (same values, row-major strides)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        return x.view_as(x)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        return grad.contiguous()


class GradSafe(nn.Module):
    """Adds ``0 * sum(x)`` to the logits so a blocked front-end gives a *zero* input gradient, not an error.

    With ``grad_mode(model, "blocked")`` the front-end output is detached, so the logits no longer depend on
    the input and ``torch.autograd.grad(loss, x)`` would raise; the claim under test is "the attacker sees no
    gradient", which every attack library can handle as an all-zero gradient. A model whose own forward cuts
    the input off (a NumPy round trip in ``exact`` mode, :mod:`robustbench_wave.models.autobpda`) gets the same
    zero gradient.
    ``grad_mode`` reaches every switch inside (fixed front-ends, automatic BPDA) through this wrapper.
    """

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model
        self.training = False  # only a view for attacks (no recursion: model.eval() is attack_mode's job)
        # torchattacks finds the device through next(model.parameters()); give parameter-free models one.
        self._device_anchor = nn.Parameter(torch.zeros(0, device=model_device(model)), requires_grad=False)
        self._rows: dict[tuple[Any, ...], int] = {}  # rows_for's answers, per batch shape without gradients

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # Batches of very few rows take other CPU kernels (matrix-vector, small-M GEMM; on AVX-512 machines
        # up to 2 rows) than larger ones, so a point's logits would differ in the last bits from the same point
        # inside a batch; padding with copies keeps records independent of how points are batched (batch size,
        # shards, points left to attack).
        # A front-end that permutes channels (YCbCr, channels-last layers) gives a strided input gradient,
        # and torchattacks' PGD-L2 calls .view on it; the gradient is made contiguous, its values untouched.
        if torch.is_grad_enabled() and x.requires_grad:
            x = _ContiguousGrad.apply(x)
        n = x.shape[0]
        rows = self.rows_for(x) if 0 < n < MIN_ROWS else n
        logits = self.model(x[torch.arange(rows) % n])[:n] if rows != n else self.model(x)
        if torch.is_grad_enabled() and x.requires_grad:
            logits = logits + 0.0 * x.flatten(1).sum(1, keepdim=True)
        return logits

    def rows_for(self, x: torch.Tensor) -> int:
        """How many rows a batch of fewer than :data:`MIN_ROWS` points is padded to: :data:`MIN_ROWS`, or
        the fewest (from ``len(x)``) whose rows a probe on this batch found bit-equal to those of
        :data:`MIN_ROWS` rows, for a forward without gradients of a model that draws nothing. CPU kernels are
        chosen by shape, so one probe per batch shape decides (a ViT's only small-M product is its head: on a
        CPU where one row takes another kernel, two already do not). Single-point queries (Square late in a
        run, a few points left) then cost half a padded forward; the bits, hence the records, are
        :data:`MIN_ROWS` rows'."""
        if torch.is_grad_enabled():
            return MIN_ROWS
        key = (len(x), tuple(x.shape[1:]), x.dtype, x.device)
        if key not in self._rows:
            self._rows[key] = self._probe_rows(x)
        return self._rows[key]

    def _probe_rows(self, x: torch.Tensor) -> int:
        """:meth:`rows_for`'s probe: every random state it touches (torch's, NumPy's, Python's) is put back."""
        n = len(x)
        devices = [x.device] if x.device.type == "cuda" else []
        with torch.random.fork_rng(devices=devices), host_rngs(0):
            padded = self.model(x[torch.arange(MIN_ROWS) % n])[:n]
            if not torch.equal(padded, self.model(x[torch.arange(MIN_ROWS) % n])[:n]):
                return MIN_ROWS  # it draws: its draws follow from the rows before, so keep them as they were
            for rows in range(n, MIN_ROWS):
                if torch.equal(self.model(x[torch.arange(rows) % n])[:n], padded):
                    return rows
        return MIN_ROWS


def as_float_images(images: torch.Tensor) -> torch.Tensor:
    """uint8 (N, C, H, W) -> float32 in [0, 1]; float inputs are checked to already lie in [0, 1]."""
    if images.dtype == torch.uint8:
        return images.float() / 255.0
    images = images.float()
    if images.numel() and (images.min() < 0 or images.max() > 1):
        raise ValueError("images must be uint8 or floats in [0, 1] (normalization belongs inside the model)")
    return images


def modes_for(model: nn.Module, grad_modes: Sequence[str] | None = None) -> list[str]:
    """The gradient modes a model is evaluated under: ``grad_modes`` as given, else the ones it offers (all
    three with a fixed front-end, exact and bpda with automatic BPDA, else only exact)."""
    if grad_modes is not None:
        return [parse_mode(m).name for m in grad_modes]
    return supported_grad_modes(model)


def mode_context(model: nn.Module, mode: str) -> contextlib.AbstractContextManager:
    """``grad_mode(model, mode)`` for a mode the model offers (:func:`offered_modes`: a scoped one such as
    ``bpda-assignment`` too); ValueError else."""
    offered = offered_modes(model)
    if parse_mode(mode).name not in offered:
        raise ValueError(f"the model offers grad modes {offered} only (got {mode!r})")
    return grad_mode(model, mode)


def margin_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Per-example ``max_{j != y} z_j - z_y`` (Carlini & Wagner): never saturates like softmax CE does."""
    true = logits.gather(1, labels[:, None]).squeeze(1)
    other = logits.scatter(1, labels[:, None], float("-inf")).amax(1)
    return other - true


def input_gradient(
    model: nn.Module, x: torch.Tensor, y: torch.Tensor, loss: str = "ce"
) -> tuple[torch.Tensor, torch.Tensor]:
    """Gradient of the summed per-example loss (``"ce"`` or ``"margin"``) w.r.t. the input, and the logits.

    A model whose output does not depend differentiably on ``x`` (e.g. ``blocked`` mode, or a hard
    quantizer) returns an all-zero gradient instead of raising, which is what an attack would see.
    """
    if loss not in ("ce", "margin"):
        raise ValueError(f"loss must be 'ce' or 'margin', got {loss!r}")
    x = x.detach().clone().requires_grad_(True)
    with torch.enable_grad():
        logits = model(x)
        per_example = (
            margin_loss(logits, y) if loss == "margin" else F.cross_entropy(logits, y, reduction="none")
        )
        if not per_example.requires_grad:
            return torch.zeros_like(x), logits.detach()
        (grad,) = torch.autograd.grad(per_example.sum(), x, allow_unused=True)
    if grad is None:
        grad = torch.zeros_like(x)
    return grad.detach(), logits.detach()


def input_gradient_blocked(model: nn.Module, x: torch.Tensor) -> bool:
    """True when every autograd path from the input to the logits ends in a zero-gradient node.

    Under ``grad_mode(model, "blocked")`` a fixed front-end returns its value through a function whose
    backward is all zeros; if *every* path from the input crosses such a node (or none exists), the input
    gradient is zero for every input, so a gradient attack never leaves its starting point and one step gives
    exactly the result of many (checked in the tests). A model with a path around the front-end (a skip
    connection on raw pixels) returns False. The check reads the graph, not gradient values, so it cannot be
    fooled by a gradient that merely happens to vanish at one point.
    """
    with attack_mode(model), torch.enable_grad():
        xr = x[:2].detach().clone().requires_grad_(True)
        out = model(xr)
    if not out.requires_grad:
        return True
    stack, seen = [out.grad_fn], set()
    while stack:
        fn = stack.pop()
        if fn is None or id(fn) in seen:
            continue
        seen.add(id(fn))
        if is_zero_gradient_node(fn):
            continue
        if getattr(fn, "variable", None) is xr:
            return False
        stack.extend(f for f, _ in fn.next_functions)
    return True
