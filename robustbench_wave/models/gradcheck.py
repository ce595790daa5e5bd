"""A gradient-reliability probe: does the input gradient that attacks follow belong to the function they score?

The automatic-BPDA scan (:mod:`.autobpda`) finds operations that stop the gradient. Some masking shows in no
operation: a tensor hook that rewrites the gradient, a gradient shattered by a tiny fast oscillation
(``x + 0.05 sin(2000 x)``), a forward that computes something else when gradients are on. :func:`check` runs
two checks on the probe rows, each forward from the same random state (a randomised model draws alike):

* **the forward**: the logits with gradients enabled (the attacks' forward) and under ``torch.no_grad()``
  (the forward that scores) agree;
* **the gradient**: the autograd derivative of a fixed random projection of the logits along a fixed random
  direction agrees with central finite differences at :data:`STEPS`. Float32 and kinks (ReLU, max-pooling)
  move a finite difference too, so autograd disagrees only when, over the probe rows, it lies
  :data:`AGREEMENT` times farther from the nearest difference than the differences lie from each other, and
  farther than :data:`RELATIVE` of their size (:func:`_disagreement`; on small CNNs, trained or not, a
  ResNet, a ViT and the gallery's defences on Fashion-MNIST it stayed within 0.4 of that bound, while a
  hook returning noise and ``x + 0.05 sin(2000 x)`` reached 1.9). The direction moves each pixel at most as
  far as it has room inside the data's range ([0, 1] images: a clamp at the range is no disagreement).

A model whose forward is not reproducible from torch's random state (it draws from NumPy or Python's
``random``) is not checked: its two forwards differ for another reason (the report says so). The checks
cost :data:`FORWARDS` forwards of the probe rows.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

#: What a disagreement is called (``Finding.kind`` in :mod:`.autobpda`).
FORWARD_DIFFERS = "forward differs with gradients enabled"
GRADIENT_DISAGREES = "gradient disagrees with a finite difference"

#: Finite-difference steps, in the input's units ([0, 1] pixels): wide enough to average a float32 rounding
#: and a shattering oscillation, narrow enough for a smooth network's curvature.
STEPS = (0.01, 0.02, 0.04)
#: Autograd must lie this many times farther from the finite difference than the differences lie from each
#: other to disagree (a smooth function: at most about 1/3; a kinked one: about 1).
AGREEMENT = 2.0
#: ... and farther than this fraction of their size (autograd's and the largest difference's).
RELATIVE = 0.5
#: Logits with and without gradients agree to this fraction of the row's largest logit.
FORWARD_RTOL = 1e-4
#: Forwards the checks run (two without gradients, two per finite-difference step).
FORWARDS = 2 + 2 * len(STEPS)
#: How a :attr:`GradientCheck.skipped` reason starts when neither check ran.
NOT_RUN = "not run"


@dataclass(frozen=True)
class GradientCheck:
    """What :func:`check` found on the probe rows: which rows' logits differ with gradients enabled, which
    rows' autograd directional derivative disagrees with finite differences, and why a check did not run."""

    rows: int
    forward_rows: tuple[int, ...] = ()
    gradient_rows: tuple[int, ...] = ()
    skipped: str = ""  # why the checks (or the finite-difference one) did not run
    gradient_ratio: float = 0.0  # how far autograd lies from the finite differences (above 1: disagrees)

    @property
    def gradient_disagrees(self) -> bool:
        return self.gradient_ratio > 1

    def failures(self) -> list[tuple[str, str]]:
        """(kind, op) of each failed check: the op says on how many probe rows."""
        found = []
        if self.forward_rows:
            found.append((FORWARD_DIFFERS, f"logits ({len(self.forward_rows)} of {self.rows} probe rows)"))
        if self.gradient_disagrees:
            rows = (
                f"{len(self.gradient_rows)} of {self.rows} probe rows" if self.gradient_rows else "the probe"
            )
            found.append((GRADIENT_DISAGREES, f"input gradient ({rows})"))
        return found

    def describe(self) -> str:
        """One clause for a summary."""
        failed = self.failures()
        if failed:
            return "gradient probe: " + "; ".join(f"{kind} on {op}" for kind, op in failed)
        if self.skipped:
            return f"gradient probe: {self.skipped}"
        return f"gradient probe: forward and finite differences agree on {self.rows} rows"

    def to_dict(self) -> dict[str, Any]:
        return {
            "rows": self.rows,
            "forward_rows": list(self.forward_rows),
            "gradient_rows": list(self.gradient_rows),
            "gradient_ratio": round(self.gradient_ratio, 4),
            "skipped": self.skipped,
            "summary": self.describe(),
        }


def _differing_rows(a: torch.Tensor, b: torch.Tensor) -> tuple[int, ...]:
    """Rows of two logit batches that differ by more than :data:`FORWARD_RTOL` of the row's size."""
    a, b = a.detach().double().flatten(1), b.detach().double().flatten(1)
    gap = (a - b).abs().amax(1)
    size = torch.maximum(a.abs().amax(1), b.abs().amax(1))
    return tuple(int(i) for i in torch.nonzero(gap > FORWARD_RTOL * size + 1e-7).flatten())


def _direction(x: torch.Tensor) -> torch.Tensor:
    """A fixed random direction per row, each pixel's move at the largest step kept inside the data's range."""
    g = torch.Generator().manual_seed(1)
    v = torch.randn(x.shape, generator=g, dtype=torch.float64).to(x.device)
    lo, hi = min(0.0, float(x.min())), max(1.0, float(x.max()))
    room = torch.minimum(x.double() - lo, hi - x.double()) / STEPS[-1]
    return torch.maximum(torch.minimum(v, room), -room)


def _disagreement(
    autograd: torch.Tensor, finite: list[torch.Tensor], scale: torch.Tensor
) -> tuple[float, tuple[int, ...]]:
    """How far autograd lies from the finite differences over the probe (module docstring): the smaller of its
    distance over :data:`AGREEMENT` times their spread and over :data:`RELATIVE` times their size (above 1:
    it disagrees), and the rows that disagree on their own."""
    stacked = torch.stack(finite)
    spread = stacked.amax(0) - stacked.amin(0)
    moved = (stacked - autograd).abs().amin(0)
    size = autograd.abs() + stacked.abs().amax(0)
    floor = 1e-6 * scale / STEPS[0]  # float32 rounding of the projected logits, over the step
    rows = (moved > AGREEMENT * spread + floor) & (moved > RELATIVE * size + floor)
    far = float(moved.norm())
    against = (AGREEMENT * float(spread.norm()), RELATIVE * float(size.norm()))
    ratio = min(far / (a + float(floor.norm())) for a in against)
    return ratio, tuple(int(i) for i in torch.nonzero(rows).flatten())


def check(
    model: nn.Module,
    x: torch.Tensor,
    logits: torch.Tensor,
    gradient: torch.Tensor | None,
    weights: torch.Tensor,
    reset: Callable[[], None],
    skip_gradient: str = "",
) -> GradientCheck:
    """Check ``model`` on the probe rows ``x``: ``logits`` is its gradient-enabled forward (the input requiring
    grad), ``gradient`` the gradient of ``(logits * weights).sum()`` w.r.t. the input (None: none reached it,
    the finite-difference check does not run), ``reset`` puts back the random state that forward started
    from (called before every forward here); ``skip_gradient``: why the finite differences are not
    compared (they are not run then)."""
    rows = len(x)
    x = x.detach()
    plain = _forward(model, x, reset, grad=False)
    if not torch.equal(plain, _forward(model, x, reset, grad=False)):
        return GradientCheck(rows, skipped=f"{NOT_RUN}: two forwards from one torch random state differ")
    forward_rows = _differing_rows(logits, plain) if plain.shape == logits.shape else tuple(range(rows))
    if gradient is None or skip_gradient:
        why = skip_gradient or "finite differences not compared: no input gradient reaches the input"
        return GradientCheck(rows, forward_rows, skipped=why)
    v = _direction(x)
    keep = torch.nonzero(v.flatten(1).abs().sum(1) > 0).flatten()  # rows with room to move
    if not len(keep):
        why = "finite differences not compared: no pixel has room to move inside the data's range"
        return GradientCheck(rows, forward_rows, skipped=why)
    w = weights.detach().double()
    autograd = (gradient.detach().double() * v).flatten(1).sum(1)
    finite = []
    for h in STEPS:
        ahead = _projected(model, (x.double() + h * v).to(x.dtype), w, reset)
        behind = _projected(model, (x.double() - h * v).to(x.dtype), w, reset)
        finite.append((ahead - behind) / (2 * h))
    scale = (logits.detach().double() * w).flatten(1).abs().sum(1)
    ratio, bad = _disagreement(autograd[keep], [f[keep] for f in finite], scale[keep])
    return GradientCheck(rows, forward_rows, tuple(int(keep[i]) for i in bad), gradient_ratio=ratio)


def _forward(model: nn.Module, x: torch.Tensor, reset: Callable[[], None], grad: bool) -> torch.Tensor:
    reset()
    with torch.set_grad_enabled(grad):
        out = model(x.clone().requires_grad_(True) if grad else x)
    if not isinstance(out, torch.Tensor):
        raise ValueError(
            f"the model returned {type(out).__name__}, not a tensor: return the logits as one float tensor"
        )
    return out.detach()


def _projected(
    model: nn.Module, x: torch.Tensor, weights: torch.Tensor, reset: Callable[[], None]
) -> torch.Tensor:
    """Each row's logits projected on ``weights``, from the gradient-enabled forward (as attacks call it)."""
    out = _forward(model, x, reset, grad=True).double()
    return (out * weights).flatten(1).sum(1)
