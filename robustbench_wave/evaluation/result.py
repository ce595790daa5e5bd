"""The outcome of an evaluation: per-example records, provenance and cross-check records, saved as a run folder.

:class:`EvaluationResult` holds data, not layout: its numbers come from :mod:`metrics`, and the tables
(CSV, LaTeX, terminal text) are written by ``robustbench_wave.reporting.tables.write_tables`` from the same
records, so the evaluation never depends on the reporting.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from robustbench_wave.core.runfolder import check_safe_name
from robustbench_wave.evaluation import metrics
from robustbench_wave.evaluation import records as rec
from robustbench_wave.evaluation.adversarial import (
    ADVERSARIAL_DIR,
    META_KEY,
    RULE,
    AdversarialSet,
    file_name,
    read_set,
    write_set,
)


@dataclass
class EvaluationResult:
    """Per-example records (a cross-check's rows among them, as attacks ``name@backend``) and provenance."""

    records: pd.DataFrame
    meta: dict[str, Any]
    _summary: pd.DataFrame | None = field(default=None, repr=False)
    #: model -> the points that broke its examples (``evaluate(save_adversarial=True)``); empty otherwise
    adversarial: dict[str, AdversarialSet] = field(default_factory=dict, repr=False)

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
        eps = metrics.check_on_grid(rows, threat, eps)  # never an accuracy for a budget not attacked
        if grad_mode != metrics.WORST_MODE:
            if grad_mode not in set(rows["grad_mode"]):
                raise ValueError(f"no records under gradient mode {grad_mode!r}")
            rows = rows[rows["grad_mode"] == grad_mode]
        return metrics.robust_accuracy(rows, threat, eps)[0]

    def save(self, out_dir: str | Path) -> dict[str, Path]:
        """Write records.csv.gz and meta.json into ``out_dir`` (the tables: ``reporting.tables.write_tables``).

        ``meta`` gains ``records``: the sha256 and row count of the file written, so a reader can tell an
        edited or partial file from the one this run wrote. Saved adversarial examples go to
        ``adversarial/<model>.safetensors``, listed with their sha256 under ``meta["adversarial"]`` (only
        then). meta.json is written last.
        """
        out_dir = Path(out_dir)
        paths = self._save_adversarial(out_dir)
        paths["records"] = rec.write_records(self.records, out_dir / rec.RECORDS_FILE)
        self.meta[rec.META_RECORDS] = rec.file_digest(paths["records"], len(self.records))
        paths["meta"] = rec.write_meta(self.meta, out_dir / rec.META_FILE)
        return paths

    def _save_adversarial(self, out_dir: Path) -> dict[str, Path]:
        if not self.adversarial:
            return {}
        files, paths = {}, {}
        for model, kept in sorted(self.adversarial.items()):
            rel = f"{ADVERSARIAL_DIR}/{file_name(model)}"
            paths[f"adversarial:{model}"] = path = write_set(kept, out_dir / rel)
            files[model] = {"file": rel, "sha256": rec.file_sha256(path), "n": len(kept)}
        self.meta[META_KEY] = {"rule": RULE, "files": files}
        return paths

    @classmethod
    def load(cls, run_dir: str | Path) -> EvaluationResult:
        """A saved run (records, meta and any adversarial examples meta.json lists, their sha256 checked)."""
        records, meta = rec.read_run(run_dir)
        return cls(records, meta, adversarial=load_adversarial(run_dir, meta))

    @classmethod
    def merge(cls, results: Sequence[EvaluationResult]) -> EvaluationResult:
        """One result for several models evaluated on the same data and suite."""
        if not results:
            raise ValueError("nothing to merge")
        meta = copy.deepcopy(results[0].meta)
        meta.pop(rec.META_RECORDS, None)  # describes the first result's file, not the merged one
        meta.pop(META_KEY, None)  # likewise; written again on save
        for r in results[1:]:
            meta.setdefault("models", {}).update(copy.deepcopy(r.meta.get("models", {})))
        adversarial = {m: a for r in results for m, a in r.adversarial.items()}
        return cls(rec.concat([r.records for r in results]), meta, adversarial=adversarial)

    def __str__(self) -> str:
        """Clean accuracy and the per-threat worst case, one line per (model, grad_mode, threat, eps)."""
        s = self.summary()
        head = s[(s["threat"] == metrics.CLEAN_THREAT) | (s["attack"] == metrics.WORST)]
        cols = ["model", "grad_mode", "threat", "eps", "n", "robust_accuracy", "ci_low", "ci_high"]
        return head[cols].to_string(index=False, float_format=lambda v: f"{v:.4g}") + "\n"


def load_adversarial(run_dir: str | Path, meta: dict[str, Any]) -> dict[str, AdversarialSet]:
    """The adversarial examples ``meta.json`` lists (none: {}); a missing, edited or unreadable file is a
    one-line ValueError naming it."""
    files = (meta.get(META_KEY) or {}).get("files") or {}
    out = {}
    for model, entry in files.items():
        check_safe_name(model, f"{rec.META_FILE}'s adversarial model")
        path = Path(run_dir) / ADVERSARIAL_DIR / file_name(model)  # never a path read from the file
        if not isinstance(entry, dict) or not path.is_file() or rec.file_sha256(path) != entry.get("sha256"):
            raise ValueError(
                f"{path} is missing or differs from the file {rec.META_FILE} describes (sha256); {rec.RERUN}"
            )
        out[model], _ = read_set(path)
    return out
