"""The constructions of issue 30, as researchers write them in front of a model, each with the smooth
"twin" its bpda rule stands for: the automatic BPDA scan (:mod:`robustbench_wave.models.autobpda`) must
give each a rule that reaches the twin's gradient, or report it unhandled -- never let it pass silently.

A construction's ``twin`` is the differentiable front end whose vector-Jacobian product at the clean input,
with the head's gradient at the defended activations, is the gradient the bpda mode must produce
(``exact``: equal to float precision; else ``aligned``: cosine >= 0.99 and the same size within a factor
of 1.5 -- the scale-aware rules, whose slope is the example's own spread). ``twin=None``: no rule applies,
and the finding must say ``unhandled``."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from robustbench_wave.models import autobpda as ab

Front = Callable[[torch.Tensor], torch.Tensor]


@dataclass(frozen=True)
class Construction:
    """One defence's only trick, the finding the scan must report for it, and its smooth twin."""

    defence: Front
    kind: str
    rule: str
    twin: Front | None  # None: unhandled, no gradient to compare
    exact: bool = True  # the bpda gradient is the twin's (else aligned with it: scale-aware rules)
    bpda: bool = True  # a bpda mode is offered
    op: str | None = None  # the finding's op, where it is asserted


def identity(x: torch.Tensor) -> torch.Tensor:
    return x


# ------------------------------------------------------------------------------------------- assignments


def setitem_threshold(x: torch.Tensor) -> torch.Tensor:
    y = x.clone()
    y[y > 0.9] = 1.0  # highlights clipped: a small change of the image
    return y


def setitem_after_round(x: torch.Tensor) -> torch.Tensor:
    y = torch.round(x * 8)  # a straight-through result, then written into in place
    y[y > 4] = 4
    return y / 8


def masked_fill_in_place(x: torch.Tensor) -> torch.Tensor:
    y = x.clone()
    y.masked_fill_(y > 0.7, 1.0)
    return y


def index_put_in_place(x: torch.Tensor) -> torch.Tensor:
    y = x.clone()
    y.index_put_((y < 0.3,), torch.tensor(0.0))
    return y


# ----------------------------------------------------------------------------------- remainder quantisers

STEP = 0.125


def remainder_floor(x: torch.Tensor) -> torch.Tensor:
    return x - x.remainder(STEP)


def fmod_floor(x: torch.Tensor) -> torch.Tensor:
    return x - torch.fmod(x, STEP)


def modulo_floor(x: torch.Tensor) -> torch.Tensor:
    return x - x % STEP


def frac_floor(x: torch.Tensor) -> torch.Tensor:
    return ((x * 8) - (x * 8).frac()) / 8  # two equal tensors, not one: matched by value


# ---------------------------------------------------------------------------- values through Python / copies


def item_full_like(x: torch.Tensor) -> torch.Tensor:
    return torch.full_like(x, x.mean().item())


def mean_twin(x: torch.Tensor) -> torch.Tensor:
    return x.mean().expand_as(x)


def tensor_of_items(x: torch.Tensor) -> torch.Tensor:
    means = torch.tensor([image.mean().item() for image in x])
    return means.view(-1, 1, 1, 1).expand_as(x)


def per_image_mean_twin(x: torch.Tensor) -> torch.Tensor:
    return x.mean((1, 2, 3), keepdim=True).expand_as(x)


def floats_new_tensor(x: torch.Tensor) -> torch.Tensor:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # torch's advice to detach before float()
        means = x.new_tensor([float(m) for m in x.flatten(1).mean(1)])
    return means.view(-1, 1, 1, 1).expand_as(x)


def new_tensor_copy(x: torch.Tensor) -> torch.Tensor:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # torch's advice to use detach().clone()
        return x.new_tensor(x * 2) / 2


def item_then_arithmetic(x: torch.Tensor) -> torch.Tensor:
    return x.new_full(x.shape, x.max().item() * 0.5)  # a new float: its link to x is lost


# --------------------------------------------------------------------------------------- tables and bins

LUT = (torch.arange(256, dtype=torch.float32) / 255) ** 2  # a gamma-2 table


def lookup_table(x: torch.Tensor) -> torch.Tensor:
    return LUT[(x * 255).long()]


def square(x: torch.Tensor) -> torch.Tensor:
    return x**2


BOUNDARIES = torch.linspace(0, 1, 9)  # 8 bins of width 1/8 (and one above 1)


def bucketized(x: torch.Tensor) -> torch.Tensor:
    return (torch.bucketize(x, BOUNDARIES).float() - 1) / 8  # each bin's lower edge


def searchsorted(x: torch.Tensor) -> torch.Tensor:
    return (torch.searchsorted(BOUNDARIES, x.contiguous()).float() - 1) / 8


# ---------------------------------------------------------------------------------------- one-hot indices


def _scores(x: torch.Tensor) -> torch.Tensor:
    return x.flatten(1)


def one_hot_max(x: torch.Tensor) -> torch.Tensor:
    z = _scores(x)
    return F.one_hot(z.max(dim=1).indices, z.shape[1]).float().view_as(x)


def one_hot_max_twin(x: torch.Tensor) -> torch.Tensor:
    z = _scores(x)
    return torch.softmax(z / z.detach().std(1, keepdim=True), dim=1).view_as(x)


def one_hot_topk(x: torch.Tensor) -> torch.Tensor:
    z = _scores(x)
    return F.one_hot(z.topk(3, dim=1).indices, z.shape[1]).sum(1).float().view_as(x)


def one_hot_topk_twin(x: torch.Tensor) -> torch.Tensor:
    """Three successive softmaxes, each over the scores not yet picked (by hand, one image at a time)."""
    out = []
    for z in _scores(x):
        t = z / z.detach().std()
        picked = torch.zeros_like(z, dtype=torch.bool)
        total = torch.zeros_like(z)
        for i in z.detach().topk(3).indices:
            total = total + torch.softmax(t.masked_fill(picked, float("-inf")), dim=0)
            picked = picked.clone()
            picked[i] = True
        out.append(total)
    return torch.stack(out).view_as(x)


def rounded_equal(x: torch.Tensor) -> torch.Tensor:
    return (torch.round(x * 4) == 2).float()


# ------------------------------------------------------------------------------------- custom Functions


class _RoundZeroBackward(torch.autograd.Function):
    """Its inner op is ``round``; its backward returns zero (a masking author's straight "gradient")."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        return torch.round(x * 8) / 8

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        return torch.zeros_like(grad)


class _RoundTinyBackward(torch.autograd.Function):
    """A backward scaled by 1e-3 and sign-flipped: nonzero, but disagrees with its forward."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        return torch.round(x * 8) / 8

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        return -1e-3 * grad


class _RoundNoBackward(torch.autograd.Function):
    """No backward at all: torch raises when one is needed."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        return torch.round(x * 8) / 8


class _RoundIdentityBackward(torch.autograd.Function):
    """The author's own straight-through estimator: kept as it is, no bpda mode."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        return torch.round(x * 8) / 8

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        return grad


class _Cube(torch.autograd.Function):
    """A sound custom op (``x^3`` with its true derivative): nothing to find."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(x)
        return x**3

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        (x,) = ctx.saved_tensors
        return 3 * x**2 * grad


class _NoisyScale(torch.autograd.Function):
    """A sound random op: ``x`` times a fresh draw in [0.5, 1.5), with its true derivative (the draw)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        noise = 0.5 + torch.rand_like(x)
        ctx.save_for_backward(noise)
        return x * noise

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        (noise,) = ctx.saved_tensors
        return grad * noise


def custom(function: type[torch.autograd.Function]) -> Front:
    def apply(x: torch.Tensor) -> torch.Tensor:
        return function.apply(x)

    return apply


# ------------------------------------------------------------------------------------------ randomness


def bernoulli_of_rounded(x: torch.Tensor) -> torch.Tensor:
    return torch.bernoulli(torch.round(x * 4) / 4)


def bernoulli_of_detached(x: torch.Tensor) -> torch.Tensor:
    """SAP's pattern: which values survive is drawn from a deliberately detached probability."""
    kept = torch.bernoulli(x.detach())
    return x * kept / x.clamp_min(1e-3).detach()


# ------------------------------------------------------------------------------------ saturation, scale


def steep_sigmoid(x: torch.Tensor) -> torch.Tensor:
    return torch.sigmoid(50 * (x - 0.5))


def steep_tanh(x: torch.Tensor) -> torch.Tensor:
    return torch.tanh(50 * (x - 0.5))


def doubled(x: torch.Tensor) -> torch.Tensor:
    return 2 * x


def steep_clamp(x: torch.Tensor) -> torch.Tensor:
    return torch.clamp(50 * (x - 0.5) + 0.5, 0, 1)


def mild_sigmoid(x: torch.Tensor) -> torch.Tensor:
    return torch.sigmoid(2 * x - 1)  # a sigmoid on its slope: nothing to find


def signed(x: torch.Tensor) -> torch.Tensor:
    return torch.sign(x - 0.5)


def scaled_threshold(x: torch.Tensor) -> torch.Tensor:
    return (50 * x > 25).float()  # the same threshold at 0.5, on an input 50 times wider


ST, UN = ab.STRAIGHT_THROUGH, ab.UNHANDLED

#: Every construction of issue 30 (and the deliberate ones that must stay exact).
CONSTRUCTIONS: dict[str, Construction] = {
    "setitem_threshold": Construction(setitem_threshold, ab.MASKED_ASSIGNMENT, ST, identity),
    "setitem_after_round": Construction(setitem_after_round, ab.MASKED_ASSIGNMENT, ST, identity),
    "masked_fill_": Construction(masked_fill_in_place, ab.MASKED_ASSIGNMENT, ST, identity),
    "masked_fill": Construction(lambda x: x.masked_fill(x < 0.3, 0.0), ab.MASKED_ASSIGNMENT, ST, identity),
    "index_put_": Construction(index_put_in_place, ab.MASKED_ASSIGNMENT, ST, identity),
    "remainder": Construction(remainder_floor, ab.RESIDUE, ST, identity),
    "fmod": Construction(fmod_floor, ab.RESIDUE, ST, identity),
    "modulo": Construction(modulo_floor, ab.RESIDUE, ST, identity),
    "frac": Construction(frac_floor, ab.RESIDUE, ST, identity),
    "item_full_like": Construction(item_full_like, ab.PYTHON_NUMBER, ST, mean_twin),
    "tensor_of_items": Construction(tensor_of_items, ab.PYTHON_NUMBER, ST, per_image_mean_twin),
    "floats_new_tensor": Construction(floats_new_tensor, ab.PYTHON_NUMBER, ST, per_image_mean_twin),
    "new_tensor": Construction(new_tensor_copy, ab.NEW_TENSOR, ST, identity),
    "item_lost": Construction(item_then_arithmetic, ab.PYTHON_NUMBER, UN, None, bpda=False, op="Tensor.item"),
    "lookup_table": Construction(lookup_table, ab.LOOKUP, ST, square, exact=False),
    "bucketize": Construction(bucketized, ab.INDEX, ST, identity),
    "searchsorted": Construction(searchsorted, ab.INDEX, ST, identity),
    "one_hot_max": Construction(one_hot_max, ab.INDEX, ST, one_hot_max_twin),
    "one_hot_topk": Construction(one_hot_topk, ab.INDEX, ST, one_hot_topk_twin),
    "rounded_equal": Construction(rounded_equal, ab.THRESHOLD, UN, None, bpda=False, op="Tensor.__eq__"),
    "function_zero_backward": Construction(custom(_RoundZeroBackward), ab.CUSTOM_ZERO, ST, identity),
    "function_no_backward": Construction(custom(_RoundNoBackward), ab.CUSTOM_ZERO, ST, identity),
    "function_wrong_backward": Construction(custom(_RoundTinyBackward), ab.CUSTOM_WRONG, ST, identity),
    "function_identity_backward": Construction(
        custom(_RoundIdentityBackward), ab.CUSTOM_IDENTITY, ab.OWN_BACKWARD, identity, bpda=False
    ),
    "bernoulli_of_rounded": Construction(bernoulli_of_rounded, ab.RANDOM_DRAW, ST, identity),
    "steep_sigmoid": Construction(steep_sigmoid, ab.SATURATION, ST, identity, exact=False),
    "steep_tanh": Construction(steep_tanh, ab.SATURATION, ST, doubled, exact=False),
    "steep_clamp": Construction(steep_clamp, ab.SATURATION, ST, identity, exact=False),
    "sign": Construction(signed, ab.ZERO_GRADIENT, ST, doubled, exact=False),
    "scaled_threshold": Construction(scaled_threshold, ab.THRESHOLD, ST, identity, exact=False),
}

#: Constructions with nothing to find: the gradient is exact and the model is not wrapped.
NOTHING_TO_FIND: dict[str, Front] = {
    "sound_function": custom(_Cube),
    "sound_random_function": custom(_NoisyScale),
    "mild_sigmoid": mild_sigmoid,
}
