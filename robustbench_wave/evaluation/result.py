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
    """Per-example records (a cross-check's rows among them, as attacks ``name@backend``) and provenance."""

    records: pd.DataFrame
    meta: dict[str, Any]
    _summary: pd.DataFrame | None = field(default=None, repr=False)

    def summary(self) -> pd.DataFrame:
        """Tidy numeric summary with Wilson intervals (:func:`metrics.summarize`)."""
        if self._summary is None:
            self._summary = metrics.summarize(self.records)
        return self._summary

    def crosscheck(self) -> pd.DataFrame | None:
        """Back-end agreement on identical points (:func:`metrics.backend_agreement`), None without one."""
        agreement = metrics.backend_agreement(self.records)
        return agreement if len(agreement) else None

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
        """Write records.csv.gz and meta.json into ``out_dir`` (the tables: ``reporting.tables.write_tables``).

        ``meta`` gains ``records``: the sha256 and row count of the file written, so a reader can tell an
        edited or partial file from the one this run wrote. meta.json is written last.
        """
        out_dir = Path(out_dir)
        paths = {"records": rec.write_records(self.records, out_dir / rec.RECORDS_FILE)}
        self.meta[rec.META_RECORDS] = rec.file_digest(paths["records"], len(self.records))
        paths["meta"] = rec.write_meta(self.meta, out_dir / rec.META_FILE)
        return paths

    @classmethod
    def load(cls, run_dir: str | Path) -> EvaluationResult:
        return cls(*rec.read_run(run_dir))

    @classmethod
    def merge(cls, results: Sequence[EvaluationResult]) -> EvaluationResult:
        """One result for several models evaluated on the same data and suite."""
        if not results:
            raise ValueError("nothing to merge")
        meta = copy.deepcopy(results[0].meta)
        meta.pop(rec.META_RECORDS, None)  # describes the first result's file, not the merged one
        for r in results[1:]:
            meta.setdefault("models", {}).update(copy.deepcopy(r.meta.get("models", {})))
        return cls(rec.concat([r.records for r in results]), meta)

    def __str__(self) -> str:
        """Clean accuracy and the per-threat worst case, one line per (model, grad_mode, threat, eps)."""
        s = self.summary()
        head = s[(s["threat"] == metrics.CLEAN_THREAT) | (s["attack"] == metrics.WORST)]
        cols = ["model", "grad_mode", "threat", "eps", "n", "robust_accuracy", "ci_low", "ci_high"]
        return head[cols].to_string(index=False, float_format=lambda v: f"{v:.4g}") + "\n"
