"""The attacks an attack run's last step runs beyond its suite, then the report.

:func:`measure_run` takes a saved run folder and the models and images it evaluated, measures the energy
sparsification removes from a perturbation (:mod:`robustbench_wave.analysis.energy`: its own PGD), runs the
gradient-masking checklist per model (:mod:`robustbench_wave.analysis.diagnostics`: its subset attacks;
Carlini et al. 2019, Athalye et al. 2018, Croce & Hein 2020), writes ``energy.csv`` and
``diagnostics.csv/json``, and hands the folder to :func:`robustbench_wave.reporting.markdown.write_report`,
which renders from those files alone. Every attack of the run, the low-frequency attack included, is a suite
entry whose records are already in ``records.csv.gz``; nothing here adds records.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch
from torch import nn

from robustbench_wave.analysis.diagnostics import (
    DIAGNOSTICS_SAMPLE,
    DIAGNOSTICS_STEPS,
    DiagnosticsReport,
    run_diagnostics,
)
from robustbench_wave.analysis.energy import energy_removed
from robustbench_wave.attacks import (
    Threat,
    Trait,
    as_float_images,
    families_with,
    find_wavelet_front_end,
)
from robustbench_wave.core.io import atomic_write_json, atomic_write_text
from robustbench_wave.evaluation.meta_sections import AttacksMeta
from robustbench_wave.evaluation.metrics import declared_reference, reference_eps
from robustbench_wave.evaluation.plan import DEFAULT_BATCH_SIZE
from robustbench_wave.evaluation.records import read_run
from robustbench_wave.models.frontend import offered_modes
from robustbench_wave.reporting.markdown import write_report
from robustbench_wave.reporting.runs import DIAGNOSTICS_CSV, DIAGNOSTICS_JSON, ENERGY_FILE

log = logging.getLogger(__name__)

LINF = Threat.LINF.value
#: Linf budget of the energy measurement and the diagnostics when the run attacked no Linf point.
FALLBACK_EPS = 0.1


def measure_run(
    run_dir: str | Path,
    models: Mapping[str, nn.Module],
    images: torch.Tensor,
    labels: torch.Tensor,
    info: Any,
    *,
    example_ids: Sequence[int] | None = None,
    n_diagnostics: int = DIAGNOSTICS_SAMPLE,
    diagnostics_eps: float | None = None,
    diagnostics_steps: int = DIAGNOSTICS_STEPS,
    square_queries: int = 300,
    energy: bool = True,
    energy_n: int = 64,
    energy_steps: int | None = None,
    seed: int = 0,
    baseline: str | None = None,
    batch_size: int = DEFAULT_BATCH_SIZE,
    checked: dict[str, DiagnosticsReport] | None = None,
) -> Path:
    """Energy, diagnostics, figures, verdict and ``report.md`` for a saved run; returns the report's path.

    ``run_dir`` holds ``records.csv.gz`` and ``meta.json`` (``EvaluationResult.save``); ``models`` maps the
    records' model names to the evaluated modules; ``images``/``labels`` are the evaluated tensors
    (``example_ids`` index them, default ``0..N-1`` as in ``evaluate``); ``info`` is the DatasetInfo.
    ``diagnostics_eps`` defaults to the run's reference Linf budget (:func:`metrics.reference_eps`: the suite's
    declared one in meta.json, else the middle of the grid), used by
    the checklist and the energy measurement alike. The energy measurement runs on the first ``energy_n``
    examples of every model with a wavelet front-end, in batches of ``batch_size``, with PGD of
    ``energy_steps`` steps (default: those of the run's Linf low-frequency entry, else ``diagnostics_steps``).
    Writes ``energy.csv``, ``diagnostics.csv/json``, ``figures/*.png``, ``verdict.json`` and ``report.md``.
    ``checked``: the checklist's reports by model name, of an earlier pass over the same run; the models it
    holds are not checked again (their records did not change), and those checked now are added to it.
    """
    run_dir = Path(run_dir)
    records, meta = read_run(run_dir)
    _check_models(models, records, run_dir)
    x, y, ids = align_images(records, images, labels, example_ids)
    reference = reference_eps(records, LINF, FALLBACK_EPS, declared_reference(meta))
    eps = diagnostics_eps if diagnostics_eps is not None else reference
    if energy:
        steps = (
            energy_steps or _suite_steps(meta, families_with(Trait.LOW_FREQUENCY), LINF) or diagnostics_steps
        )
        k = min(energy_n, len(x))
        write_energy(
            run_dir, models, x[:k], y[:k], ids[:k], eps=eps, steps=steps, seed=seed, batch_size=batch_size
        )
    checklist = {"n": n_diagnostics, "eps": eps, "steps": diagnostics_steps, "square_queries": square_queries}
    checked = {} if checked is None else checked
    due = {name: model for name, model in models.items() if name not in checked}
    checked.update(_diagnose(due, x, y, records, info, meta, seed=seed, **checklist))
    write_diagnostics(run_dir, [checked[name] for name in models])
    return write_report(run_dir, num_classes=int(info.num_classes), baseline=baseline)


def _diagnose(
    models: Mapping[str, nn.Module],
    x: torch.Tensor,
    y: torch.Tensor,
    records: pd.DataFrame,
    info: Any,
    meta: dict[str, Any],
    **checklist: Any,
) -> dict[str, DiagnosticsReport]:
    """The gradient-masking checklist of every model on its own records (``checklist``: run_diagnostics'
    n, eps, steps, square_queries and seed), by model name."""
    out = {}
    for name, model in models.items():
        rows = records[records["model"] == name]
        modes = recorded_modes(model, rows)
        out[name] = run_diagnostics(
            model, x, y, rows, info=info, model_name=name, meta=meta, grad_modes=modes, **checklist
        )
    return out


def recorded_modes(model: nn.Module, rows: pd.DataFrame) -> list[str]:
    """The gradient modes the checklist judges: every mode the model offers (:func:`offered_modes`, a scoped
    one such as ``bpda-assignment`` too) that its records hold, so no page (``trusted_modes``, report.md)
    speaks of a mode no attack ran under and no mode an attack ran under goes unjudged."""
    held = set(rows["grad_mode"])
    return [m for m in offered_modes(model) if m in held]


def _check_models(models: Mapping[str, nn.Module], records: pd.DataFrame, run_dir: Path) -> None:
    known = sorted(records["model"].unique())
    unknown = sorted(set(models) - set(known))
    if unknown:
        raise ValueError(f"models {unknown} have no records in {run_dir}; its models: {known}")


def _suite_steps(meta: Mapping[str, Any], families: Sequence[str], threat: str) -> int | None:
    """The ``steps`` of the run's first suite entry of one of ``families`` at ``threat`` (None when none)."""
    for entry in AttacksMeta.from_meta(meta).values():
        if entry.family in families and entry.threat == threat:
            steps = entry.params.get("steps")
            if steps is not None:
                return int(steps)
    return None


def align_images(
    records: pd.DataFrame, images: torch.Tensor, labels: torch.Tensor, example_ids: Sequence[int] | None
) -> tuple[torch.Tensor, torch.Tensor, list[int]]:
    """Images and labels ordered like the run's example ids (and those ids); raises ValueError when the
    records name ids that are not given or the labels disagree with the records."""
    x = as_float_images(images)
    y = torch.as_tensor(labels).long().view(-1)
    ids = list(range(len(x))) if example_ids is None else [int(i) for i in example_ids]
    if len(ids) != len(x) or len(y) != len(x):
        raise ValueError(f"{len(x)} images, {len(y)} labels and {len(ids)} example ids: they must match")
    pos = {eid: i for i, eid in enumerate(ids)}
    rec_ids = records[["example_id", "label"]].drop_duplicates("example_id")
    missing = [int(e) for e in rec_ids["example_id"] if int(e) not in pos]
    if missing:
        raise ValueError(
            f"the records name example ids {missing[:5]}... that are not among the given images: pass the "
            "images and example_ids the benchmark evaluated"
        )
    order = [pos[int(e)] for e in rec_ids["example_id"]]
    if not torch.equal(y[order], torch.tensor(rec_ids["label"].to_numpy(dtype=np.int64, copy=True))):
        raise ValueError(
            "labels disagree with the records: pass the same images/labels the benchmark evaluated"
        )
    return x[order], y[order], [int(e) for e in rec_ids["example_id"]]


def write_energy(
    run_dir: Path,
    models: Mapping[str, nn.Module],
    x: torch.Tensor,
    y: torch.Tensor,
    ids: Sequence[int],
    *,
    eps: float,
    steps: int,
    seed: int,
    batch_size: int,
) -> Path | None:
    """``energy.csv``: the energy sparsification removes, for every model with a wavelet front-end (per-example
    seeds, so the batch size does not change the draws). None when no model has one."""
    frames = []
    for name, model in models.items():
        if find_wavelet_front_end(model) is None:
            continue
        for start in range(0, len(x), batch_size):
            batch = slice(start, start + batch_size)
            frames.append(
                energy_removed(
                    model,
                    x[batch],
                    y[batch],
                    eps=eps,
                    model_name=name,
                    seed=seed,
                    example_ids=list(ids[batch]),
                    steps=steps,
                )
            )
    if not frames:
        log.info("no model has a wavelet front-end: no sparsification energy to measure")
        return None
    table = pd.concat(frames, ignore_index=True)
    return atomic_write_text(run_dir / ENERGY_FILE, table.to_csv(index=False, lineterminator="\n"))


def write_diagnostics(run_dir: str | Path, reports: Sequence[DiagnosticsReport]) -> None:
    """diagnostics.csv (the table) and diagnostics.json (statuses, checks, loss curves, settings)."""
    run_dir = Path(run_dir)
    table = pd.concat([r.table() for r in reports], ignore_index=True) if reports else pd.DataFrame()
    atomic_write_text(run_dir / DIAGNOSTICS_CSV, table.to_csv(index=False, lineterminator="\n"))
    atomic_write_json(run_dir / DIAGNOSTICS_JSON, {"models": [r.to_dict() for r in reports]})
