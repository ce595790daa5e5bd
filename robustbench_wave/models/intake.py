"""Every door's one loading path: a model is checked on real images and scanned before any attack.

Whatever builds the model -- a zoo name, ``timm:ARCH``, a ``MODULE:FACTORY`` / ``FILE.py:FACTORY``, an
``nn.Module`` handed to ``benchmark()`` or ``evaluate()``, the gallery's ``--defence`` -- it reaches the attacks
through :func:`prepare`, so the same model gets the same treatment at every door:

* its outputs are checked on the data set's first :data:`PROBE_SIZE` images (:func:`check_outputs`): a float
  tensor of shape (N, num_classes), finite, and logits rather than probabilities -- a softmax at the end
  leaves cross-entropy attacks a vanishing gradient (and the cross-check libraries refuse it), so it is
  refused here, before any attack, instead of failing or misleading later;
* its input path is scanned (:func:`robustbench_wave.models.autobpda.auto_bpda`): operations that stop the
  gradient get the ``bpda`` mode, what no rule links triggers the escalation and marks its numbers as upper
  bounds. A model is scanned once (:func:`prepared`), so the shards of one run never decide differently.
"""

from __future__ import annotations

import logging
import weakref

import torch
from torch import nn

from robustbench_wave.models.autobpda import auto_bpda, gradient_path

log = logging.getLogger(__name__)

#: Images of the data set a model's outputs are checked and its input path scanned on.
PROBE_SIZE = 8

#: How close a row's sum must be to 1 (every value in [0, 1]) to read as probabilities.
PROBABILITY_ATOL = 1e-4

_PREPARED: weakref.WeakSet[nn.Module] = weakref.WeakSet()


class _Unfit(ValueError):
    """The model's outputs are not logits of the data set's classes (one line, the caller names the model)."""


def one_line(err: BaseException) -> str:
    """An exception as one line of an error message (user code may raise multi-line text)."""
    text = " ".join(str(err).split())
    return f"{type(err).__name__}: {text}" if text else type(err).__name__


def check_outputs(
    model: nn.Module, images: torch.Tensor, num_classes: int | None, fit_hint: str = ""
) -> None:
    """``model`` takes ``images`` and returns finite logits (N, ``num_classes``): not probabilities. A one-line
    ValueError says what is wrong and what to do (``fit_hint``: how to build it for these images)."""
    x = on_device_of(model, images[:PROBE_SIZE])
    try:
        with torch.no_grad(), torch.random.fork_rng(devices=[x.device] if x.device.type == "cuda" else []):
            out = model(x)
    except Exception as err:  # user code: any failure becomes one line
        raise _Unfit(f"it cannot take the data set's images: {one_line(err)}{fit_hint}") from None
    if not isinstance(out, torch.Tensor) or not out.is_floating_point():
        kind = f"{type(out).__name__} {getattr(out, 'dtype', '')}".strip()
        raise _Unfit(f"it returned {kind}, not a float tensor of logits")
    if out.ndim != 2 or len(out) != len(x) or (num_classes is not None and out.shape[1] != num_classes):
        need = f"({len(x)}, {num_classes})" if num_classes is not None else f"({len(x)}, classes)"
        raise _Unfit(
            f"it returned logits of shape {tuple(out.shape)} for {len(x)} images; the data set needs {need} "
            "(one logit per class)"
        )
    if not torch.isfinite(out).all():
        raise _Unfit("it returned non-finite logits (NaN or inf) on the data set's first images")
    if _probabilities(out):
        raise _Unfit(
            "it returned probabilities (every row in [0, 1], summing to 1), not logits: remove the final "
            "softmax; attacks need the logits (cross-entropy on probabilities hides the gradient)"
        )


def on_device_of(model: nn.Module, images: torch.Tensor) -> torch.Tensor:
    """``images`` on the device of ``model``'s first parameter or buffer (as they are when it has none)."""
    tensor = next(iter([*model.parameters(), *model.buffers()]), None)
    return images if tensor is None else images.to(tensor.device)


def _probabilities(out: torch.Tensor) -> bool:
    """Every value in [0, 1], every row summing to 1, and the rows not all one: a softmax's output (one class,
    or the same row for every image -- a constant model, whose logits may well sum to 1 -- never)."""
    if out.shape[1] < 2 or bool(((out < 0) | (out > 1)).any()) or bool((out == out[:1]).all()):
        return False
    return bool(
        torch.allclose(out.double().sum(1), torch.ones(len(out), dtype=torch.float64), atol=PROBABILITY_ATOL)
    )


def prepare(
    model: nn.Module, images: torch.Tensor, num_classes: int | None, name: str, fit_hint: str = ""
) -> nn.Module:
    """``model`` checked on the first :data:`PROBE_SIZE` of ``images`` (:func:`check_outputs`) and scanned
    (:func:`auto_bpda`: wrapped with the ``bpda`` mode its input path calls for); a model already prepared is
    returned as it is. ValueError (one line) when its outputs do not fit or its bpda mode fails."""
    if prepared(model):
        return model
    check_outputs(model, images, num_classes, fit_hint)
    try:
        scanned = auto_bpda(model, on_device_of(model, images[:PROBE_SIZE]), name)
    except Exception as err:  # user code (a bpda_approximation, a forward under the scan): one line
        raise _Unfit(f"its bpda mode fails on the data set's first images: {one_line(err)}") from None
    _PREPARED.add(scanned)
    return scanned


def prepared(model: nn.Module) -> bool:
    """Whether ``model`` went through :func:`prepare` (or was wrapped by the scan)."""
    return model in _PREPARED or gradient_path(model) is not None


def carry_over(original: nn.Module, derived: nn.Module) -> nn.Module:
    """``derived`` (``original`` compiled, moved or wrapped without changing its function) counts as prepared
    when ``original`` was, so it is not scanned again."""
    if prepared(original):
        _PREPARED.add(derived)
    return derived
