"""``evaluate(model, images, labels, suite, settings)``: one model through the path every door takes.

The attack command, ``benchmark()``, the gallery and a user calling :func:`evaluate` with an ``nn.Module`` of
their own give the same model the same treatment (the records agree: same seed, same images):

1. the model is checked and scanned (:func:`robustbench_wave.models.intake.prepare`): logits of the data set's
   classes, not probabilities; operations that stop the input's gradient get the ``bpda`` mode. A model
   already prepared (the command line's, loaded through the same function) is taken as it is;
2. the suite runs under every gradient mode the model offers (:func:`~.evaluator.evaluate_suite`; EOT and
   K-draw votes for a randomised model);
3. where the scan found the gradient lost or unhandled, the escalation runs (:func:`~.escalation.after_suite`:
   Square at 5,000 queries and transfer from ``surrogate``) unless ``escalation=False``.

The result says what its numbers are (:attr:`EvaluationResult.trust`): a mode whose gradient the scan found
lost is an upper bound, and nothing is verified without the gradient-masking checklist, which needs a run
folder (``benchmark()`` or the attack command).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd
import torch
from torch import nn

from robustbench_wave.attacks import DEFAULT_SUITE, Suite, load_suite
from robustbench_wave.evaluation.escalation import after_suite
from robustbench_wave.evaluation.evaluator import DEFAULT_BATCH_SIZE, evaluate_suite
from robustbench_wave.evaluation.plan import EvalSettings
from robustbench_wave.evaluation.result import EvaluationResult
from robustbench_wave.models.intake import prepare


def evaluate(
    model: nn.Module,
    images: torch.Tensor,
    labels: torch.Tensor,
    suite: str | Path | Suite = DEFAULT_SUITE,
    settings: EvalSettings | None = None,
    *,
    escalation: bool = True,
    surrogate: nn.Module | None = None,
    surrogate_name: str | None = None,
    example_ids: Sequence[int] | torch.Tensor | None = None,
    batch_size: int = DEFAULT_BATCH_SIZE,
    device: str | torch.device | None = None,
    progress: bool = True,
    cache_dir: str | Path | None = None,
    save_adversarial: bool = False,
    specs: dict[str, str] | None = None,
    extra_meta: dict[str, Any] | None = None,
    prior_records: pd.DataFrame | None = None,
) -> EvaluationResult:
    """Attack ``model`` (logits from [0, 1] images) with every entry of ``suite`` and keep per-example records,
    after checking and scanning it as every door does, and escalate where the scan found its gradient lost
    (``escalation=False``: the suite alone; its cells stay upper bounds). The other keywords are
    :func:`~.evaluator.evaluate_suite`'s: they change only speed, place and provenance (``surrogate`` also
    crafts the escalation's transfer attack). ValueError when the model's outputs are not logits of the data
    set's classes, before any attack."""
    settings = settings or EvalSettings()
    model = prepare(model, images, settings.num_classes, settings.model_name)
    kwargs: dict[str, Any] = {
        "example_ids": example_ids,
        "batch_size": batch_size,
        "device": device,
        "progress": progress,
        "cache_dir": cache_dir,
        "save_adversarial": save_adversarial,
        "specs": specs,
    }
    result = evaluate_suite(
        model, images, labels, suite, settings, surrogate=surrogate, surrogate_name=surrogate_name,
        extra_meta=extra_meta, prior_records=prior_records, **kwargs,
    )  # fmt: skip
    if escalation:
        result = after_suite(
            result, model, images, labels, load_suite(suite), settings,
            surrogate=surrogate, surrogate_name=surrogate_name, **kwargs,
        )  # fmt: skip
    result.warn_upper_bounds()
    return result
