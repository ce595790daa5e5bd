"""Automatic BPDA for any model: find the operations on the input's path whose gradient is zero almost
everywhere or missing, and offer the ``bpda`` gradient mode for them without subclassing.

A defence written as ordinary torch code (``round(8x)/8``, a threshold mask, a cast to ``uint8`` and back)
gives its attacker a zero or missing input gradient, so exact-gradient attacks fail for the wrong reason
(Athalye, Carlini & Wagner 2018). :func:`scan` runs one forward pass of a probe batch under a
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
the same forward runs under that mode, which keeps every value and gives each such operation a
straight-through backward: the identity for rounding, quantisation, casts and ``detach`` (``round(x)``
back-propagates as ``x``), the signed difference for a comparison (``a > b`` as ``a - b``), the softmax for
``one_hot(argmax(z))``, the true quotient for rounding division, the departed tensor for values that come
back from outside torch. A discrete result that only gates values which carry the gradient anyway
(``x * (x > t)``, a top-k mask) is left alone: its exact gradient is the useful one. A module may bring its
own smooth approximation instead: a method ``bpda_approximation(*inputs)`` returning a tensor shaped like its
output is what that output back-propagates through in ``bpda`` mode (its values stay the exact forward's,
and the automatic rules stay out of it).
"""

from __future__ import annotations

import contextlib
import logging
import weakref
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from torch.overrides import TorchFunctionMode, resolve_name
from torch.utils._pytree import tree_flatten, tree_map

from robustbench_wave.models.frontend import GradMode, GradModeSwitch, grad_switches
from robustbench_wave.models.roundtrip import RoundTrip, RoundTrips

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

# What the bpda mode does with it (Finding.rule), strongest first.
STRAIGHT_THROUGH = "straight-through"
MODEL_RULE = "the model's bpda_approximation"
ROUND_TRIP = "identity across the round trip (BPDA)"
LOST = "the values leave torch, no gradient comes back"
UNHANDLED = "unhandled"
NO_RULE = "no straight-through rule"
GATE = "gradient passes around it"
RULES = (STRAIGHT_THROUGH, MODEL_RULE, ROUND_TRIP, LOST, UNHANDLED, NO_RULE, GATE)

_ZERO = {"round", "floor", "ceil", "trunc", "fix", "sign", "sgn", "heaviside"}
_QUANTISE = {"fake_quantize_per_tensor_affine", "fake_quantize_per_channel_affine"}
_ROUNDING_DIVISION = {"floor_divide", "__floordiv__", "__rfloordiv__"}
_ABOVE = {"gt", "ge", "greater", "greater_equal", "__gt__", "__ge__"}
_BELOW = {"lt", "le", "less", "less_equal", "__lt__", "__le__"}
_EQUAL = {"eq", "ne", "not_equal", "__eq__", "__ne__", "isclose", "logical_not", "__invert__"}
_INDEX = {
    "argmax", "argmin", "topk", "sort", "argsort", "msort", "max", "min", "kthvalue", "mode", "median",
    "multinomial", "bernoulli", "bucketize", "searchsorted", "one_hot", "nonzero", "unique", "histc", "bincount",
}  # fmt: skip
_CASTS = {"to", "type", "type_as", "long", "int", "short", "char", "byte", "bool", "float", "double", "half"}
_VIEWS = {
    "view", "view_as", "reshape", "reshape_as", "flatten", "unflatten", "permute", "transpose", "t",
    "squeeze", "unsqueeze", "expand", "expand_as", "contiguous", "clone", "cpu", "cuda", "__getitem__",
    "narrow", "movedim", "select",
}  # fmt: skip
_AS = {"view_as", "reshape_as", "expand_as", "type_as"}
_DETACH = {"detach", "data"}
_LEAVES = {"numpy", "tolist", "__array__"}
#: Factories a torch function mode sees that bring data from outside torch in (``torch.from_numpy`` and
#: ``torch.Tensor(array)`` it never sees: :mod:`.roundtrip` finds those where they are first used).
_ENTERS = {"tensor", "as_tensor", "asarray", "new_tensor"}
#: Ops whose further tensor arguments give only a shape, dtype or device (``view_as(other)``, ``to(other)``).
_FIRST_ONLY = _AS | _CASTS
#: Results that stay discrete-valued stand-ins: tracked, given a straight-through value only where they
#: become numbers the gradient would otherwise not reach.
_LAZY = _CASTS | _VIEWS | _DETACH

#: Probe rows :func:`scan` runs (the data set's first images).
PROBE_ROWS = 2

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


def _tensors(tree: Any) -> list[torch.Tensor]:
    return [t for t in tree_flatten(tree)[0] if isinstance(t, torch.Tensor)]


def _brings_data_in(name: str, args: tuple, kwargs: dict) -> bool:
    """``torch.tensor(data)``, ``x.new_tensor(data)``: whether ``data`` comes from outside torch."""
    position = 1 if name == "new_tensor" else 0
    data = args[position] if len(args) > position else kwargs.get("data")
    return data is not None and not isinstance(data, torch.Tensor)


def _carries_gradient(out: Any) -> bool:
    return any(t.requires_grad for t in _tensors(out))


class _StraightThrough(torch.autograd.Function):
    """Forward ``value`` unchanged, backward into ``smooth`` (same shape): BPDA without rounding error."""

    @staticmethod
    def forward(ctx: Any, smooth: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
        ctx.dtype = smooth.dtype
        return value.view_as(value)

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
        return _StraightThrough.apply(smooth, value.detach())


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
    soft: torch.Tensor | None = None


class _NoRule(Exception):
    """A tracked tensor without a straight-through stand-in is an argument: this op gets no rule."""


class Tracer(TorchFunctionMode):
    """One forward pass's straight-through mode: follows the tensors computed from the input, notes every
    operation that stops their gradient (:attr:`origins`) and gives it a straight-through backward (the
    module docstring lists the rules) and links values that leave torch and come back (:mod:`.roundtrip`);
    every value is the plain forward's. ``known``: the model's parameters and buffers."""

    def __init__(self, known: Iterable[torch.Tensor] = ()) -> None:
        super().__init__()
        self.origins: list[_Origin] = []
        self.suspended = 0  # inside a module with its own bpda_approximation
        self._tracked: dict[int, tuple[weakref.ref, _Tracked]] = {}
        self.round_trips = RoundTrips(known)

    def __torch_function__(
        self, func: Callable[..., Any], types: Any, args: tuple = (), kwargs: dict | None = None
    ) -> Any:
        kwargs = kwargs or {}
        name = op_names(func)[0]
        if self.suspended:
            return func(*args, **kwargs)
        if name in _ENTERS and _brings_data_in(name, args, kwargs):
            return self._entered(func(*args, **kwargs), op_names(func)[1])
        if _shape_only(name):
            return self._produced(func(*args, **kwargs))
        inputs = _tensors(args[:1] if name in _FIRST_ONLY else (args, kwargs))  # x.to(other): only x
        if self.round_trips.pending:
            self._returns(inputs, op_names(func)[1])
        tracked = [info for t in inputs if (info := self.lookup(t)) is not None]
        derived = any(t.requires_grad for t in inputs)
        if not tracked and not derived:
            return self._produced(func(*args, **kwargs))
        return self._on_path(func, args, kwargs, tracked, derived)

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

    def finish(self, output: Any) -> None:
        """The forward's result: a cut result that reaches it had no rule anywhere on its way; values that
        left torch and never came back are lost, and what came back unmatched meanwhile is unhandled."""
        for t in _tensors(output):
            info = self.lookup(t)
            if info is not None and not t.requires_grad:
                self.note(info.origins, NO_RULE)
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
        info = self.lookup(x)
        stand_in = x if x.requires_grad else info.surrogate if info is not None else None
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

    # ------------------------------------------------------------------------------------------ the rules

    def _on_path(
        self, func: Callable[..., Any], args: tuple, kwargs: dict, tracked: list[_Tracked], derived: bool
    ) -> Any:
        name, shown = op_names(func)
        zero = _zero_gradient(name, kwargs)
        before = frozenset().union(*(t.origins for t in tracked))
        if zero and name != _out_of_place(name):
            return self._in_place(func, args, kwargs, before | {self.origin(_kind(name, kwargs), shown)})
        plain = func(*args, **kwargs)
        if name in _LEAVES:
            if args and isinstance(args[0], torch.Tensor):
                self._leave(args[0], shown, before)
            return plain
        if not zero and _carries_gradient(plain):  # the gradient passes here; a discrete by-product waits
            self.note(before, GATE)
            for t in _tensors(plain) if derived else ():
                if not t.is_floating_point():
                    self._track(t, _Tracked(frozenset({self.origin(_kind(name, kwargs), shown)}), None))
            return plain
        origins = before | ({self.origin(_kind(name, kwargs), shown)} if derived or zero else set())
        if not isinstance(plain, torch.Tensor):  # several results
            for t in _tensors(plain):
                self._track(t, _Tracked(origins, None))
            return plain
        smooth = self._smooth(func, name, args, kwargs)
        if not plain.is_floating_point() or name in _LAZY:
            self._track(plain, _Tracked(origins, straight(plain, smooth), self._soft(name, args, kwargs)))
            return plain
        replaced = straight(plain, smooth)
        if replaced is None:
            self._track(plain, _Tracked(origins, None))
            return plain
        self.note(origins, STRAIGHT_THROUGH)
        return replaced

    def _in_place(self, func: Callable[..., Any], args: tuple, kwargs: dict, origins: frozenset[int]) -> Any:
        """An in-place rounding (``x.round_()``): identity backward where ``x`` carries the gradient."""
        x = args[0] if args else None
        name = op_names(func)[0]
        if not isinstance(x, torch.Tensor) or not x.requires_grad or _out_of_place(name) not in _ZERO:
            self.note(origins, NO_RULE)
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
            if info.surrogate is None:
                raise _NoRule
            return info.surrogate

        return tree_map(swap, tree)

    def _smooth(self, func: Callable[..., Any], name: str, args: tuple, kwargs: dict) -> torch.Tensor | None:
        """What the op's result back-propagates through in bpda mode; None when no rule applies."""
        if name == "one_hot":
            info = self.lookup(args[0]) if args and isinstance(args[0], torch.Tensor) else None
            return info.soft if info is not None else None
        try:
            with torch.enable_grad():
                out = self._counterpart(func, name, *self._stand_ins((args, kwargs)))
        except Exception:  # no rule: a stand-in the op refuses (an index, a dtype), or none at all
            return None
        if isinstance(out, torch.Tensor) and out.is_floating_point() and out.requires_grad:
            return out
        return None

    def _counterpart(self, func: Callable[..., Any], name: str, args: tuple, kwargs: dict) -> Any:
        """The smooth version of one op, on the stand-ins (module docstring)."""
        first = args[0] if args else None
        if name in _ZERO or name in _QUANTISE:
            return first
        if name in _ROUNDING_DIVISION or _rounds(name, kwargs):
            num, den = (args[1], args[0]) if name == "__rfloordiv__" else (args[0], args[1])
            return torch.true_divide(num, den)
        if name in _ABOVE:
            return first - args[1]
        if name in _BELOW:
            return args[1] - first
        if name in _EQUAL:
            return None
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
        return func(*args, **kwargs)

    def _soft(self, name: str, args: tuple, kwargs: dict) -> torch.Tensor | None:
        """For ``argmax``/``argmin`` along a dimension: the softmax ``one_hot`` of it goes straight through."""
        if name not in ("argmax", "argmin") or kwargs.get("keepdim"):
            return None
        dim = args[1] if len(args) > 1 else kwargs.get("dim")
        try:
            z = self._stand_ins(args[0])
        except _NoRule:
            return None
        if not isinstance(dim, int) or not isinstance(z, torch.Tensor) or not z.is_floating_point():
            return None
        with torch.enable_grad():
            return torch.softmax(z if name == "argmax" else -z, dim=dim).movedim(dim, -1)


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
    tracer = Tracer(known=[*model.parameters(), *model.buffers()])
    handles = _approximation_hooks(model, tracer)
    try:
        with tracer:
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
    round_trips: tuple[RoundTrip, ...] = ()

    @property
    def modes(self) -> tuple[GradMode, ...]:
        """``exact``, and ``bpda`` when a rule replaced something and the gradient then reaches the input."""
        ruled = any(f.rule in (STRAIGHT_THROUGH, MODEL_RULE, ROUND_TRIP) for f in self.findings)
        return (GradMode.EXACT, GradMode.BPDA) if ruled and self.bpda_gradient else (GradMode.EXACT,)

    @property
    def reaches_input(self) -> bool:
        """False: no gradient reaches the input in any mode (e.g. a NumPy step that changes the shape)."""
        return self.exact_gradient or GradMode.BPDA in self.modes

    @property
    def summary(self) -> str:
        """One line for the log and the report."""
        shown = [f"{f.op} [{f.kind}]: {f.rule}" for f in self.findings[:6]]
        ops = ", ".join(shown) + (f" and {len(self.findings) - 6} more" if len(self.findings) > 6 else "")
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
            f"{ops}; the gradient passes around them, so exact gradients only" if ops else "exact gradients"
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
            "findings": [{"kind": f.kind, "op": f.op, "rule": f.rule} for f in self.findings],
            "round_trips": [
                {"left": t.left, "back": t.back, "shape": list(t.shape), "scale": t.scale, "count": n}
                for t, n in self.linked().items()
            ],
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
    """Parameters frozen (so only tensors computed from the input require grad), torch's random state left
    as it was (a randomised model draws during the probe), everything restored afterwards."""
    grads = [(p, p.requires_grad) for p in model.parameters()]
    try:
        with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
            for p, _ in grads:
                p.requires_grad_(False)
            yield
    finally:
        for p, req in grads:
            p.requires_grad_(req)


def _gradient_reaches(model: nn.Module, x: torch.Tensor, trace: bool) -> tuple[bool, Tracer | None]:
    """Whether a random projection of the logits has a nonzero gradient w.r.t. ``x`` (in bpda mode when
    ``trace``), and the tracer of that pass."""
    xr = x.detach().clone().requires_grad_(True)
    tracer = None
    with torch.enable_grad():
        if trace:
            with straight_through(model) as tracer:
                out = model(xr)
                tracer.finish(out)
        else:
            out = model(xr)
        if not isinstance(out, torch.Tensor) or not out.requires_grad:
            return False, tracer
        weights = torch.randn(out.shape, generator=torch.Generator().manual_seed(0)).to(out)
        try:
            (grad,) = torch.autograd.grad((out * weights).sum(), xr, allow_unused=True)
        except RuntimeError:  # an op whose derivative torch does not implement
            return False, tracer
    return grad is not None and bool(grad.ne(0).any()), tracer


def scan(model: nn.Module, probe: torch.Tensor) -> GradientPath:
    """The operations on ``model``'s input path that stop its gradient, found on the first rows of
    ``probe`` (images in [0, 1]), and whether a gradient reaches the input exactly and in bpda mode."""
    x = probe[:PROBE_ROWS]
    with _probing(model, x.device):
        exact, _ = _gradient_reaches(model, x, trace=False)
        bpda, tracer = _gradient_reaches(model, x, trace=True)
    trips = tuple(tracer.round_trips.linked)
    return GradientPath(_findings(tracer), exact_gradient=exact, bpda_gradient=bpda, round_trips=trips)


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
    if path.reaches_input:
        log.info("%s: gradient path: %s (grad modes %s)", name, path.summary, [m.value for m in path.modes])
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
