"""Fixed (non-learned) front-ends and the switch that decides how gradients cross them.

A wavelet tokenizer's colour transform, DWT and sparsification, or Token Pooling's cluster assignment, have
no trainable parameters.  The claim under test ("no gradient with respect to the fixed kernels") confuses
the gradient w.r.t. the *kernels* with the gradient w.r.t. the *input*.  To test it honestly every attack
runs under three backward rules (Athalye, Carlini & Wagner 2018):

* ``exact``   -- true autograd through everything (the forward is never routed through NumPy);
* ``blocked`` -- the front-end output is detached: attacks see a zero input gradient (the paper's premise);
* ``bpda``    -- forward exact, backward through a smooth approximation (for the wavelet front-end: the same
  linear transform without the sparsification mask, i.e. straight-through the mask).

Modules that own such a step subclass :class:`FixedFrontEnd`; a model without one whose input path holds
operations of zero or missing gradient (rounding, thresholds, integer casts) gets the ``exact`` and ``bpda``
modes from :class:`robustbench_wave.models.autobpda.AutoBPDA` instead. Both are :class:`GradModeSwitch`es:
:func:`grad_mode` switches all of them in a model at once and restores the previous modes even when an attack
raises, and :func:`supported_grad_modes` says which modes a model offers.

A model with two kinds of fixed front-end (``wavelet-tokenpool``: the wavelet mask and Token Pooling's cluster
assignment) needs one switched while the other stays exact, or exact − BPDA mixes both gaps. Each switch
names its ``kind``; ``grad_mode(model, mode, only=KIND)`` switches the switches of that kind and leaves every
other one exact, and the *scoped* mode names of :data:`SCOPED_MODES` (``bpda-assignment``) say the same in
records and on the command line. They are never evaluated unless asked for (the default modes stay the three
above), so no existing record changes.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from enum import Enum

import torch
from torch import nn

from robustbench_wave.core.naming import parse_enum


class GradMode(str, Enum):
    """How the backward pass crosses a fixed front-end."""

    EXACT = "exact"
    BLOCKED = "blocked"
    BPDA = "bpda"

    @classmethod
    def parse(cls, value: str | GradMode) -> GradMode:
        return parse_enum(cls, value, "gradient mode")


class _ZeroGradient(torch.autograd.Function):
    """Pass ``value`` forward, send an all-zero gradient back to ``x``.

    Detaching alone would disconnect ``x`` from the graph, and attack libraries then fail with "tensor
    does not require grad" instead of seeing what the claim predicts: a zero input gradient.
    """

    @staticmethod
    def forward(ctx, x: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
        ctx.input_shape = x.shape
        return value

    @staticmethod
    def backward(ctx, grad_output: torch.Tensor) -> tuple[torch.Tensor, None]:
        return grad_output.new_zeros(ctx.input_shape), None


def is_zero_gradient_node(node: object) -> bool:
    """True for the autograd node a blocked front-end puts in the graph (its backward is all zeros).

    Lets a graph walk (``attacks.input_gradient_blocked``) recognise the node by the Function that made it
    instead of by the name torch happens to give the node class.
    """
    return getattr(node, "_forward_cls", None) is _ZeroGradient


#: The kind of Token Pooling's cluster assignment (:attr:`GradModeSwitch.kind`).
ASSIGNMENT = "assignment"

#: Gradient modes scoped to one kind of switch, by the name records and ``--grad-modes`` use: the mode on
#: the switches of that kind, exact on every other one. ``bpda-assignment``: BPDA through Token Pooling's
#: cluster assignment alone, the one comparison with ``exact`` that isolates the assignment's gradient.
SCOPED_MODES: dict[str, tuple[GradMode, str]] = {
    f"{GradMode.BPDA.value}-{ASSIGNMENT}": (GradMode.BPDA, ASSIGNMENT)
}

#: Every gradient mode name: the three modes of every switch, then the scoped ones.
MODE_NAMES: tuple[str, ...] = (*(m.value for m in GradMode), *SCOPED_MODES)


@dataclass(frozen=True)
class ModeScope:
    """A backward rule and the kind of switch it applies to (None: every switch)."""

    mode: GradMode
    only: str | None = None

    @property
    def name(self) -> str:
        """The name records use: the mode's value, or its :data:`SCOPED_MODES` name."""
        if self.only is None:
            return self.mode.value
        for name, scoped in SCOPED_MODES.items():
            if scoped == (self.mode, self.only):
                return name
        return f"{self.mode.value}-{self.only}"


def parse_mode(name: str | GradMode, only: str | None = None) -> ModeScope:
    """``name`` (a :class:`GradMode` or a :data:`SCOPED_MODES` name) and ``only`` as one :class:`ModeScope`;
    ValueError for an unknown name or a scoped name whose kind contradicts ``only``."""
    if isinstance(name, str) and name in SCOPED_MODES:
        mode, kind = SCOPED_MODES[name]
        if only is not None and only != kind:
            raise ValueError(f"gradient mode {name!r} is scoped to {kind!r}; drop only={only!r}")
        return ModeScope(mode, kind)
    try:
        return ModeScope(GradMode(name), only)
    except ValueError:
        raise ValueError(f"unknown gradient mode {name!r}; choose one of: {', '.join(MODE_NAMES)}") from None


class GradModeSwitch(nn.Module):
    """A module whose backward rule :func:`grad_mode` switches; ``modes`` are the rules it offers, ``kind``
    the name a scoped mode (``grad_mode(..., only=kind)``, :data:`SCOPED_MODES`) selects it by ("": none)."""

    modes: tuple[GradMode, ...] = tuple(GradMode)
    kind: str = ""

    def __init__(self) -> None:
        super().__init__()
        self.grad_mode: GradMode = GradMode.EXACT


class FixedFrontEnd(GradModeSwitch):
    """Base class of parameter-free pre-processing whose backward rule can be switched (every mode).

    Subclasses implement :meth:`transform` (the exact forward) and may override :meth:`smooth_transform`
    (the differentiable approximation used by BPDA; the default is the exact transform, i.e. BPDA == exact)
    and :meth:`exact_and_smooth` (both at once, when they share work).
    """

    def transform(self, x: torch.Tensor) -> torch.Tensor:  # pragma: no cover - abstract
        raise NotImplementedError

    def smooth_transform(self, x: torch.Tensor) -> torch.Tensor:
        return self.transform(x)

    def exact_and_smooth(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Both transforms for BPDA; override when they share work (the wavelet front-end's embedding)."""
        return self.transform(x), self.smooth_transform(x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.grad_mode is GradMode.EXACT or not torch.is_grad_enabled():
            return self.transform(x)
        if self.grad_mode is GradMode.BLOCKED:
            with torch.no_grad():
                value = self.transform(x)
            return _ZeroGradient.apply(x, value)
        # BPDA: value of the exact transform, gradient of the smooth one.
        exact, smooth = self.exact_and_smooth(x)
        return smooth + (exact - smooth).detach()


def fixed_front_ends(model: nn.Module) -> list[FixedFrontEnd]:
    return [m for m in model.modules() if isinstance(m, FixedFrontEnd)]


def has_fixed_front_end(model: nn.Module) -> bool:
    return bool(fixed_front_ends(model))


def grad_switches(model: nn.Module) -> list[GradModeSwitch]:
    return [m for m in model.modules() if isinstance(m, GradModeSwitch)]


def supported_grad_modes(model: nn.Module) -> list[str]:
    """The gradient modes ``model`` offers, in :class:`GradMode` order: every one with a fixed front-end,
    ``exact`` and ``bpda`` with automatic BPDA (:mod:`.autobpda`), else ``exact`` only. Scoped modes are not
    listed (they run only when asked for): :func:`offered_modes`."""
    offered = {m for s in grad_switches(model) for m in s.modes} | {GradMode.EXACT}
    return [m.value for m in GradMode if m in offered]


def offered_modes(model: nn.Module) -> list[str]:
    """:func:`supported_grad_modes` and the :data:`SCOPED_MODES` the model has a switch of that kind for."""
    switches = grad_switches(model)
    scoped = [n for n, (m, kind) in SCOPED_MODES.items() if any(_selects(s, m, kind) for s in switches)]
    return [*supported_grad_modes(model), *scoped]


def _selects(switch: GradModeSwitch, mode: GradMode, only: str | None) -> bool:
    return mode in switch.modes and (only is None or switch.kind == only)


@contextlib.contextmanager
def grad_mode(model: nn.Module, mode: str | GradMode, *, only: str | None = None) -> Iterator[nn.Module]:
    """Set the backward rule of every switch in ``model`` for the duration of the block (a switch that does
    not offer ``mode`` stays exact); a mode no switch of the model offers is refused (ValueError), and a model
    without switches always runs exact.

    ``only`` (or a scoped name of :data:`SCOPED_MODES`, e.g. ``"bpda-assignment"``) limits the mode to the
    switches of that ``kind``: every other switch runs exact. A model without a switch of that kind offering
    the mode is refused, since the "scoped" run would silently be the exact one."""
    scope = parse_mode(mode, only)
    modules = grad_switches(model)
    if scope.only is not None and not any(_selects(m, scope.mode, scope.only) for m in modules):
        raise ValueError(
            f"gradient mode {scope.name!r} needs a fixed front-end of kind {scope.only!r} offering "
            f"{scope.mode.value!r}; this model's switches: {sorted({m.kind or type(m).__name__ for m in modules})}"
        )
    if modules and scope.mode.value not in supported_grad_modes(model):
        raise ValueError(
            f"the model offers grad modes {supported_grad_modes(model)}, not {scope.mode.value!r} "
            "(blocked needs a FixedFrontEnd sub-module, models/external.py's docstring)"
        )
    previous = [m.grad_mode for m in modules]
    try:
        for m in modules:
            m.grad_mode = scope.mode if _selects(m, scope.mode, scope.only) else GradMode.EXACT
        yield model
    finally:
        for m, old in zip(modules, previous):
            m.grad_mode = old
