"""A saved attack run folder as the report reads it: the file names of everything the report step adds, and
:func:`load_run`, which gathers a folder's records, provenance, diagnostics and energy measurements.

The attack step writes ``records.csv.gz`` and ``meta.json`` (:mod:`robustbench_wave.evaluation.records`);
:func:`robustbench_wave.attackrun.measure.measure_run` adds ``energy.csv`` and ``diagnostics.csv/json``; the
report adds ``verdict.json``, ``figures/`` and ``report.md``. Keeping the names here lets the writer and the
readers agree without importing each other.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import pandas as pd

from robustbench_wave.evaluation.meta_sections import (
    AttacksMeta,
    DatasetMeta,
    InvocationMeta,
    ModelsMeta,
    ProvenanceMeta,
    SettingsMeta,
    SuiteMeta,
)
from robustbench_wave.evaluation.records import META_FILE, read_meta, read_run
from robustbench_wave.evaluation.trust import Trust
from robustbench_wave.reporting.completeness import check_folder

ENERGY_FILE = "energy.csv"
DIAGNOSTICS_CSV = "diagnostics.csv"
DIAGNOSTICS_JSON = "diagnostics.json"
VERDICT_JSON = "verdict.json"
REPORT_FILE = "report.md"
FIGURES_DIR = "figures"
#: Everything the report step writes into a run folder besides the tables (``tables.TABLE_FILES``).
REPORT_OUTPUT_FILES = (ENERGY_FILE, DIAGNOSTICS_CSV, DIAGNOSTICS_JSON, VERDICT_JSON, REPORT_FILE)


@dataclass(frozen=True)
class RunFolder:
    """Everything the report needs from one run folder (missing optional files give empty values)."""

    path: Path
    records: pd.DataFrame
    meta: dict[str, Any]
    diagnostics: list[dict[str, Any]] = field(default_factory=list)  # diagnostics.json's per-model entries
    energy: pd.DataFrame = field(default_factory=pd.DataFrame)

    # meta.json's sections, read once and checked (a malformed one: ValueError naming this folder's file)
    @cached_property
    def suite(self) -> SuiteMeta:
        return SuiteMeta.from_meta(self.meta, self.meta_file)

    @cached_property
    def dataset(self) -> DatasetMeta:
        return DatasetMeta.from_meta(self.meta, self.meta_file)

    @cached_property
    def models(self) -> ModelsMeta:
        return ModelsMeta.from_meta(self.meta, self.meta_file)

    @cached_property
    def attacks(self) -> AttacksMeta:
        return AttacksMeta.from_meta(self.meta, self.meta_file)

    @cached_property
    def provenance(self) -> ProvenanceMeta:
        return ProvenanceMeta.from_meta(self.meta, self.meta_file)

    @cached_property
    def invocation(self) -> InvocationMeta:
        return InvocationMeta.from_meta(self.meta, self.meta_file)

    @cached_property
    def settings(self) -> SettingsMeta:
        return SettingsMeta.from_meta(self.meta, self.meta_file)

    @cached_property
    def trust(self) -> Trust:
        """What this run's numbers are (:class:`~robustbench_wave.evaluation.trust.Trust`: its checklist, the
        scan, the escalation)."""
        return Trust.from_run(self.meta, self.diagnostics, where=self.meta_file)

    @property
    def meta_file(self) -> Path:
        return self.path / META_FILE

    @property
    def train_seed(self) -> Any:
        """The training seed shared by the run's models, or None when they differ or none is recorded."""
        seeds = {m.train_seed for m in self.models.values()}
        seeds.discard(None)
        return seeds.pop() if len(seeds) == 1 else None


def run_trust(runs: Sequence[RunFolder]) -> Trust:
    """What the runs' numbers are, over every run (one per training seed: :meth:`Trust.combine`)."""
    return Trust.combine(r.trust for r in runs)


def load_run(run_dir: str | Path) -> RunFolder:
    """Read a run folder, refusing (one-line ValueError naming the file) records that are missing, unreadable,
    edited, partial or of another configuration than its config.json (:func:`completeness.check_folder`)."""
    run_dir = Path(run_dir)
    records, meta = read_run(run_dir)
    check_folder(run_dir, records, meta)
    diagnostics = read_meta(run_dir / DIAGNOSTICS_JSON).get("models", [])
    energy_path = run_dir / ENERGY_FILE
    return RunFolder(run_dir, records, meta, diagnostics, _read_energy(energy_path))


def _read_energy(path: Path) -> pd.DataFrame:
    if not path.exists():
        return pd.DataFrame()
    try:
        return pd.read_csv(path)
    except (OSError, UnicodeDecodeError, ValueError) as err:
        why = " ".join(str(err).split())
        raise ValueError(f"{path} cannot be read ({why}); delete it or re-run the attack command") from None


def combined_energy(runs: Sequence[RunFolder]) -> pd.DataFrame:
    """Every run's ``energy.csv`` in one table (empty when no run has one)."""
    energies = [r.energy for r in runs if not r.energy.empty]
    return pd.concat(energies, ignore_index=True) if energies else pd.DataFrame()


def class_count(runs: Sequence[RunFolder]) -> int:
    """The number of classes: from the data set's provenance, else one more than the largest label recorded."""
    info = runs[0].dataset.info or {}
    if info.get("num_classes"):
        return int(info["num_classes"])
    labels = pd.concat([r.records["label"] for r in runs])
    return max(2, int(labels.max()) + 1)


def report_path(run_dirs: Sequence[str | Path], out: str | Path | None = None) -> Path:
    """Where the report of ``run_dirs`` goes: ``out`` when it names a ``.md`` file, ``out/report.md`` for any
    other ``out`` (a folder); by default ``RUN/report.md`` for one run and, for several (training seeds),
    ``report.md`` next to the first run."""
    if not run_dirs:
        raise ValueError("give at least one run folder")
    if out is not None:
        out = Path(out)
        return out if out.suffix == ".md" else out / REPORT_FILE
    first = Path(run_dirs[0])
    return first / REPORT_FILE if len(run_dirs) == 1 else first.parent / REPORT_FILE
