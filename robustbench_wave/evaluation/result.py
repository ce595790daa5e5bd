"""The outcome of an evaluation: per-example records, provenance and cross-check records, saved as a run folder.

:class:`EvaluationResult` holds data, not layout: its numbers come from :mod:`metrics`, and the tables
(CSV, LaTeX, terminal text) are written by ``robustbench_wave.reporting.tables.write_tables`` from the same
records, so the evaluation never depends on the reporting.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from robustbench_wave.evaluation import metrics
from robustbench_wave.evaluation import records as rec


@dataclass
class EvaluationResult:
    """Per-example records, provenance (``meta``) and, after a cross-check, the other back-ends' records."""

    records: pd.DataFrame
    meta: dict[str, Any]
    crosscheck_records: pd.DataFrame | None = None
    _summary: pd.DataFrame | None = field(default=None, repr=False)

    def summary(self) -> pd.DataFrame:
        """Tidy numeric summary with Wilson intervals (:func:`metrics.summarize`)."""
        if self._summary is None:
            self._summary = metrics.summarize(self.records)
        return self._summary

    def crosscheck(self) -> pd.DataFrame | None:
        """Back-end agreement on identical points (:func:`metrics.backend_agreement`), None without one."""
        if self.crosscheck_records is None or not len(self.crosscheck_records):
            return None
        return metrics.backend_agreement(self.records, self.crosscheck_records)

    def robust_accuracy(
        self, threat: str, eps: float, *, model: str | None = None, grad_mode: str = metrics.WORST_MODE
    ) -> float:
        """Worst-case robust accuracy at (threat, eps) of one model (the only one unless ``model`` is given);
        ``grad_mode='worst'`` is the worst case over every gradient mode the model was attacked under."""
        rows = self.records if model is None else self.records[self.records["model"] == model]
        if rows["model"].nunique() != 1:
            raise ValueError(f"records hold models {sorted(set(rows['model']))}: pass model= one of them")
        if not any(math.isclose(eps, e, abs_tol=metrics.EPS_TOL) for e in metrics.threat_eps(rows, threat)):
            raise ValueError(
                f"{threat} eps={eps} was not evaluated; choose one of {metrics.threat_eps(rows, threat)}"
            )
        if grad_mode != metrics.WORST_MODE:
            if grad_mode not in set(rows["grad_mode"]):
                raise ValueError(f"no records under gradient mode {grad_mode!r}")
            rows = rows[rows["grad_mode"] == grad_mode]
        return metrics.robust_accuracy(rows, threat, eps)[0]

    def save(self, out_dir: str | Path) -> dict[str, Path]:
        """Write records.csv.gz, meta.json and, after a cross-check, crosscheck_records.csv.gz into ``out_dir``
        (the tables: ``reporting.tables.write_tables``).

        ``meta`` gains ``records`` (and ``crosscheck``): the sha256 and row count of the file written, so a
        reader can tell an edited or partial file from the one this run wrote. meta.json is written last.
        """
        out_dir = Path(out_dir)
        paths = {"records": rec.write_records(self.records, out_dir / rec.RECORDS_FILE)}
        self.meta[rec.META_RECORDS] = rec.file_digest(paths["records"], len(self.records))
        self.meta.pop(rec.META_CROSSCHECK, None)
        if self.crosscheck_records is not None and len(self.crosscheck_records):
            paths["crosscheck_records"] = rec.write_records(
                self.crosscheck_records, out_dir / rec.CROSSCHECK_FILE
            )
            self.meta[rec.META_CROSSCHECK] = rec.file_digest(
                paths["crosscheck_records"], len(self.crosscheck_records)
            )
        paths["meta"] = rec.write_meta(self.meta, out_dir / rec.META_FILE)
        return paths

    @classmethod
    def load(cls, run_dir: str | Path) -> EvaluationResult:
        records, meta, cross = rec.read_run(run_dir)
        return cls(records, meta, cross)

    @classmethod
    def merge(cls, results: Sequence[EvaluationResult]) -> EvaluationResult:
        """One result for several models evaluated on the same data and suite."""
        if not results:
            raise ValueError("nothing to merge")
        meta = copy.deepcopy(results[0].meta)
        for key in (rec.META_RECORDS, rec.META_CROSSCHECK):  # describe the first result's files, not these
            meta.pop(key, None)
        for r in results[1:]:
            meta.setdefault("models", {}).update(copy.deepcopy(r.meta.get("models", {})))
        cross = [r.crosscheck_records for r in results if r.crosscheck_records is not None]
        return cls(
            rec.concat([r.records for r in results]),
            meta,
            rec.concat(cross) if cross else None,
        )

    def __str__(self) -> str:
        """Clean accuracy and the per-threat worst case, one line per (model, grad_mode, threat, eps)."""
        s = self.summary()
        head = s[(s["threat"] == metrics.CLEAN_THREAT) | (s["attack"] == metrics.WORST)]
        cols = ["model", "grad_mode", "threat", "eps", "n", "robust_accuracy", "ci_low", "ci_high"]
        return head[cols].to_string(index=False, float_format=lambda v: f"{v:.4g}") + "\n"
