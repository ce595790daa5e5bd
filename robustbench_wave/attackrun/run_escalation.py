"""An attack run's escalation (:mod:`robustbench_wave.evaluation.escalation`): where a model's gradient is lost,
unhandled or masked, Square at 5,000 queries at every threat and a transfer attack from the run's baseline.

Two moments. After the suite: a model whose scan found no gradient path (or an unhandled operation) is
escalated right after its suite, in the same evaluation step, by :func:`robustbench_wave.evaluation.evaluate`
itself (:func:`robustbench_wave.evaluation.escalation.after_suite`; each shard of a sharded run escalates its
own examples, so the merged records are one process's). :func:`after_checklist`: once the run is written and
diagnosed, a model none of whose gradient modes passed the checklist is escalated on the whole run, its rows
appended to ``records.csv.gz`` and ``meta.json`` rewritten; the caller then diagnoses the grown records again.
Both cache their chunks beside the suite's (``chunks/``, attacks ``escalation_*``), so a killed run resumes,
and a model whose records already hold escalation rows is never escalated again.
"""

from __future__ import annotations

import copy
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import torch
from torch import nn

from robustbench_wave.attackrun.folder import CHUNKS_DIR
from robustbench_wave.attackrun.models import Loaded
from robustbench_wave.attacks import Suite, parse_suite
from robustbench_wave.core.distributed import DistContext, all_gather_object, broadcast_object
from robustbench_wave.data import LabelledImages
from robustbench_wave.evaluation import EvalSettings, EvaluationResult
from robustbench_wave.evaluation import escalation as esc
from robustbench_wave.evaluation.adversarial import merge_sets
from robustbench_wave.evaluation.eot import EotSettings
from robustbench_wave.evaluation.meta_sections import ModelsMeta, SettingsMeta
from robustbench_wave.evaluation.sharding import Shard, merge_records, rank_count, shard_dir

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Surrogate:
    """The run's transfer surrogate (its undefended baseline) under its record name; none: no transfer."""

    model: nn.Module | None = None
    name: str | None = None

    @classmethod
    def of(cls, loaded: Loaded | None, name: str | None) -> Surrogate:
        return cls(loaded[0], name) if loaded is not None else cls()


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


@dataclass(frozen=True)
class _Due:
    """One model the checklist escalates: why, the settings its run evaluated it with, and its records."""

    reason: str
    settings: EvalSettings
    rows: pd.DataFrame

    @property
    def example_ids(self) -> list[int]:
        """The run-wide ids of the examples its records hold, in record order."""
        return self.rows.drop_duplicates("example_id")["example_id"].tolist()


def after_checklist(
    run_dir: Path,
    models: dict[str, nn.Module],
    data: LabelledImages,
    reports: list[dict[str, Any]] | None,
    surrogate: Surrogate,
    *,
    batch_size: int,
    device: torch.device | str | None = None,
    ctx: DistContext | None = None,
) -> list[str]:
    """Escalate every model of the saved run in ``run_dir`` whose checklist (``reports``: diagnostics.json's
    entries) failed in every gradient mode and that has no escalation rows yet; rewrite records and meta.
    Returns the models escalated (none: nothing was written).

    Under torchrun (``ctx``) every rank calls it: rank 0's reports and records decide (the other ranks' are
    not read), each rank escalates whole seeding blocks of the examples, chunks cached in its shard's folder
    as the suite's, and rank 0 joins the parts in one process's order and writes, so the records are the
    one-process escalation's, in about 1/ranks of its time."""
    ctx = ctx or DistContext()
    result = EvaluationResult.load(run_dir) if ctx.is_main else None
    plan = _due(result, models, data, reports or []) if result is not None else None
    suite_dict, save, due = broadcast_object(ctx, plan) or (None, False, {})
    if not due:
        return []
    suite = parse_suite(suite_dict)
    for name, item in due.items():
        extra = _escalate_part(run_dir, models[name], data, suite, name, item, surrogate, ctx, save=save,
                               batch_size=batch_size, device=device)  # fmt: skip
        parts = all_gather_object(ctx, extra)
        if result is not None:
            part = _joined(name, [p for p in parts if p is not None], item.example_ids)
            result = esc.join(result, name, part)
    if result is not None:
        result.save(run_dir)
    return list(due)


def _due(
    result: EvaluationResult,
    models: dict[str, nn.Module],
    data: LabelledImages,
    reports: list[dict[str, Any]],
) -> tuple[dict[str, Any], bool, dict[str, _Due]] | None:
    """What rank 0 sends every rank: the run's suite, whether it keeps adversarial points, and each model
    to escalate (none: None)."""
    due = {
        d["model"]: reason
        for d in reports
        if (reason := esc.checklist_reason(d, result.meta)) is not None
        and d["model"] in models
        and not esc.escalated(result.records, d["model"])
    }
    if not due or not esc.norm_grid(parse_suite(result.meta["suite"]), data.info):
        return None
    items = {
        name: _Due(
            reason,
            settings_from_meta(result.meta, name, data.info),
            result.records[result.records["model"] == name],
        )
        for name, reason in due.items()
    }
    return result.meta["suite"], bool(result.adversarial), items


def _escalate_part(
    run_dir: Path,
    model: nn.Module,
    data: LabelledImages,
    suite: Suite,
    name: str,
    item: _Due,
    surrogate: Surrogate,
    ctx: DistContext,
    *,
    save: bool,
    batch_size: int,
    device: torch.device | str | None,
) -> tuple[int, EvaluationResult] | None:
    """This rank's share of one model's escalation: every example in one process, else the rank's whole
    seeding blocks (None on a rank beyond the blocks)."""
    ids = torch.as_tensor(item.example_ids, dtype=torch.long)
    count = rank_count(len(ids), suite.rng_block, ctx.world_size)
    if ctx.rank >= count:
        return None
    shard = Shard(ctx.rank, count)
    cache = run_dir / CHUNKS_DIR if shard.is_whole else shard_dir(run_dir, shard) / CHUNKS_DIR
    mine = ids if shard.is_whole else ids[shard.positions(ids, suite.rng_block)]
    rows = item.rows if shard.is_whole else item.rows[item.rows["example_id"].isin(mine.tolist())]
    pos = {int(i): k for k, i in enumerate(_run_ids(data))}
    take = torch.as_tensor([pos[int(i)] for i in mine], dtype=torch.long)
    extra = esc.escalate(
        model, data.images[take], data.labels[take], suite, item.settings, rows, reason=item.reason,
        stage=esc.CHECKLIST, surrogate=surrogate.model, surrogate_name=surrogate.name,
        example_ids=mine.tolist(), batch_size=batch_size, device=device, progress=False, cache_dir=cache,
        save_adversarial=save,
    )  # fmt: skip
    return shard.index, extra


def _joined(name: str, parts: list[tuple[int, EvaluationResult]], ids: list[int]) -> EvaluationResult:
    """One model's escalation from its ranks' parts: records in one process's order, the note with each
    part's timing (tagged by shard, as a sharded run's) and resumed chunks summed."""
    if len(parts) == 1:
        return parts[0][1]
    parts = sorted(parts, key=lambda p: p[0])
    records = merge_records([r.records for _, r in parts], ids)
    note = copy.deepcopy(parts[0][1].meta[esc.META_KEY])
    note["timing"] = [{**t, "shard": i} for i, r in parts for t in r.meta[esc.META_KEY].get("timing", [])]
    note["resumed_chunks"] = sum(r.meta[esc.META_KEY].get("resumed_chunks", 0) for _, r in parts)
    kept = [r.adversarial[name] for _, r in parts if name in r.adversarial]
    adversarial = {name: merge_sets(name, kept)} if kept else {}
    return EvaluationResult(records, {esc.META_KEY: note}, adversarial=adversarial)


def _run_ids(data: LabelledImages) -> list[int]:
    """The run-wide ids of ``data``'s images: ``0..N-1`` (an attack run attacks the first N test images)."""
    return list(range(len(data)))
