"""Automatic BPDA for any model: find the operations on the input's path whose gradient is zero almost
everywhere or missing, and offer the ``bpda`` gradient mode for them without subclassing.

A defence written as ordinary torch code (``round(8x)/8``, a threshold mask, a cast to ``uint8`` and back)
gives its attacker a zero or missing input gradient, so exact-gradient attacks fail for the wrong reason
(Athalye, Carlini & Wagner 2018). :func:`scan` runs one forward pass of a probe batch (:data:`PROBE_ROWS`
images, so that a defence acting on some images only meets one) under a
:class:`torch.overrides.TorchFunctionMode` that follows the tensors computed from the input (with the
parameters frozen, they are the ones that require grad) and notes each operation that stops their gradient:

* zero-gradient operations -- ``round``, ``floor``, ``ceil``, ``trunc``, ``sign``, ``heaviside`` -- and
  quantisation (``fake_quantize_*``, rounding division);
* discrete results made into numbers again: comparisons (thresholds), masks from ``argmax`` / ``topk`` /
  ``one_hot``, integer casts; and ``detach`` or a no-grad region;
* the input leaving torch (``numpy``, ``tolist``, ``__array__``) and coming back (``torch.from_numpy``,
  ``torch.tensor``, torchvision's ``to_tensor``): a PIL, NumPy or OpenCV round trip. In ``bpda`` mode
  :mod:`.roundtrip` links the two ends, the identity across the round trip (Athalye et al.'s BPDA for JPEG
  and the like); values that never come back, or only in another shape, leave no gradient, and the report
  says so.

In the ``bpda`` mode (:class:`AutoBPDA`, switched by :func:`~robustbench_wave.models.frontend.grad_mode`)
the same forward runs under that mode, which keeps every value bit for bit and gives each such operation a
straight-through backward (the table in ``docs/bring-your-own-model.md`` lists each rule and why):

* the identity for rounding, quantisation, casts and ``detach`` (``round(x)`` back-propagates as ``x``),
  the true quotient for rounding division, and ``x`` for ``x - remainder(x, q)`` (``fmod``, ``%``,
  ``frac``: a rounding written with the residue, whose exact gradient is zero);
* scale-aware slopes where the op's output range differs from its input's: a comparison ``a > b`` as
  ``(a - b) / spread``, ``sign(z)`` as ``2 z / spread`` (spread: max - min over each example, so a
  threshold on ``50 x`` gets the gradient of one on ``x``); ``bucketize`` / ``searchsorted`` as the input
  over the width of the bin it fell in; a constant 1-D lookup table at an index cut from the input
  (``lut[(255 x).long()]``) as the table's piecewise-linear interpolation; ``sigmoid`` / ``tanh`` /
  ``clamp`` saturated on most of an example as the line from the input's range onto the output's;
* the softmax (at the temperature of the scores' spread) for ``one_hot`` of ``argmax`` / ``max`` indices,
  successive softmaxes over the scores not yet picked for ``one_hot`` of ``topk`` indices;
* the identity through a masked assignment (``x[x > t] = v``, ``masked_fill``, ``index_put`` at a mask cut
  from the input, of values without gradient): the field's rule for thresholding defences;
* the expectation for ``bernoulli(p)`` / ``poisson(rate)``, with the forward's own draw: no random op is
  ever run twice, so the backward sees the draws the forward used and the random stream is the plain
  forward's. A draw from a value ``detach``-ed right before it (stochastic activation pruning) is the
  author's randomness, not a function, and gets no rule;
* numbers taken out with ``.item()`` and brought back by ``full_like`` / ``new_full`` / ``torch.tensor``
  back-propagate into the tensors they came from; ``new_tensor(y)`` / ``torch.tensor(y)`` into ``y``;
* the departed tensor for values that leave torch and come back (:mod:`.roundtrip`);
* the identity across a region: values cut from the input's gradient by an op with no rule (a median filter
  under ``no_grad``, a JPEG through ``torchvision.io``'s integer codec) that come back as a float tensor
  shaped like a tensor that carried the gradient where the cut began (the region's entry) and following
  its values (the round trip's fit test) back-propagate into that entry, in its units: Athalye et al.'s
  BPDA for purifiers. A no-grad region's values stay leaves that require no grad, as in the plain forward;
* a forward that optimises (a purifier taking gradient steps: ``requires_grad_`` on cut values,
  ``torch.autograd.grad``, ``backward``, an optimiser) runs as written -- its own leaf and everything
  computed from it get no rule, so its inner gradients are the plain forward's -- and the values it hands
  on once they stop requiring grad (``z.detach()``) are the region's exit, linked by the identity;
* a user's ``torch.autograd.Function`` (its ``apply`` is routed through the tracer while the mode is on:
  torch function modes do not see it) runs as a whole; its backward is checked once on the probe against a
  finite difference of its forward: kept when sound or the identity (the author's own straight-through),
  replaced by the identity when zero, missing or wrong.

A discrete result that only gates values which carry the gradient anyway (``x * (x > t)``, a top-k mask, a
``.item()`` number as an operand) is left alone: its exact gradient is the useful one. A cut result that
reaches the logits with no rule on its way (``==`` on a rounded value: a bump's slope at its peak is zero),
a number from ``.item()`` that never comes back into a tensor, a custom Function without a shape-matching
input, a region whose values come back in another shape, an optimised leaf that reaches the logits itself:
each is a finding whose rule is :data:`UNHANDLED`, listed by ``GradientPath.to_dict()["unhandled"]``,
said by the summary and logged as a warning. The ``bpda`` mode is offered only where a rule changes the
probe's input gradient (the scan compares both from the same random state). A module may bring its own
smooth approximation instead: a method ``bpda_approximation(*inputs)`` returning a tensor shaped like its
output is what that output back-propagates through in ``bpda`` mode (its values stay the exact forward's,
and the automatic rules stay out of it).

After the two passes the scan runs the gradient-reliability probe (:mod:`.gradcheck`) on the same rows and
random state: the logits with and without gradients, and the exact input gradient against finite
differences (not where the bpda mode is offered: the scan has found that gradient cut already). A failure
is a finding whose rule is :data:`UNHANDLED` (kinds :data:`FORWARD_DIFFERS`, :data:`GRADIENT_DISAGREES`):
masking that no op shows -- a hook that rewrites the gradient, a shattered gradient, a forward that changes
with the grad mode -- is escalated and marked like an op without a rule.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import weakref
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import torch
from torch import nn
from torch.overrides import TorchFunctionMode, resolve_name
from torch.utils._pytree import tree_flatten, tree_map

from robustbench_wave.models import gradcheck
from robustbench_wave.models.frontend import GradMode, GradModeSwitch, grad_switches
from robustbench_wave.models.roundtrip import (
    FIT_TOLERANCE,
    MIN_CORRELATION,
    RoundTrip,
    RoundTrips,
    change_of_units,
    correlation,
    misfit,
)

log = logging.getLogger(__name__)

# What was found (Finding.kind).
ZERO_GRADIENT = "zero-gradient"
QUANTISATION = "quantisation"
THRESHOLD = "threshold"
INDEX = "index"
INTEGER_CAST = "integer cast"
DETACH = "detach"
NO_GRAD = "no-grad region"
NO_DERIVATIVE = "no derivative"
LEAVES_TORCH = "leaves torch"
ENTERS_TORCH = "enters torch"
APPROXIMATION = "bpda_approximation"
MASKED_ASSIGNMENT = "masked assignment"
RESIDUE = "remainder quantiser"
LOOKUP = "lookup table"
RANDOM_DRAW = "random draw"
PYTHON_NUMBER = "python number"
NEW_TENSOR = "new tensor from values"
CUSTOM_ZERO = "custom autograd.Function with a zero or missing backward"
CUSTOM_WRONG = "custom autograd.Function whose backward disagrees with its forward"
CUSTOM_IDENTITY = "custom autograd.Function with an identity backward"
SATURATION = "saturation"
NEW_LEAF = (
    "leaf made in the forward"  # ``requires_grad_`` on values cut from the input: a test-time optimisation
)
#: The random state every scan starts from (:func:`_probing`): its findings on a randomised model are the same
#: in every process, whatever ran before.
PROBE_SEED = 0
FORWARD_DIFFERS = gradcheck.FORWARD_DIFFERS
GRADIENT_DISAGREES = gradcheck.GRADIENT_DISAGREES

# What the bpda mode does with it (Finding.rule), strongest first.
STRAIGHT_THROUGH = "straight-through"
MODEL_RULE = "the model's bpda_approximation"
ROUND_TRIP = "identity across the round trip (BPDA)"
REGION = "identity across the region (BPDA)"
LOST = "the values leave torch, no gradient comes back"
UNHANDLED = "unhandled"
NO_RULE = UNHANDLED  # the former name: a cut result reaches the logits and no rule brings its gradient back
OWN_BACKWARD = "its own backward (the identity) is kept"
GATE = "gradient passes around it"
RULES = (STRAIGHT_THROUGH, MODEL_RULE, ROUND_TRIP, REGION, LOST, UNHANDLED, OWN_BACKWARD, GATE)
#: Rules that give the input a gradient the exact one lacks (a bpda mode is offered where one applies).
BPDA_RULES = (STRAIGHT_THROUGH, MODEL_RULE, ROUND_TRIP, REGION)

_ZERO = {"round", "floor", "ceil", "trunc", "fix", "sign", "sgn", "heaviside"}
_QUANTISE = {"fake_quantize_per_tensor_affine", "fake_quantize_per_channel_affine"}
_ROUNDING_DIVISION = {"floor_divide", "__floordiv__", "__rfloordiv__"}
_ABOVE = {"gt", "ge", "greater", "greater_equal", "__gt__", "__ge__"}
_BELOW = {"lt", "le", "less", "less_equal", "__lt__", "__le__"}
_EQUAL = {"eq", "ne", "not_equal", "__eq__", "__ne__", "isclose", "logical_not", "__invert__"}
_INDEX = {
    "argmax", "argmin", "topk", "sort", "argsort", "msort", "max", "min", "kthvalue", "mode", "median",
    "multinomial", "bucketize", "searchsorted", "one_hot", "nonzero", "unique", "histc", "bincount",
}  # fmt: skip
_CASTS = {"to", "type", "type_as", "long", "int", "short", "char", "byte", "bool", "float", "double", "half"}
_VIEWS = {
    "view", "view_as", "reshape", "reshape_as", "flatten", "unflatten", "permute", "transpose", "t",
    "squeeze", "unsqueeze", "expand", "expand_as", "contiguous", "clone", "cpu", "cuda", "__getitem__",
    "narrow", "movedim", "select",
}  # fmt: skip
_AS = {"view_as", "reshape_as", "expand_as", "type_as"}
#: Ops whose integer results are masks or indices, not values.
_DISCRETE = _ABOVE | _BELOW | _EQUAL | _INDEX
_DETACH = {"detach", "data"}
_LEAVES = {"numpy", "tolist", "__array__"}
#: Factories a torch function mode sees that bring data from outside torch in (``torch.from_numpy`` and
#: ``torch.Tensor(array)`` it never sees: :mod:`.roundtrip` finds those where they are first used).
_ENTERS = {"tensor", "as_tensor", "asarray", "new_tensor"}
#: Ops that draw from a generator: never run a second time (the backward must see the forward's draws).
_RANDOM = {
    "bernoulli", "multinomial", "gumbel_softmax", "normal", "poisson", "binomial", "rrelu", "dropout",
    "dropout1d", "dropout2d", "dropout3d", "alpha_dropout", "feature_alpha_dropout", "uniform_", "normal_",
    "bernoulli_", "exponential_", "cauchy_", "log_normal_", "geometric_", "random_",
}  # fmt: skip
_DROPOUT = {"dropout", "dropout1d", "dropout2d", "dropout3d", "alpha_dropout", "feature_alpha_dropout"}
#: Draws whose straight-through is their expectation (``bernoulli(p)`` back-propagates as ``p``).
_EXPECTATION = {"bernoulli", "poisson"}
#: Writes of values into a tensor at a mask or indices (``x[mask] = v``).
_ASSIGN = {"__setitem__", "masked_fill", "masked_fill_", "index_put", "index_put_"}
#: Residues of a rounding: ``x - remainder(x, q)`` rounds ``x`` down to a multiple of ``q``.
_RESIDUES = {"remainder", "fmod", "frac", "__mod__"}
_SUBTRACT = {"sub", "subtract", "__sub__"}
#: Ops that saturate, with their output range (``clamp``'s from its bounds).
_SATURATING = {"sigmoid": 1.0, "tanh": 2.0, "clamp": None, "clip": None, "hardtanh": None}
#: A tensor made into a Python number (``x.mean().item()``, ``float(x.max())``); not ``__bool__``, which
#: steers control flow (``if torch.isnan(x).any()``) rather than values.
_TO_PYTHON = {"item", "__float__", "__int__", "__index__"}
#: Factories that make a tensor of values given as Python numbers or another tensor's data.
_FACTORIES = {"tensor", "as_tensor", "scalar_tensor", "new_tensor", "full", "full_like", "new_full"}
#: Ops whose further tensor arguments give only a shape, dtype or device (``view_as(other)``, ``to(other)``).
_FIRST_ONLY = _AS | _CASTS
#: Results that stay discrete-valued stand-ins: tracked, given a straight-through value only where they
#: become numbers the gradient would otherwise not reach.
_LAZY = _CASTS | _VIEWS | _DETACH

#: Probe rows :func:`scan` runs (the data set's first images): enough that a defence acting on some images
#: only (the dark ones, say) meets one.
PROBE_ROWS = 8
#: Ops of autograd itself, called inside a forward that optimises (``torch.autograd.grad``, ``backward``, the
#: ``.grad`` property): their results are constants to the input's gradient, never cut values.
_AUTOGRAD = {"grad", "backward", "register_hook"}
#: A cut result may carry this many region entries (the tensors that carried the gradient where it began).
_MAX_ENTRIES = 16

_NAMES: dict[Any, tuple[str, str]] = {}


def op_names(func: Callable[..., Any]) -> tuple[str, str]:
    """(short name, display name) of a torch function or Tensor method: ('gt', 'Tensor.gt'); a property
    getter is named by its property ('data', 'Tensor.data')."""
    try:
        return _NAMES[func]
    except (KeyError, TypeError):
        pass
    full = resolve_name(func) or getattr(func, "__name__", repr(func))
    if full.endswith(("__get__", "__set__")):
        full = full.rpartition(".")[0]
    names = (full.rpartition(".")[2], full.removeprefix("torch.").removeprefix("nn.functional."))
    with contextlib.suppress(TypeError):
        _NAMES[func] = names
    return names


def _shape_only(name: str) -> bool:
    """Ops that read only the shape, dtype or device of their tensor arguments (``zeros_like``, ``new_ones``)."""
    return name.endswith("_like") or name.startswith("new_") or name in ("size", "dim", "numel")


def _out_of_place(name: str) -> str:
    """``round`` for ``round_`` (torch's in-place variants); dunders and other names as they are."""
    return name[:-1] if name.endswith("_") and not name.endswith("__") else name


def _kind(name: str, kwargs: dict[str, Any]) -> str:
    if _out_of_place(name) in _ZERO:
        return ZERO_GRADIENT
    if name in _EXPECTATION:
        return RANDOM_DRAW
    if name in _QUANTISE | _ROUNDING_DIVISION or _rounds(name, kwargs):
        return QUANTISATION
    kinds = ((_ABOVE | _BELOW | _EQUAL, THRESHOLD), (_INDEX, INDEX), (_CASTS, INTEGER_CAST))
    kinds += ((_DETACH, DETACH), (_LEAVES, LEAVES_TORCH))
    found = next((kind for names, kind in kinds if name in names), None)
    return found or (NO_DERIVATIVE if torch.is_grad_enabled() else NO_GRAD)


def _rounds(name: str, kwargs: dict[str, Any]) -> bool:
    return name in ("div", "divide") and kwargs.get("rounding_mode") is not None


def _zero_gradient(name: str, kwargs: dict[str, Any]) -> bool:
    """An op whose gradient is zero almost everywhere (or that torch gives its own straight-through)."""
    return _out_of_place(name) in _ZERO | _QUANTISE | _ROUNDING_DIVISION or _rounds(name, kwargs)


def _random(name: str, args: tuple, kwargs: dict[str, Any]) -> bool:
    """An op that draws (dropout only in training: ``F.dropout(x, p, training)``)."""
    if name in _DROPOUT:
        return bool(kwargs.get("training", args[2] if len(args) > 2 else True))
    return name in _RANDOM


def _expectation_draw(name: str, args: tuple, kwargs: dict[str, Any]) -> bool:
    """``bernoulli(p)`` / ``poisson(rate)``: a draw whose parameter is a tensor (not ``bernoulli(x, 0.5)``)."""
    return name in _EXPECTATION and len(args) == 1 and "p" not in kwargs


def _tensors(tree: Any) -> list[torch.Tensor]:
    return [t for t in tree_flatten(tree)[0] if isinstance(t, torch.Tensor)]


def _brings_data_in(name: str, args: tuple, kwargs: dict) -> bool:
    """``torch.tensor(data)``, ``x.new_tensor(data)``: whether ``data`` comes from outside torch."""
    position = 1 if name == "new_tensor" else 0
    data = args[position] if len(args) > position else kwargs.get("data")
    return data is not None and not isinstance(data, torch.Tensor)


def _pure(func: Callable[..., Any], name: str) -> Callable[..., Any]:
    """The out-of-place twin of an in-place Tensor method (``mul_`` -> ``mul``, ``__imul__`` -> ``__mul__``):
    a counterpart run in place on a stand-in would write into the forward's values a second time."""
    base = f"__{name[3:]}" if name.startswith("__i") and name.endswith("__") else _out_of_place(name)
    return getattr(torch.Tensor, base, func) if base != name else func


def _carries_gradient(out: Any) -> bool:
    return any(t.requires_grad for t in _tensors(out))


class _StraightThrough(torch.autograd.Function):
    """Forward ``value`` unchanged, backward into ``smooth`` (same shape): BPDA without rounding error."""

    @staticmethod
    def forward(ctx: Any, smooth: torch.Tensor, value: list[torch.Tensor]) -> torch.Tensor:
        ctx.dtype = smooth.dtype
        # handed in a list, so the output is no input returned as-is (a view to torch): the model may write
        # into it in place (``y[y > t] = 1``), and nothing is copied
        return value[0]

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        return grad.to(ctx.dtype), None


class _InPlaceStraightThrough(torch.autograd.Function):
    """Run an in-place rounding of ``x`` (``x.round_()``, given as ``op``) with an identity backward."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, op: Callable[[], Any]) -> torch.Tensor:
        op()
        ctx.mark_dirty(x)
        return x

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        return grad, None


def straight(value: torch.Tensor, smooth: torch.Tensor | None) -> torch.Tensor | None:
    """``value`` (as a float tensor) whose backward is ``smooth``'s; None when ``smooth`` does not fit."""
    if smooth is None or tuple(smooth.shape) != tuple(value.shape) or not smooth.is_floating_point():
        return None
    value = value if value.is_floating_point() else value.to(smooth.dtype)
    with torch.enable_grad():
        return _StraightThrough.apply(smooth, [value.detach()])


@dataclass
class _Origin:
    """One operation where the input's gradient stopped, and what became of its result."""

    kind: str
    op: str
    statuses: set[str] = field(default_factory=set)


@dataclass
class _Tracked:
    """A result cut from the input's gradient: where it was cut, and its straight-through stand-in (a float
    tensor of its values whose backward is the rule's; None: no rule) and, for ``argmax``, the softmax."""

    origins: frozenset[int]
    surrogate: torch.Tensor | None
    soft: Callable[[], torch.Tensor | None] | None = None  # computed when a one_hot asks for it
    detached: bool = False  # made by ``detach``: a random draw from it is randomness, not a function
    #: the tensors that carried the input's gradient where the cut began (the region's entry): the values
    #: may come back shaped like one of them (:meth:`Tracer._region`)
    entries: tuple[torch.Tensor, ...] = ()
    foreign: bool = False  # requires grad, but from a leaf the forward made (a test-time optimisation)


class _NoRule(Exception):
    """A tracked tensor without a straight-through stand-in is an argument: this op gets no rule."""


@dataclass(frozen=True)
class _RandomState:
    """torch's CPU generator state and those of the CUDA devices given (compared by value)."""

    cpu: bytes
    cuda: tuple[tuple[torch.device, bytes], ...]

    @property
    def devices(self) -> tuple[torch.device, ...]:
        return tuple(device for device, _ in self.cuda)


def _random_state(*devices: torch.device) -> _RandomState:
    cuda = tuple((d, bytes(torch.cuda.get_rng_state(d).numpy())) for d in devices if d.type == "cuda")
    return _RandomState(bytes(torch.get_rng_state().numpy()), cuda)


def _restore(state: _RandomState) -> None:
    torch.set_rng_state(torch.frombuffer(bytearray(state.cpu), dtype=torch.uint8))
    for device, value in state.cuda:
        torch.cuda.set_rng_state(torch.frombuffer(bytearray(value), dtype=torch.uint8), device)


class _Drew(Exception):
    """An op run again on the stand-ins drew from a generator: its result is no backward of the first draw."""


def _without_draws(func: Callable[..., Any], args: tuple, kwargs: dict) -> Any:
    """``func(*args, **kwargs)`` for an op not known to be deterministic; one that draws (and is not in
    ``_RANDOM``) has the random state put back and raises :class:`_Drew` (no rule)."""
    devices = {t.device for t in _tensors((args, kwargs)) if t.device.type == "cuda"}
    state = _random_state(*devices)
    out = func(*args, **kwargs)
    if _random_state(*devices) != state:
        _restore(state)
        raise _Drew(op_names(func)[1])
    return out


_PASS = object()  # no construction rule applies: the op goes through the ordinary rules


def _example_dims(t: torch.Tensor) -> tuple[int, ...]:
    """The dimensions of one example: all but the first (a tensor of at least two dimensions)."""
    return tuple(range(1, t.dim()))


def _per_example_slope(d: torch.Tensor) -> torch.Tensor | float:
    """1 / the spread (max - min) of ``d`` over each example (detached; 1 where it is flat), shaped to
    broadcast against ``d``: the slope that maps the input's range onto a unit step, so a threshold's
    gradient does not depend on its input's scale. A tensor of fewer than two dimensions (one number per
    example, or none) keeps the unit slope: a spread over the batch would make each example's gradient
    depend on the others."""
    if not isinstance(d, torch.Tensor) or d.dim() < 2:
        return 1.0
    with torch.no_grad():
        low, high = torch.aminmax(d.detach().flatten(1), dim=1)
        spread = high - low
        slope = torch.where(spread > 0, 1 / spread, torch.ones_like(spread))
    return slope.view(-1, *[1] * (d.dim() - 1))


def _bin_index(func: Callable[..., Any], name: str, args: tuple, kwargs: dict) -> torch.Tensor | None:
    """``bucketize(x, b)`` / ``searchsorted(b, x)`` back-propagate as ``x / width`` of the bin each value fell
    in (the index grows by one per bin width); 1-D boundaries of at least two entries only."""
    x, bounds = (args[0], args[1]) if name == "bucketize" else (args[1], args[0])
    if not isinstance(bounds, torch.Tensor) or bounds.dim() != 1 or len(bounds) < 2 or bounds.requires_grad:
        return None
    if not isinstance(x, torch.Tensor) or not x.is_floating_point() or not x.requires_grad:
        return None
    index = func(*args, **kwargs)
    width = torch.diff(bounds.to(x.dtype))
    return x / width[(index.clamp(1, len(bounds) - 1) - 1)].clamp_min(1e-12)


def _bounds(name: str, args: tuple, kwargs: dict) -> tuple[float, float] | None:
    """The output range of a saturating op; None when a bound is missing or a tensor."""
    if name == "sigmoid":
        return 0.0, 1.0
    if name == "tanh":
        return -1.0, 1.0
    if name == "hardtanh":
        lo = args[1] if len(args) > 1 else kwargs.get("min_val", -1.0)
        hi = args[2] if len(args) > 2 else kwargs.get("max_val", 1.0)
    else:
        lo = args[1] if len(args) > 1 else kwargs.get("min")
        hi = args[2] if len(args) > 2 else kwargs.get("max")
    numbers = all(isinstance(b, int | float) and not isinstance(b, bool) for b in (lo, hi))
    return (float(lo), float(hi)) if numbers and hi > lo else None


#: A number taken out of torch (``.item()``), the tensor it came from (its stand-in) and its origins.
_Number = tuple[Any, torch.Tensor | None, frozenset[int]]


class Tracer(TorchFunctionMode):
    """One forward pass's straight-through mode: follows the tensors computed from the input, notes every
    operation that stops their gradient (:attr:`origins`) and gives it a straight-through backward (the
    module docstring lists the rules) and links values that leave torch and come back (:mod:`.roundtrip`);
    every value is the plain forward's, and no op runs twice that draws from a generator (the backward sees
    the forward's draws, the random stream is the plain forward's). ``parameters``: the model's parameters
    (they require grad too, but are not the input's); ``known``: its parameters and buffers (made before the
    forward, so never values that came back from outside torch)."""

    def __init__(self, parameters: Iterable[torch.Tensor] = (), known: Iterable[torch.Tensor] = ()) -> None:
        super().__init__()
        self._parameters = {id(p) for p in parameters}
        self.origins: list[_Origin] = []
        self.suspended = 0  # inside a module with its own bpda_approximation, or a custom autograd.Function
        self._tracked: dict[int, tuple[weakref.ref, _Tracked]] = {}
        self._residues: dict[int, tuple[weakref.ref, torch.Tensor, str]] = {}  # remainder(x): (r, x, op)
        self._numbers: dict[int, _Number] = {}  # by id of the number
        self._slopes: dict[int, tuple[weakref.ref, torch.Tensor | float]] = {}  # by id of the tensor
        self.round_trips = RoundTrips(known)

    def __torch_function__(
        self, func: Callable[..., Any], types: Any, args: tuple = (), kwargs: dict | None = None
    ) -> Any:
        kwargs = kwargs or {}
        name = op_names(func)[0]
        if self.suspended:
            return func(*args, **kwargs)
        if name in _AUTOGRAD:  # autograd inside a forward that optimises: constants to the input's gradient
            return self._produced(func(*args, **kwargs))
        numbers = self._numbers_in((args, kwargs)) if self._numbers else []
        if numbers and name in _FACTORIES:
            return self._produced(self._numbers_back(func, args, kwargs, numbers))
        if name in _ENTERS and _brings_data_in(name, args, kwargs):
            return self._entered(func(*args, **kwargs), op_names(func)[1])
        if _shape_only(name) and name != "new_tensor":
            return self._produced(func(*args, **kwargs))
        inputs = _tensors(args[:1] if name in _FIRST_ONLY else (args, kwargs))  # x.to(other): only x
        if self.round_trips.pending:
            self._returns(inputs, op_names(func)[1])
        tracked = [info for t in inputs if (info := self.lookup(t)) is not None]
        if name == "requires_grad_" or (name == "requires_grad" and len(args) == 2):  # not the getter
            return self._new_leaf(func, args, kwargs, op_names(func)[1])
        if any(info.foreign for info in tracked):
            return self._foreign(lambda: func(*args, **kwargs), name, tracked, inputs)
        # a tracked tensor never carries the input's gradient itself (a view made under no_grad requires grad
        # but back-propagates into nothing)
        derived = any(
            t.requires_grad and id(t) not in self._parameters and self.lookup(t) is None for t in inputs
        )
        if not (tracked or derived):
            return self._produced(func(*args, **kwargs))
        out = self._on_path(func, args, kwargs, tracked, derived, inputs)
        if not torch.is_grad_enabled():
            out = self._kept_plain(out, name, tracked, inputs)
        if numbers:  # a number from .item() used as an operand: the gradient reaches it only around the op
            self.note(
                frozenset().union(*(o for _, _, o in numbers)), GATE if _carries_gradient(out) else UNHANDLED
            )
        return out

    # ------------------------------------------------------------------------------------------ bookkeeping

    def lookup(self, t: torch.Tensor) -> _Tracked | None:
        entry = self._tracked.get(id(t))
        return entry[1] if entry is not None and entry[0]() is t else None

    def _track(self, t: torch.Tensor, info: _Tracked) -> None:
        self._tracked[id(t)] = (weakref.ref(t), info)

    def origin(self, kind: str, op: str) -> int:
        self.origins.append(_Origin(kind, op))
        return len(self.origins) - 1

    def note(self, origins: Iterable[int], status: str) -> None:
        for i in origins:
            self.origins[i].statuses.add(status)

    def realised(self, output: Any) -> Any:
        """The forward's result as the caller gets it: a float result that is still a cut value with a
        stand-in (a forward run under ``no_grad`` throughout: its values stayed leaves) back-propagates through
        its stand-in; None (as it is) otherwise."""
        if (
            not isinstance(output, torch.Tensor)
            or not output.is_floating_point()
            or not torch.is_grad_enabled()
        ):
            return None
        info = self.lookup(output)
        if info is None or info.foreign or output.requires_grad:
            return None
        origins = info.origins
        replaced = straight(output, self._stand_in(output))
        if replaced is not None:
            self.note(origins, STRAIGHT_THROUGH)
        return replaced

    def finish(self, output: Any) -> None:
        """The forward's result: a cut result that reaches it had no rule anywhere on its way; a number taken
        out with ``.item()`` that never came back into a tensor took its gradient with it; values that left
        torch and never came back are lost, and what came back unmatched meanwhile is unhandled."""
        for t in _tensors(output):
            info = self.lookup(t)
            if info is not None and (info.foreign or not t.requires_grad):
                self.note(info.origins, UNHANDLED)
        self.note(
            [i for i, o in enumerate(self.origins) if o.kind == PYTHON_NUMBER and not o.statuses], UNHANDLED
        )
        trips = self.round_trips
        for departure in trips.pending:
            self.note(departure.origins | {departure.origin}, LOST)
        for back in dict.fromkeys(trips.strays) if trips.pending else ():
            self.note([self.origin(ENTERS_TORCH, back)], UNHANDLED)

    # ------------------------------------------------------------------------------------ round trips

    def _produced(self, out: Any) -> Any:
        """``out`` of an op in torch: never values that came back from outside."""
        self.round_trips.seen([out] if isinstance(out, torch.Tensor) else _tensors(out))
        return out

    def _entered(self, out: Any, shown: str) -> Any:
        """The result of ``torch.tensor(array)`` and the like: a return, when values are out of torch."""
        if isinstance(out, torch.Tensor) and self.round_trips.pending:
            self._link(out, shown)
        return self._produced(out)

    def _returns(self, inputs: list[torch.Tensor], shown: str) -> None:
        """Link the op's inputs that no op produced (``torch.from_numpy``: the mode never sees it)."""
        for t in inputs:
            if not t.requires_grad and self.lookup(t) is None and not self.round_trips.is_seen(t):
                self._link(t, f"from outside torch (first used by {shown})")

    def _leave(self, x: torch.Tensor, shown: str, before: frozenset[int]) -> None:
        """``x`` leaves torch (``numpy``, ``tolist``): it may come back; without a stand-in it is lost."""
        stand_in = self._stand_in(x)
        origin = self.origin(LEAVES_TORCH, shown)
        if stand_in is None:
            self.note(before | {origin}, LOST)
        else:
            self.round_trips.leave(shown, stand_in, before, origin)

    def _link(self, t: torch.Tensor, back: str) -> None:
        """``t`` came back into torch: tracked with the straight-through stand-in of its departure."""
        found = self.round_trips.arrive(t, back)
        if found is not None:
            departure, smooth = found
            self._track(t, _Tracked(departure.origins, straight(t, smooth)))
            self.note([departure.origin], ROUND_TRIP)

    def _slope(self, t: torch.Tensor) -> torch.Tensor | float:
        """:func:`_per_example_slope` of ``t``, once per tensor (a thermometer compares one input 16 times)."""
        entry = self._slopes.get(id(t))
        if entry is not None and entry[0]() is t:
            return entry[1]
        slope = _per_example_slope(t)
        self._slopes[id(t)] = (weakref.ref(t), slope)
        return slope

    def _stand_in(self, t: Any) -> torch.Tensor | None:
        """What ``t`` back-propagates through: itself when it carries the gradient, else its stand-in."""
        if not isinstance(t, torch.Tensor):
            return None
        info = self.lookup(t)
        if info is not None:
            return info.surrogate if info.surrogate is not None else self._region(t, info)
        return t if t.requires_grad else None

    def _entries(
        self, name: str, tracked: list[_Tracked], inputs: list[torch.Tensor], out: torch.Tensor
    ) -> tuple[torch.Tensor, ...]:
        """The region entries a cut result ``out`` carries: its tracked inputs' and the inputs that carry the
        gradient themselves; none for a mask or indices (a discrete result stands for no image)."""
        if out.dtype == torch.bool or (not out.is_floating_point() and name in _DISCRETE):
            return ()
        found: dict[int, torch.Tensor] = {}
        for info in tracked:
            for e in info.entries:
                found.setdefault(id(e), e)
        for t in inputs:
            carries = t.requires_grad and id(t) not in self._parameters and self.lookup(t) is None
            if carries and t.is_floating_point():
                found.setdefault(id(t), t)
        return tuple(found.values())[:_MAX_ENTRIES]

    def _region(self, t: torch.Tensor, info: _Tracked) -> torch.Tensor | None:
        """The identity across a region (Athalye et al.'s BPDA for purifiers): float values cut from the
        input's gradient with no rule on their way, shaped like one of the region's entries and following its
        values (the round trip's fit test, :mod:`.roundtrip`), back-propagate into that entry, in its units.
        The stand-in is kept and the region's cuts are noted; None where no entry fits."""
        if info.foreign or not info.entries or not t.is_floating_point():
            return None
        fits = []
        for e in info.entries:
            if tuple(e.shape) == tuple(t.shape):
                scale = change_of_units(e, t)
                miss = misfit(e, t, scale)
                if miss <= FIT_TOLERANCE and correlation(e, t) >= MIN_CORRELATION:
                    fits.append((miss, len(fits), e, scale))
        if not fits:
            return None
        _, _, entry, scale = min(fits)
        with torch.enable_grad():
            info.surrogate = straight(t, (entry * scale if scale != 1 else entry).to(t.device))
        self.note(info.origins, REGION)
        info.origins = frozenset()  # linked: what follows carries the entry's gradient, no cut any more
        return info.surrogate

    # ----------------------------------------------------------------------- optimising inside the forward

    def _new_leaf(self, func: Callable[..., Any], args: tuple, kwargs: dict, shown: str) -> Any:
        """``t.requires_grad_(True)`` / ``t.requires_grad = True`` on values cut from the input (or made in
        torch): the forward optimises a leaf of its own. The call runs as written (the leaf stays a leaf, so
        ``torch.autograd.grad``, ``backward`` and optimisers work on it); the leaf and what is computed from it
        are followed as one region, which ends where its values stop requiring grad."""
        t = args[0] if args and isinstance(args[0], torch.Tensor) else None
        flag = args[1] if len(args) > 1 else kwargs.get("requires_grad", True)
        info = self.lookup(t) if t is not None else None
        carried = t is not None and t.requires_grad and (info is None or not info.foreign)
        out = func(*args, **kwargs)
        if t is None or carried or id(t) in self._parameters:
            return out
        if not flag:  # the region's leaf let go: a cut value again
            if info is not None:
                self._track(t, _Tracked(info.origins, None, entries=info.entries))
            return out
        origins = (info.origins if info is not None else frozenset()) | {self.origin(NEW_LEAF, shown)}
        entries = info.entries if info is not None else ()
        self._track(t, _Tracked(origins, None, entries=entries, foreign=True))
        return out

    def _foreign(
        self, run: Callable[[], Any], name: str, tracked: list[_Tracked], inputs: list[torch.Tensor]
    ) -> Any:
        """An op on a leaf the forward made or on what was computed from it: runs as written, with no rule (its
        gradient is the forward's own optimisation); results that require grad stay in the region, the others
        are cut values that keep the region's entries."""
        out = run()
        origins = frozenset().union(*(info.origins for info in tracked))
        for t in _tensors(out):
            entries = self._entries(name, tracked, [i for i in inputs if not self._is_foreign(i)], t)
            self._track(t, _Tracked(origins, None, entries=entries, foreign=t.requires_grad))
        return out

    def _is_foreign(self, t: torch.Tensor) -> bool:
        info = self.lookup(t)
        return info is not None and info.foreign

    def _kept_plain(self, out: Any, name: str, tracked: list[_Tracked], inputs: list[torch.Tensor]) -> Any:
        """Without gradients, a rule's result that carries one (a construction's straight-through) is kept as
        the plain forward has it -- a tensor that requires no grad -- with the result as its stand-in: a value
        of a no-grad region must stay a leaf (a forward that optimises from it makes it one)."""
        if not isinstance(out, torch.Tensor) or not out.requires_grad or self.lookup(out) is not None:
            return out
        if any(out is t for t in inputs):  # the input itself, written in place: as it was
            return out
        plain = out.detach()
        before = frozenset().union(*(info.origins for info in tracked))
        self._track(plain, _Tracked(before, out, entries=self._entries(name, tracked, inputs, plain)))
        return plain

    # ------------------------------------------------------------------------------------------ the rules

    def _on_path(
        self,
        func: Callable[..., Any],
        args: tuple,
        kwargs: dict,
        tracked: list[_Tracked],
        derived: bool,
        inputs: list[torch.Tensor],
    ) -> Any:
        name, shown = op_names(func)
        before = frozenset().union(*(t.origins for t in tracked))
        special = self._construction(func, name, shown, args, kwargs, before)
        if special is not _PASS:
            return special
        zero = _zero_gradient(name, kwargs) or _expectation_draw(name, args, kwargs)
        if zero and name != _out_of_place(name):
            return self._in_place(func, args, kwargs, before | {self.origin(_kind(name, kwargs), shown)})
        plain = func(*args, **kwargs)
        if name in _LEAVES:
            if args and isinstance(args[0], torch.Tensor):
                self._leave(args[0], shown, before)
            return plain
        # the gradient passes here (not under no_grad: a view then requires grad but leads nowhere); a
        # discrete by-product waits
        if not zero and derived and torch.is_grad_enabled() and _carries_gradient(plain):
            self.note(before, GATE)
            for t in _tensors(plain):
                if not t.is_floating_point():
                    origin = frozenset({self.origin(_kind(name, kwargs), shown)})
                    self._track(t, _Tracked(origin, None, self._lazy_soft(name, args, kwargs, plain)))
            return plain
        own = frozenset({self.origin(_kind(name, kwargs), shown)} if derived or zero else ())
        origins = before | own
        if not isinstance(plain, torch.Tensor):  # several results
            for t in _tensors(plain):
                soft = self._lazy_soft(name, args, kwargs, plain) if not t.is_floating_point() else None
                self._track(t, _Tracked(origins, None, soft, entries=self._entries(name, tracked, inputs, t)))
            return plain
        smooth = self._smooth(func, name, args, kwargs)
        origins = frozenset().union(own, *(t.origins for t in tracked))  # a region linked on the way: its own
        entries = self._entries(name, tracked, inputs, plain)
        # lazy: discrete stand-ins, views, casts and in-place results wait until they become numbers the
        # gradient would otherwise not reach; so do a no-grad region's values (leaves, as in the plain forward)
        if (
            not plain.is_floating_point()
            or name in _LAZY
            or not torch.is_grad_enabled()
            or (args and plain is args[0])
        ):
            soft = self._lazy_soft(name, args, kwargs, plain)
            surrogate = straight(plain, smooth)
            self._track(plain, _Tracked(origins, surrogate, soft, detached=name in _DETACH, entries=entries))
            return plain
        replaced = straight(plain, smooth)
        if replaced is None:
            self._track(plain, _Tracked(origins, None, entries=entries))
            return plain
        self.note(origins, STRAIGHT_THROUGH)
        return replaced

    def _in_place(self, func: Callable[..., Any], args: tuple, kwargs: dict, origins: frozenset[int]) -> Any:
        """An in-place rounding (``x.round_()``): identity backward where ``x`` carries the gradient."""
        x = args[0] if args else None
        name = op_names(func)[0]
        info = self.lookup(x) if isinstance(x, torch.Tensor) else None
        if info is not None and info.surrogate is not None and _out_of_place(name) in _ZERO:
            func(*args, **kwargs)  # a no-grad region's value: its stand-in (an alias) follows, the identity
            self._track(x, _Tracked(origins, info.surrogate, entries=info.entries))
            return x
        if not isinstance(x, torch.Tensor) or not x.requires_grad or _out_of_place(name) not in _ZERO:
            self.note(origins, UNHANDLED)
            return func(*args, **kwargs)
        self.note(origins, STRAIGHT_THROUGH)
        with torch.enable_grad():
            return _InPlaceStraightThrough.apply(x, lambda: func(*args, **kwargs))

    def _stand_ins(self, tree: Any) -> Any:
        """``tree`` with each tracked tensor replaced by its straight-through stand-in (_NoRule: one has none)."""

        def swap(a: Any) -> Any:
            info = self.lookup(a) if isinstance(a, torch.Tensor) else None
            if info is None:
                return a
            surrogate = info.surrogate if info.surrogate is not None else self._region(a, info)
            if surrogate is None:
                raise _NoRule
            return surrogate

        return tree_map(swap, tree)

    def _smooth(self, func: Callable[..., Any], name: str, args: tuple, kwargs: dict) -> torch.Tensor | None:
        """What the op's result back-propagates through in bpda mode; None when no rule applies."""
        if name == "one_hot":
            info = self.lookup(args[0]) if args and isinstance(args[0], torch.Tensor) else None
            return info.soft() if info is not None and info.soft is not None else None
        if _random(name, args, kwargs):  # never drawn twice: the expectation, or no rule
            return self._expectation(args[0]) if _expectation_draw(name, args, kwargs) else None
        try:
            with torch.enable_grad():
                out = self._counterpart(_pure(func, name), name, *self._stand_ins((args, kwargs)))
        except Exception:  # no rule: a stand-in the op refuses (an index, a dtype), one that draws, or none
            return None
        if isinstance(out, torch.Tensor) and out.is_floating_point() and out.requires_grad:
            return out
        return None

    def _expectation(self, p: Any) -> torch.Tensor | None:
        """``bernoulli(p)`` back-propagates as ``p`` (its expectation) -- unless ``p`` was detached on purpose
        right before the draw (stochastic activation pruning: the draw is randomness, not a function)."""
        info = self.lookup(p) if isinstance(p, torch.Tensor) else None
        if info is not None and info.detached:
            return None
        return self._stand_in(p)

    def _counterpart(self, func: Callable[..., Any], name: str, args: tuple, kwargs: dict) -> Any:
        """The smooth version of one op, on the stand-ins (module docstring)."""
        first = args[0] if args else None
        if name in ("sign", "sgn"):
            return 2 * first * self._slope(first)  # sign spans 2 over the input's spread
        if name == "heaviside":
            return first * self._slope(first)
        if name in _ZERO or name in _QUANTISE:
            return first
        if name in _ROUNDING_DIVISION or _rounds(name, kwargs):
            num, den = (args[1], args[0]) if name == "__rfloordiv__" else (args[0], args[1])
            return torch.true_divide(num, den)
        if name in _ABOVE or name in _BELOW:
            above = first - args[1] if name in _ABOVE else args[1] - first
            return above * self._slope(first if not isinstance(args[1], torch.Tensor) else above)
        if name in ("logical_not", "__invert__"):
            return -first
        if name in _EQUAL:
            return None  # a bump around the equality has zero slope at it: no rule (unhandled)
        if name in ("bucketize", "searchsorted"):
            return _bin_index(func, name, args, kwargs)
        if (
            name == "where"
            and len(args) == 3
            and isinstance(first, torch.Tensor)
            and first.is_floating_point()
        ):
            return first * args[1] + (1 - first) * args[2]
        if (name in _CASTS or name in _DETACH) and isinstance(first, torch.Tensor):
            out = func(*args, **kwargs)
            return first if not out.is_floating_point() or name in _DETACH else out
        return _without_draws(func, args, kwargs)

    def _lazy_soft(
        self, name: str, args: tuple, kwargs: dict, plain: Any
    ) -> Callable[[], torch.Tensor | None] | None:
        """:meth:`_soft`, computed only if a ``one_hot`` of the indices asks for it."""
        if name not in ("argmax", "argmin", "max", "min", "topk"):
            return None
        return lambda: self._soft(name, args, kwargs, plain)

    def _soft(self, name: str, args: tuple, kwargs: dict, plain: Any) -> torch.Tensor | None:
        """For the indices of ``argmax``/``argmin``/``max``/``min``/``topk`` along a dimension: what ``one_hot``
        of them back-propagates through -- a softmax at the temperature of the scores' spread along it
        (successive softmaxes over the scores not yet picked, for ``topk``)."""
        if name not in ("argmax", "argmin", "max", "min", "topk") or kwargs.get("keepdim"):
            return None
        if name == "topk":
            dim = args[2] if len(args) > 2 else kwargs.get("dim", -1)
            largest = args[3] if len(args) > 3 else kwargs.get("largest", True)
        else:
            dim = args[1] if len(args) > 1 else kwargs.get("dim")
            largest = name in ("argmax", "max")
        try:
            z = self._stand_ins(args[0])
        except _NoRule:
            return None
        if not isinstance(dim, int) or not isinstance(z, torch.Tensor) or not z.is_floating_point():
            return None
        if name != "topk" and len(args) > 2:  # keepdim given by position
            return None
        with torch.enable_grad():
            z = z if largest else -z
            spread = torch.nan_to_num(z.detach().std(dim, keepdim=True), nan=1.0)  # nan: one score
            z = z / spread.clamp_min(1e-12)
            if name != "topk":
                return torch.softmax(z, dim=dim).movedim(dim, -1)
            picks = _tensors(plain)[-1]
            chosen = torch.zeros_like(z, dtype=torch.bool)
            softs = []
            for j in range(picks.shape[dim]):
                softs.append(torch.softmax(z.masked_fill(chosen, float("-inf")), dim=dim).movedim(dim, -1))
                chosen = chosen.scatter(dim, picks.narrow(dim, j, 1), True)
            return torch.stack(softs, dim=dim % z.dim())

    # ------------------------------------------------------------------- constructions spread over several ops

    def _construction(
        self,
        func: Callable[..., Any],
        name: str,
        shown: str,
        args: tuple,
        kwargs: dict,
        before: frozenset[int],
    ) -> Any:
        """The rules for constructions spread over more than one op, or whose result still carries a (wrong)
        gradient; ``_PASS`` when none applies and the op goes through the ordinary rules."""
        first = args[0] if args else None
        if not isinstance(first, torch.Tensor):
            return _PASS
        if name in _ASSIGN:
            return self._assignment(func, name, shown, args, kwargs, before)
        if name in _RESIDUES and first.requires_grad:
            plain = func(*args, **kwargs)
            self._residues[id(plain)] = (weakref.ref(plain), first, shown)
            return plain
        if name in _SUBTRACT and len(args) > 1 and "alpha" not in kwargs:
            return self._quantised(func, args, kwargs, before)
        if name in _TO_PYTHON and (first.requires_grad or self.lookup(first) is not None):
            plain = func(*args, **kwargs)
            origins = before | {self.origin(PYTHON_NUMBER, shown)}
            if isinstance(plain, float):  # ints are cached by Python: their identity says nothing
                self._numbers[id(plain)] = (plain, self._stand_in(first), origins)
            return plain
        if name in ("tensor", "new_tensor"):
            return self._copied(func, shown, args, kwargs, before)
        if name == "__getitem__" and len(args) == 2:
            return self._lookup_table(func, args, kwargs)
        if name in _SATURATING and first.requires_grad and first.is_floating_point():
            return self._saturating(func, name, shown, args, kwargs, before)
        return _PASS

    def custom_function(self, cls: type, apply: Callable[..., Any], args: tuple, kwargs: dict) -> Any:
        """A user's ``torch.autograd.Function`` on the input's path, run as a whole (its inner ops are its
        own business: they are not traced). Its backward is checked once on the first input it sees
        (:func:`_backward_verdict`): a sound one, or the identity, is kept; a zero, missing or wrong one is
        replaced by the identity (straight-through) where its one differentiable input is shaped like its
        output, else reported unhandled."""
        tensors = _tensors((args, kwargs))
        tracked = [info for t in tensors if (info := self.lookup(t)) is not None]
        self.suspended += 1  # neither its inner ops nor the check of its backward are the model's ops
        try:
            if any(info.foreign for info in tracked):  # inside the forward's own optimisation: as written
                return self._foreign(lambda: apply(*args, **kwargs), cls.__qualname__, tracked, tensors)
            return self._custom_function(cls, apply, args, kwargs)
        finally:
            self.suspended -= 1

    def _custom_function(self, cls: type, apply: Callable[..., Any], args: tuple, kwargs: dict) -> Any:
        devices = {t.device for t in _tensors((args, kwargs)) if t.device.type == "cuda"}
        drawn_from = _random_state(*devices) if cls not in _VERDICTS else None
        plain = apply(*args, **kwargs)
        inputs = [
            t
            for t in _tensors((args, kwargs))
            if t.requires_grad and t.is_floating_point() and id(t) not in self._parameters
        ]
        cut = frozenset().union(*(i.origins for t in _tensors((args, kwargs)) if (i := self.lookup(t))))
        if not isinstance(plain, torch.Tensor) or not plain.is_floating_point() or not inputs:
            if cut:
                self.note(cut, UNHANDLED)
            return plain
        verdict = _VERDICTS.get(cls)
        if verdict is None:
            verdict = _VERDICTS[cls] = _backward_verdict(apply, args, kwargs, plain, inputs, drawn_from)
        if verdict == "sound":
            self.note(cut, GATE)
            return plain
        kind = {"identity": CUSTOM_IDENTITY, "zero": CUSTOM_ZERO}.get(verdict, CUSTOM_WRONG)
        origins = cut | {self.origin(kind, f"{cls.__qualname__}.apply")}
        if verdict == "identity":
            self.note(origins, OWN_BACKWARD)
            return plain
        replaced = straight(plain, inputs[0]) if len(inputs) == 1 else None
        self.note(origins, UNHANDLED if replaced is None else STRAIGHT_THROUGH)
        return plain if replaced is None else replaced

    def _assignment(
        self,
        func: Callable[..., Any],
        name: str,
        shown: str,
        args: tuple,
        kwargs: dict,
        before: frozenset[int],
    ) -> Any:
        """``x[mask] = v``, ``masked_fill``, ``index_put`` at a mask cut from the input (a threshold) with values
        that carry no gradient: the result back-propagates into ``x`` as the identity (BPDA's rule for
        thresholding defences: the assigned values stand for the ones they replace)."""
        x, where = args[0], args[1] if len(args) > 1 else kwargs.get("mask", kwargs.get("indices"))
        value = args[2] if len(args) > 2 else kwargs.get("value", kwargs.get("values"))
        cut = any(self.lookup(t) is not None for t in _tensors(where))
        if not (x.requires_grad and cut and not _carries_gradient(value) and x.is_floating_point()):
            return _PASS
        self.note(before | {self.origin(MASKED_ASSIGNMENT, shown)}, STRAIGHT_THROUGH)
        if name == "__setitem__" or name.endswith("_"):
            with torch.enable_grad():
                out = _InPlaceStraightThrough.apply(x, lambda: func(*args, **kwargs))
            return None if name == "__setitem__" else out
        return straight(func(*args, **kwargs), x)

    def _quantised(self, func: Callable[..., Any], args: tuple, kwargs: dict, before: frozenset[int]) -> Any:
        """``x - remainder(x, q)`` (or ``fmod``, ``frac``): ``x`` rounded to a multiple of ``q``, gradient zero;
        back-propagates as ``x``, as rounding does."""
        x, r = args[0], args[1]
        entry = self._residues.get(id(r)) if isinstance(r, torch.Tensor) else None
        if entry is None or entry[0]() is not r or not isinstance(x, torch.Tensor) or not x.requires_grad:
            return _PASS
        source = entry[1]
        if x is not source and not (x.shape == source.shape and torch.equal(x, source)):
            return _PASS
        plain = func(*args, **kwargs)
        replaced = straight(plain, x)
        if replaced is None:
            return plain
        self.note(before | {self.origin(RESIDUE, entry[2])}, STRAIGHT_THROUGH)
        return replaced

    def _numbers_in(self, tree: Any) -> list[_Number]:
        """The numbers taken out with ``.item()`` among an op's arguments, in argument order."""
        found = []
        for a in tree_flatten(tree)[0]:
            entry = self._numbers.get(id(a)) if not isinstance(a, torch.Tensor) else None
            if entry is not None and entry[0] is a:
                found.append(entry)
        return found

    def _numbers_back(
        self, func: Callable[..., Any], args: tuple, kwargs: dict, numbers: list[_Number]
    ) -> Any:
        """``full_like(x, v)``, ``torch.tensor([v, w])``, ``new_full`` ... of numbers from ``.item()``: the
        result back-propagates into the tensors they came from (one number fills the result; several fill
        it in order when they are all its values); unhandled otherwise."""
        plain = func(*args, **kwargs)
        origins = frozenset().union(*(o for _, _, o in numbers))
        sources = [s for _, s, _ in numbers]
        replaced = None
        if (
            isinstance(plain, torch.Tensor)
            and plain.is_floating_point()
            and all(s is not None for s in sources)
        ):
            with torch.enable_grad():
                if len(sources) == 1 and sources[0].numel() == 1:
                    replaced = straight(plain, sources[0].reshape(()).expand(plain.shape))
                elif len(sources) == plain.numel() and all(s.numel() == 1 for s in sources):
                    replaced = straight(
                        plain, torch.stack([s.reshape(()) for s in sources]).view(plain.shape)
                    )
        self.note(origins, UNHANDLED if replaced is None else STRAIGHT_THROUGH)
        return plain if replaced is None else replaced

    def _copied(
        self, func: Callable[..., Any], shown: str, args: tuple, kwargs: dict, before: frozenset
    ) -> Any:
        """``x.new_tensor(y)`` / ``torch.tensor(y)`` copy ``y``'s values out of the graph: back into ``y``."""
        data = args[1] if op_names(func)[0] == "new_tensor" else args[0]
        if not isinstance(data, torch.Tensor) or not (data.requires_grad or self.lookup(data) is not None):
            return _PASS
        plain = func(*args, **kwargs)
        origins = before | {self.origin(NEW_TENSOR, shown)}
        replaced = straight(plain, self._stand_in(data)) if plain.is_floating_point() else None
        if replaced is None:
            self._track(plain, _Tracked(origins, None))
            return plain
        self.note(origins, STRAIGHT_THROUGH)
        return replaced

    def _lookup_table(self, func: Callable[..., Any], args: tuple, kwargs: dict) -> Any:
        """``table[index]`` of a constant 1-D table at an index cut from the input (``lut[(255 x).long()]``):
        back-propagates as the piecewise-linear interpolation of the table (its central-difference slope at
        the index, times the index's own straight-through gradient)."""
        table, index = args
        info = self.lookup(index) if isinstance(index, torch.Tensor) else None
        if (
            info is None
            or info.surrogate is None
            or index.dtype not in (torch.int64, torch.int32, torch.int16, torch.int8)  # uint8, bool: masks
            or table.requires_grad
            or self.lookup(table) is not None
            or table.dim() != 1
            or len(table) < 2
            or not table.is_floating_point()
        ):
            return _PASS
        plain = func(*args, **kwargs)
        slope = torch.gradient(table)[0][index]
        with torch.enable_grad():
            replaced = straight(plain, info.surrogate * slope)
        if replaced is None:
            return plain
        self.note(info.origins | {self.origin(LOOKUP, "Tensor.__getitem__")}, STRAIGHT_THROUGH)
        return replaced

    def _saturating(
        self,
        func: Callable[..., Any],
        name: str,
        shown: str,
        args: tuple,
        kwargs: dict,
        before: frozenset[int],
    ) -> Any:
        """``sigmoid`` / ``tanh`` / ``clamp`` saturated on most of an example (the op's local slope below 1 %
        of its peak on at least half its elements; ``clamp`` also steep: the input's spread over twice its
        range): that example back-propagates through the line from the input's range onto the output's
        (scale-aware identity); the others keep the exact gradient."""
        z = args[0]
        bounds = _bounds(name, args, kwargs)
        if bounds is None or z.dim() < 2:  # one number per example: no spread to measure saturation on
            return _PASS
        lo, hi = bounds
        with torch.no_grad():
            if name == "sigmoid":
                local = 4 * torch.sigmoid(z) * (1 - torch.sigmoid(z))
            elif name == "tanh":
                local = 1 - torch.tanh(z) ** 2
            else:
                local = ((z >= lo) & (z <= hi)).to(z.dtype)
            dims = _example_dims(z)
            spread = z.amax(dims, keepdim=True) - z.amin(dims, keepdim=True)
            saturated = (local < 0.01).to(z.dtype).mean(dims, keepdim=True) >= 0.5
            if name not in ("sigmoid", "tanh"):
                saturated &= spread > 2 * (hi - lo)
        if not bool(saturated.any()):
            return _PASS
        plain = func(*args, **kwargs)
        with torch.enable_grad():
            smooth = torch.where(saturated, z * ((hi - lo) / spread.clamp_min(1e-12)), plain)
        replaced = straight(plain, smooth)
        if replaced is None:
            return plain
        self.note(before | {self.origin(SATURATION, shown)}, STRAIGHT_THROUGH)
        return replaced


# ------------------------------------------------------------------------------- custom autograd.Function

#: The verdict on each custom Function's backward, checked once (on the scan's probe) and kept.
_VERDICTS: weakref.WeakKeyDictionary[type, str] = weakref.WeakKeyDictionary()
_ACTIVE: list[Tracer] = []  # the tracers of the open straight_through blocks, innermost last
_APPLY = torch.autograd.Function.__dict__["apply"]
_OWN = (_StraightThrough, _InPlaceStraightThrough)  # this module's own Functions: never checked


def _backward_verdict(
    apply: Callable[..., Any],
    args: tuple,
    kwargs: dict,
    out: torch.Tensor,
    inputs: list[torch.Tensor],
    drawn_from: _RandomState | None,
) -> str:
    """``zero`` (no gradient, zero, or the backward raises), ``sound`` (agrees with a central finite
    difference of the forward along a random direction to 5 %), ``identity`` (the gradient is the
    cotangent: the author's own straight-through), else ``wrong``. The check's directions come from a
    private generator; the forward runs again from the random state ``out`` was drawn from (a random
    Function draws what it drew), and the state after ``out`` is put back (the stream stays the forward's)."""
    g = torch.Generator(device=out.device).manual_seed(0)
    u = torch.randn(out.shape, generator=g, device=out.device, dtype=out.dtype)
    try:
        grads = torch.autograd.grad(out, inputs, u, allow_unused=True, retain_graph=True)
    except (RuntimeError, NotImplementedError):
        return "zero"
    if all(gr is None or not bool(gr.ne(0).any()) for gr in grads):
        return "zero"
    directions = [torch.randn(t.shape, generator=g, device=t.device, dtype=t.dtype) for t in inputs]
    h = 1e-3 * max(1.0, max(float(t.detach().abs().max()) for t in inputs))

    def shifted(sign: float) -> torch.Tensor:
        moved = {id(t): (t.detach() + sign * h * v) for t, v in zip(inputs, directions, strict=True)}
        new_args, new_kwargs = tree_map(lambda a: moved.get(id(a), a), (args, kwargs))
        after = _random_state(*drawn_from.devices) if drawn_from is not None else None
        try:
            if drawn_from is not None:
                _restore(drawn_from)
            with torch.no_grad():
                return apply(*new_args, **new_kwargs)
        finally:
            if after is not None:
                _restore(after)

    finite = float(((shifted(1.0) - shifted(-1.0)) * u).sum()) / (2 * h)
    analytic = sum(float((gr * v).sum()) for gr, v in zip(grads, directions, strict=True) if gr is not None)
    if abs(finite - analytic) <= 0.05 * max(abs(finite), abs(analytic)) + 1e-6:
        return "sound"
    if (
        len(inputs) == 1
        and grads[0] is not None
        and grads[0].shape == u.shape
        and torch.allclose(grads[0], u)
    ):
        return "identity"
    return "wrong"


def _traced_apply(cls: type, *args: Any, **kwargs: Any) -> Any:
    """``Function.apply`` while a straight_through block is open: the innermost tracer sees the call."""
    apply = _APPLY.__get__(None, cls)
    tracer = _ACTIVE[-1] if _ACTIVE else None
    if tracer is None or tracer.suspended or issubclass(cls, _OWN) or not torch.is_grad_enabled():
        return apply(*args, **kwargs)
    return tracer.custom_function(cls, apply, args, kwargs)


@contextlib.contextmanager
def _functions_seen(tracer: Tracer) -> Iterator[None]:
    """Route ``torch.autograd.Function.apply`` through ``tracer`` for the block (torch function modes do not
    see it); put back when the last block closes."""
    if not _ACTIVE:
        torch.autograd.Function.apply = classmethod(_traced_apply)  # type: ignore[method-assign,assignment]
    _ACTIVE.append(tracer)
    try:
        yield
    finally:
        _ACTIVE.remove(tracer)
        if not _ACTIVE:
            torch.autograd.Function.apply = _APPLY  # type: ignore[method-assign]


# ------------------------------------------------------------------------------------------- bpda mode


def approximated_modules(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """The sub-modules (the model itself included) that bring their own ``bpda_approximation``."""
    return [
        (name or type(m).__name__, m)
        for name, m in model.named_modules()
        if callable(getattr(m, "bpda_approximation", None))
    ]


def _approximation_hooks(model: nn.Module, tracer: Tracer) -> list[Any]:
    """Hooks that give each approximated module's output the backward of its ``bpda_approximation`` (the
    automatic rules are suspended inside it); their handles, to remove."""
    handles = []
    for name, module in approximated_modules(model):

        def enter(mod: nn.Module, args: tuple) -> None:
            tracer.suspended += 1

        def leave(mod: nn.Module, args: tuple, output: Any, name: str = name) -> Any:
            tracer.suspended -= 1
            if not torch.is_grad_enabled() or not isinstance(output, torch.Tensor):
                return None
            tracer.suspended += 1
            try:
                smooth = mod.bpda_approximation(*args)
            finally:
                tracer.suspended -= 1
            replaced = straight(output, smooth if isinstance(smooth, torch.Tensor) else None)
            if replaced is None:
                raise ValueError(
                    f"{name}.bpda_approximation returned {getattr(smooth, 'shape', type(smooth).__name__)}; it "
                    f"must return a float tensor shaped like the module's output {tuple(output.shape)}"
                )
            tracer.note([tracer.origin(APPROXIMATION, name)], MODEL_RULE)
            return replaced

        handles += [module.register_forward_pre_hook(enter), module.register_forward_hook(leave)]
    return handles


@contextlib.contextmanager
def straight_through(model: nn.Module) -> Iterator[Tracer]:
    """Run ``model``'s forward passes inside the block in bpda mode (values unchanged): the automatic rules,
    and each module's own ``bpda_approximation``. Yields the :class:`Tracer` (what it found)."""
    tracer = Tracer(model.parameters(), known=[*model.parameters(), *model.buffers()])
    handles = _approximation_hooks(model, tracer)
    handles.append(model.register_forward_hook(lambda mod, args, out: tracer.realised(out)))
    try:
        with tracer, _functions_seen(tracer):
            yield tracer
    finally:
        for handle in handles:
            handle.remove()


# ------------------------------------------------------------------------------------------------ scan


@dataclass(frozen=True)
class Finding:
    """One operation on the input's path that stops its gradient, and the rule ``bpda`` applies to it."""

    kind: str  # ZERO_GRADIENT, QUANTISATION, THRESHOLD, INDEX, INTEGER_CAST, DETACH, ... (module constants)
    op: str  # e.g. "round", "Tensor.gt", "functional.one_hot", or the module of a bpda_approximation
    rule: str  # one of RULES


@dataclass(frozen=True)
class GradientPath:
    """What :func:`scan` found on a model's input path: the operations, whether an input gradient reaches
    the probe under exact gradients and in bpda mode, and the round trips out of torch that bpda linked."""

    findings: tuple[Finding, ...]
    exact_gradient: bool
    bpda_gradient: bool
    bpda_changes: bool = True  # the bpda-mode input gradient on the probe differs from the exact one
    round_trips: tuple[RoundTrip, ...] = ()
    gradient_check: gradcheck.GradientCheck | None = None  # the gradient-reliability probe (its findings too)

    @property
    def modes(self) -> tuple[GradMode, ...]:
        """``exact``, and ``bpda`` when a rule replaced something, the gradient then reaches the input and
        differs from the exact one (a bpda mode that changes nothing would only double the attack's cost)."""
        ruled = any(f.rule in BPDA_RULES for f in self.findings)
        offered = ruled and self.bpda_gradient and self.bpda_changes
        return (GradMode.EXACT, GradMode.BPDA) if offered else (GradMode.EXACT,)

    @property
    def unhandled(self) -> tuple[str, ...]:
        """The operations no rule covers: their gradient is lost in every mode."""
        return tuple(dict.fromkeys(f.op for f in self.findings if f.rule == UNHANDLED))

    @property
    def reaches_input(self) -> bool:
        """False: no gradient reaches the input in any mode (e.g. a NumPy step that changes the shape)."""
        return self.exact_gradient or GradMode.BPDA in self.modes

    @property
    def summary(self) -> str:
        """One line for the log and the report."""
        shown = [f"{f.op} [{f.kind}]: {f.rule}" for f in self.findings[:6]]
        ops = ", ".join(shown) + (f" and {len(self.findings) - 6} more" if len(self.findings) > 6 else "")
        if self.unhandled:
            ops = f"unhandled: {', '.join(self.unhandled)} (no rule brings their gradient back); {ops}"
        check = self.gradient_check
        if check is not None and check.skipped.startswith(gradcheck.NOT_RUN):
            ops = f"{ops}; {check.describe()}" if ops else check.describe()
        if not self.reaches_input:
            return (
                f"no gradient reaches the input ({ops or 'the logits do not depend on it differentiably'}): "
                "its gradient attacks saw a zero gradient, so its robustness rests on the gradient-free and "
                "transfer attacks"
            )
        if GradMode.BPDA in self.modes:
            exact = "reach" if self.exact_gradient else "do not reach"
            trips = "; ".join(
                f"{t.describe()}{f' ({n} times)' if n > 1 else ''}" for t, n in self.linked().items()
            )
            trips = f"; round trips out of torch linked: {trips}" if trips else ""
            return (
                f"{ops}; exact gradients {exact} the input, the bpda mode goes straight through them{trips}"
            )
        return (
            f"{ops}; no rule changes the input's gradient, so exact gradients only"
            if ops
            else "exact gradients"
        )

    def linked(self) -> dict[RoundTrip, int]:
        """Each distinct linked round trip and how often the probe made it (once per image in a loop)."""
        return dict(Counter(self.round_trips))

    def to_dict(self) -> dict[str, Any]:
        return {
            "summary": self.summary,
            "modes": [m.value for m in self.modes],
            "exact_gradient": self.exact_gradient,
            "bpda_gradient": self.bpda_gradient,
            "bpda_changes": self.bpda_changes,
            "findings": [{"kind": f.kind, "op": f.op, "rule": f.rule} for f in self.findings],
            "unhandled": list(self.unhandled),
            "round_trips": [
                {"left": t.left, "back": t.back, "shape": list(t.shape), "scale": t.scale, "count": n}
                for t, n in self.linked().items()
            ],
            "gradient_check": self.gradient_check.to_dict() if self.gradient_check is not None else None,
        }


def _findings(tracer: Tracer) -> tuple[Finding, ...]:
    """Each (kind, op) once, with its strongest rule; results never used again are left out."""
    rules: dict[tuple[str, str], str] = {}
    for o in tracer.origins:
        if o.statuses:
            best = min([*o.statuses, rules.get((o.kind, o.op), GATE)], key=RULES.index)
            rules[(o.kind, o.op)] = best
    return tuple(Finding(kind, op, rule) for (kind, op), rule in rules.items())


@contextlib.contextmanager
def _probing(model: nn.Module, device: torch.device) -> Iterator[None]:
    """Parameters frozen (so only tensors computed from the input require grad), torch's random state seeded
    with :data:`PROBE_SEED` (a randomised model draws during the probe: what the scan decides, escalation
    included, must not depend on what the process drew before it) and left as it was afterwards, everything
    restored."""
    grads = [(p, p.requires_grad) for p in model.parameters()]
    try:
        with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
            torch.default_generator.manual_seed(PROBE_SEED)
            if device.type == "cuda":
                torch.cuda.manual_seed(PROBE_SEED)
            for p, _ in grads:
                p.requires_grad_(False)
            yield
    finally:
        for p, req in grads:
            p.requires_grad_(req)


class _Pass(NamedTuple):
    """One probe forward and backward: the gradient of ``(logits * weights).sum()`` w.r.t. the input (None:
    none reaches it, or it is zero), the tracer of a bpda pass, the logits and the projection's weights."""

    gradient: torch.Tensor | None
    tracer: Tracer | None = None
    logits: torch.Tensor | None = None
    weights: torch.Tensor | None = None


def _input_gradient(model: nn.Module, x: torch.Tensor, trace: bool) -> _Pass:
    """The gradient of a fixed random projection of the logits w.r.t. ``x`` (in bpda mode when ``trace``),
    with the tracer of that pass and the logits."""
    xr = x.detach().clone().requires_grad_(True)
    tracer = None
    with torch.enable_grad():
        if trace:
            with straight_through(model) as tracer:
                out = model(xr)
                tracer.finish(out)
        else:
            out = model(xr)
        if not isinstance(out, torch.Tensor):
            return _Pass(None, tracer)
        weights = torch.randn(out.shape, generator=torch.Generator().manual_seed(0)).to(out)
        if not out.requires_grad:
            return _Pass(None, tracer, out.detach(), weights)
        try:
            (grad,) = torch.autograd.grad((out * weights).sum(), xr, allow_unused=True)
        except RuntimeError:  # an op whose derivative torch does not implement
            return _Pass(None, tracer, out.detach(), weights)
    grad = grad if grad is not None and bool(grad.ne(0).any()) else None
    return _Pass(grad, tracer, out.detach(), weights)


def scan(model: nn.Module, probe: torch.Tensor) -> GradientPath:
    """The operations on ``model``'s input path that stop its gradient, found on the first rows of
    ``probe`` (images in [0, 1]), and whether a gradient reaches the input exactly and in bpda mode, and
    whether the two differ (both passes start from the same random state: a randomised model draws alike);
    then the gradient-reliability probe (:mod:`.gradcheck`), whose failures are findings without a rule."""
    x = probe[:PROBE_ROWS]
    with _probing(model, x.device):
        state = _random_state(x.device)
        exact = _input_gradient(model, x, trace=False)
        _restore(state)
        bpda = _input_gradient(model, x, trace=True)
        tracer = bpda.tracer if bpda.tracer is not None else Tracer()  # a traced pass always has one
        changes = bpda.gradient is not None and (
            exact.gradient is None or not _close(bpda.gradient, exact.gradient)
        )
        path = GradientPath(
            _findings(tracer),
            exact.gradient is not None,
            bpda.gradient is not None,
            bpda_changes=changes,
            round_trips=tuple(tracer.round_trips.linked),
        )
        check = _gradient_check(model, x, exact, path, state)
    failed = tuple(Finding(kind, op, UNHANDLED) for kind, op in check.failures())
    return dataclasses.replace(path, findings=path.findings + failed, gradient_check=check)


def _gradient_check(
    model: nn.Module, x: torch.Tensor, exact: _Pass, path: GradientPath, state: _RandomState
) -> gradcheck.GradientCheck:
    """:func:`.gradcheck.check` of the exact pass, every forward from the scan's random state. The finite
    differences are not compared where the bpda mode is offered: the scan has already found the exact
    gradient cut, and the bpda mode's stand-ins are no derivative of the forward by design."""
    if exact.logits is None or exact.weights is None:
        return gradcheck.GradientCheck(len(x), skipped=f"{gradcheck.NOT_RUN}: the model returned no tensor")
    skip = (
        "finite differences not compared: the bpda mode stands in for the cut gradient"
        if (GradMode.BPDA in path.modes)
        else ""
    )
    return gradcheck.check(
        model, x, exact.logits, exact.gradient, exact.weights, lambda: _restore(state), skip_gradient=skip
    )


def _close(a: torch.Tensor, b: torch.Tensor) -> bool:
    return bool(torch.allclose(a, b, rtol=1e-5, atol=1e-6 * float(b.abs().max())))


class AutoBPDA(GradModeSwitch):
    """``model`` with the gradient modes :func:`scan` found for it (``path``): ``exact`` is its plain
    forward, ``bpda`` the same forward under :func:`straight_through`."""

    def __init__(self, model: nn.Module, path: GradientPath) -> None:
        super().__init__()
        self.model = model
        self.path = path
        self.modes = path.modes

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        if self.grad_mode is not GradMode.BPDA or not torch.is_grad_enabled():
            return self.model(*args, **kwargs)
        with straight_through(self.model):
            return self.model(*args, **kwargs)


def auto_bpda(model: nn.Module, probe: torch.Tensor, name: str = "model") -> nn.Module:
    """``model`` in an :class:`AutoBPDA` when :func:`scan` finds an operation that stops the input's gradient,
    a ``bpda_approximation``, or no gradient at all; as it is when it has gradient-mode switches of its own
    (a ``FixedFrontEnd``: its own BPDA takes precedence) or exact gradients pass and nothing was found."""
    if grad_switches(model):
        return model
    path = scan(model, probe)
    if not path.findings and path.exact_gradient:
        return model
    if path.reaches_input and not path.unhandled:
        log.info("%s: gradient path: %s (grad modes %s)", name, path.summary, [m.value for m in path.modes])
    elif path.reaches_input:
        log.warning(
            "%s: gradient path: %s (grad modes %s)", name, path.summary, [m.value for m in path.modes]
        )
    else:
        log.warning("%s: %s", name, path.summary)
    wrapped = AutoBPDA(model, path)
    wrapped.training = model.training  # only its own flag: the model's modules stay as they were handed over
    return wrapped


def gradient_path(model: nn.Module) -> GradientPath | None:
    """What :func:`auto_bpda` found for ``model`` (None: it was not wrapped)."""
    return next((m.path for m in model.modules() if isinstance(m, AutoBPDA)), None)


def gradient_path_meta(model: nn.Module) -> dict[str, Any]:
    """``{"gradient_path": ...}`` for meta.json when :func:`auto_bpda` wrapped ``model``, else nothing."""
    path = gradient_path(model)
    return {"gradient_path": path.to_dict()} if path is not None else {}
