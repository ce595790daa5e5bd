"""An attack run's escalation (:mod:`robustbench_wave.evaluation.escalation`): where a model's gradient is lost,
unhandled or masked, Square at 5,000 queries at every threat and a transfer attack from the run's baseline.

Two moments. :func:`after_suite`: a model whose scan found no gradient path (or an unhandled operation) is
escalated right after its suite, in the same evaluation step (each shard of a sharded run escalates its own
examples, so the merged records are one process's). :func:`after_checklist`: once the run is written and
diagnosed, a model none of whose gradient modes passed the checklist is escalated on the whole run, its rows
appended to ``records.csv.gz`` and ``meta.json`` rewritten; the caller then diagnoses the grown records again.
Both cache their chunks beside the suite's (``chunks/``, attacks ``escalation_*``), so a killed run resumes,
and a model whose records already hold escalation rows is never escalated again.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from robustbench_wave.attackrun.folder import CHUNKS_DIR
from robustbench_wave.attackrun.models import Loaded
from robustbench_wave.attacks import Suite, parse_suite
from robustbench_wave.data import LabelledImages
from robustbench_wave.evaluation import EvalSettings, EvaluationResult
from robustbench_wave.evaluation import escalation as esc
from robustbench_wave.evaluation.eot import EotSettings
from robustbench_wave.evaluation.meta_sections import ModelsMeta, SettingsMeta

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Surrogate:
    """The run's transfer surrogate (its undefended baseline) under its record name; none: no transfer."""

    model: nn.Module | None = None
    name: str | None = None

    @classmethod
    def of(cls, loaded: Loaded | None, name: str | None) -> Surrogate:
        return cls(loaded[0], name) if loaded is not None else cls()


def after_suite(
    result: EvaluationResult,
    name: str,
    model: nn.Module,
    data: LabelledImages,
    suite: Suite,
    settings: EvalSettings,
    surrogate: Surrogate,
    **evaluate_kwargs: Any,
) -> EvaluationResult:
    """``result`` (one model's suite) with its escalation joined when the scan calls for one (else as is)."""
    reason = esc.scan_reason(model)
    if reason is None or not esc.norm_grid(suite, settings.dataset) or esc.escalated(result.records, name):
        return result
    extra = esc.escalate(
        model, data.images, data.labels, suite, settings, result.records, reason=reason, stage=esc.SCAN,
        surrogate=surrogate.model, surrogate_name=surrogate.name, **evaluate_kwargs,
    )  # fmt: skip
    return esc.join(result, name, extra)


def settings_from_meta(meta: dict[str, Any], name: str, info: Any) -> EvalSettings:
    """The :class:`EvalSettings` a saved run evaluated ``name`` with (its meta.json)."""
    run = SettingsMeta.from_meta(meta)
    return EvalSettings(
        model_name=name,
        dataset=info,
        grad_modes=tuple(ModelsMeta.from_meta(meta).entries[name].grad_modes or ()),
        backend=run.backend or "auto",
        seed=run.attack_seed or 0,
        skip_broken=True if run.skip_broken is None else run.skip_broken,
        cross_check=run.cross_check or "off",
        eot=EotSettings(run.eot or "auto", run.eot_draws or EotSettings().draws),
    )


def after_checklist(
    run_dir: Path,
    models: dict[str, nn.Module],
    data: LabelledImages,
    reports: list[dict[str, Any]],
    surrogate: Surrogate,
    *,
    batch_size: int,
    device: torch.device | str | None = None,
) -> list[str]:
    """Escalate every model of the saved run in ``run_dir`` whose checklist (``reports``: diagnostics.json's
    entries) failed in every gradient mode and that has no escalation rows yet; rewrite records and meta.
    Returns the models escalated (none: nothing was written)."""
    result = EvaluationResult.load(run_dir)
    due = {
        d["model"]: reason
        for d in reports
        if (reason := esc.checklist_reason(d)) is not None
        and d["model"] in models
        and not esc.escalated(result.records, d["model"])
    }
    suite = parse_suite(result.meta["suite"])
    if not due or not esc.norm_grid(suite, data.info):
        return []
    save = bool(result.adversarial)
    for name, reason in due.items():
        rows = result.records[result.records["model"] == name]
        ids = rows.drop_duplicates("example_id")["example_id"].tolist()
        pos = {int(i): k for k, i in enumerate(_run_ids(data))}
        take = torch.as_tensor([pos[int(i)] for i in ids], dtype=torch.long)
        extra = esc.escalate(
            models[name], data.images[take], data.labels[take], suite,
            settings_from_meta(result.meta, name, data.info), rows, reason=reason, stage=esc.CHECKLIST,
            surrogate=surrogate.model, surrogate_name=surrogate.name, example_ids=ids, batch_size=batch_size,
            device=device, progress=False, cache_dir=run_dir / CHUNKS_DIR, save_adversarial=save,
        )  # fmt: skip
        result = esc.join(result, name, extra)
    result.save(run_dir)
    return list(due)


def _run_ids(data: LabelledImages) -> list[int]:
    """The run-wide ids of ``data``'s images: ``0..N-1`` (an attack run attacks the first N test images)."""
    return list(range(len(data)))
