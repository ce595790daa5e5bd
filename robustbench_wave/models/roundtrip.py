"""Linking values that leave torch and come back: the identity across a NumPy / PIL / OpenCV round trip.

A defence written the common way sends the image out of torch (``x.detach().cpu().numpy()``,
``to_pil_image``, ``.tolist()``), transforms it there (a JPEG save and load, ``np.round``) and brings it back
(``torch.from_numpy``, ``to_tensor``, ``torch.tensor``). Autograd sees two unrelated tensors, so no gradient
reaches the input. Athalye, Carlini & Wagner (2018) attack such a defence with BPDA through the identity:
the returned values are kept, and the gradient goes into the departed tensor as if the round trip were
``g(x) = x``. :class:`RoundTrips` does the bookkeeping for :class:`~robustbench_wave.models.autobpda.Tracer`
in ``bpda`` mode:

* a departure (``numpy``, ``tolist``, ``__array__`` of a tensor on the input's path) records the tensor's
  straight-through stand-in and its values, in order;
* a return is a tensor that enters torch carrying no gradient: the result of ``torch.tensor`` /
  ``as_tensor`` / ``asarray`` / ``Tensor.new_tensor`` on data that is no tensor (a torch function mode sees
  those calls), or -- ``torch.from_numpy`` and ``torch.Tensor(array)`` never reach a torch function mode --
  a tensor that an op consumes which no op of this forward produced, which is no parameter or buffer of
  the model and does not carry a gradient;
* a return is linked to the oldest pending departure of the same shape, up to dimensions of size one (a
  grey image leaves as (H, W, 1) through ``to_pil_image`` and comes back as (H, W) through ``to_tensor``),
  whose values it follows: the returned values ``r`` fit ``s d`` of the departed ones ``d`` to a relative
  residual ``|r - s d| / |r|`` of at most :data:`FIT_TOLERANCE`, their deviations from the mean correlated
  by at least :data:`MIN_CORRELATION` (``1 - x`` of mid-grey images is close through the origin, not so). A per-image loop pairs each image with its
  own return, in whatever order they come back. The return's values stay what the round trip gave; its
  backward is the departed stand-in's times ``s``, the change of units: the least-squares slope of ``r`` on
  ``d``, snapped to 1, 255 or 1/255 when within 20 % of one (``to_pil_image`` turns [0, 1] floats into
  8-bit levels that ``to_tensor`` divides by 255 in torch again), else as measured.

A return that matches no pending departure (the round trip changed the shape -- a resize, a crop -- or the
values, so that the identity would be no approximation of it: ``1 - x``) is kept as a stray; when a
departure never comes back, the scan reports the strays as unhandled and the departure as lost.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import torch

#: Units a round trip may change values by: 8-bit levels for [0, 1] floats and back.
UNITS = (1.0, 255.0, 1 / 255)
UNIT_TOLERANCE = 0.2
#: The largest relative residual of a return against the departed values for the identity to stand for the
#: round trip. JPEG through PIL on 200 Fashion-MNIST test images: median 0.10, max 0.36 at quality 40, max 0.60
#: at quality 10; a 1-bit ``round(x)`` of uniform pixels: 0.41; ``1 - x`` of uniform pixels: 0.87.
FIT_TOLERANCE = 0.8
#: The least correlation of the returned values' deviations from their mean with the departed ones': the
#: residual alone is measured through the origin, so on mid-grey images ``1 - x`` (whose deviations are the
#: departed ones' negated) would pass it, and the identity would flip the gradient's sign. PIL JPEG at
#: quality 40 of uniform noise: 0.95 gray, 0.46 RGB (4:2:0 chroma subsampling); ``1 - x``: -1.
MIN_CORRELATION = 0.25


@dataclass(frozen=True)
class RoundTrip:
    """One linked round trip: the op its values left torch by, how they came back, the shape they came back
    in, and the change of units the backward applies (returned = scale x departed)."""

    left: str
    back: str
    shape: tuple[int, ...]
    scale: float

    def describe(self) -> str:
        units = "" if self.scale == 1 else f", units x{self.scale:.6g}"
        return f"{self.left} -> {self.back} {tuple(self.shape)}{units}"


@dataclass(eq=False)  # compared by identity: it holds tensors
class Departure:
    """A tensor on the input's path that left torch: its straight-through stand-in (a float tensor with its
    values whose backward reaches the input), where it left, and the origins of its gradient cut."""

    op: str
    stand_in: torch.Tensor
    origins: frozenset[int]
    origin: int  # the departure's own origin (Tracer.origins)


def _core(shape: Iterable[int]) -> tuple[int, ...]:
    """The shape without its dimensions of size one."""
    return tuple(s for s in shape if s != 1)


def change_of_units(departed: torch.Tensor, returned: torch.Tensor) -> float:
    """Least-squares slope (through the origin) of ``returned`` on ``departed``, snapped to a unit of
    :data:`UNITS` within :data:`UNIT_TOLERANCE`; 1 when it is undefined (all zeros) or not positive."""
    d, r = _flat(departed), _flat(returned)
    dd = float(d @ d)
    slope = float(d @ r) / dd if dd > 0 else 1.0
    if not 0 < slope < float("inf"):
        return 1.0
    return next((u for u in UNITS if abs(slope / u - 1) <= UNIT_TOLERANCE), slope)


def misfit(departed: torch.Tensor, returned: torch.Tensor, scale: float) -> float:
    """Relative residual ``|r - scale d| / |r|`` of the returned values against the departed ones (0 when
    both are zero)."""
    d, r = _flat(departed), _flat(returned)
    residual, norm = float((r - scale * d).norm()), float(r.norm())
    return residual / norm if norm > 0 else (0.0 if residual == 0 else float("inf"))


def correlation(departed: torch.Tensor, returned: torch.Tensor) -> float:
    """Pearson correlation of the returned values with the departed ones (1 when either is constant: then
    only the residual can tell)."""
    d, r = _flat(departed), _flat(returned)
    d, r = d - d.mean(), r - r.mean()
    norms = float(d.norm() * r.norm())
    return float(d @ r) / norms if norms > 0 else 1.0


def _flat(t: torch.Tensor) -> torch.Tensor:
    return t.detach().double().flatten().cpu()


class RoundTrips:
    """One forward pass's departures and returns (module docstring). ``known``: tensors that exist before
    the forward and are never a return (the model's parameters and buffers)."""

    def __init__(self, known: Iterable[torch.Tensor] = ()) -> None:
        self.pending: list[Departure] = []
        self.linked: list[RoundTrip] = []
        self.strays: list[str] = []
        self._seen: dict[int, weakref.ref] = {}
        self.seen(list(known))

    @staticmethod
    def _fits(t: torch.Tensor, candidates: list[Departure]) -> Iterator[tuple[Departure, float]]:
        """The candidates ``t``'s values follow, in order, each with its change of units."""
        for departure in candidates:
            scale = change_of_units(departure.stand_in, t)
            close = misfit(departure.stand_in, t, scale) <= FIT_TOLERANCE
            if close and correlation(departure.stand_in, t) >= MIN_CORRELATION:
                yield departure, scale

    def seen(self, tensors: Iterable[torch.Tensor]) -> None:
        """Tensors produced in torch (or known beforehand): never a return."""
        for t in tensors:
            self._seen[id(t)] = weakref.ref(t)

    def is_seen(self, t: torch.Tensor) -> bool:
        entry = self._seen.get(id(t))
        return entry is not None and entry() is t

    def leave(self, op: str, stand_in: torch.Tensor, origins: frozenset[int], origin: int) -> None:
        self.pending.append(Departure(op, stand_in, origins, origin))

    def arrive(self, t: torch.Tensor, back: str) -> tuple[Departure, torch.Tensor] | None:
        """Link ``t`` (values that came back into torch by ``back``) to the oldest pending departure of its
        shape whose values it follows: that departure and the smooth tensor ``t`` back-propagates through
        (the departed stand-in, reshaped and in ``t``'s units); None, noted as a stray, when none matches."""
        self.seen([t])
        core = _core(t.shape)
        match, scale = next(
            self._fits(t, [d for d in self.pending if _core(d.stand_in.shape) == core]), (None, 1)
        )
        if match is None:
            self.strays.append(back)
            return None
        self.pending.remove(match)
        self.linked.append(RoundTrip(match.op, back, tuple(t.shape), scale))
        with torch.enable_grad():
            smooth = match.stand_in.reshape(t.shape).to(t.device)
            return match, smooth * scale if scale != 1 else smooth
