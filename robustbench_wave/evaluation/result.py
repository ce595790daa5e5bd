"""The outcome of an evaluation: per-example records, provenance and cross-check records, saved as a run folder.

:class:`EvaluationResult` holds data, not layout: its numbers come from :mod:`metrics`, and the tables
(CSV, LaTeX, terminal text) are written by ``robustbench_wave.reporting.tables.write_tables`` from the same
records, so the evaluation never depends on the reporting.
"""

from __future__ import annotations

import copy
import logging
import warnings
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
from robustbench_wave.evaluation.trust import Trust

log = logging.getLogger(__name__)

#: What every evaluation without the gradient-masking checklist is: measured, never verified.
NO_CHECKLIST = (
    "no gradient-masking checklist ran on these records, so no number is verified (unchecked); "
    "benchmark() or the attack command runs it"
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

    # ------------------------------------------------------------------------------- what a number is
    @property
    def trust(self) -> Trust:
        """What these numbers are, by the harness's one rule (:class:`~.trust.Trust`): a mode whose gradient the
        scan found lost is an upper bound; with no checklist (an evaluation has none) nothing is verified."""
        return Trust.from_run(self.meta, None)

    def standing(self, model: str | None = None) -> str:
        """``unverified`` (an upper bound: the scan found the gradient lost) or ``unchecked`` (no checklist
        judged it): an evaluation alone never verifies a number."""
        return self.trust.standing(self._one_model(model)).value

    def why(self, model: str | None = None) -> dict[str, str]:
        """Gradient mode -> why its numbers are not trusted."""
        return self.trust.why(self._one_model(model))

    def upper_bounds(self) -> dict[tuple[str, str], str]:
        """(model, gradient mode) -> why its numbers are only an upper bound (the scan found its gradient lost)."""
        return dict(self.trust.marks)

    def warn_upper_bounds(self) -> None:
        """Log each upper bound once (what :func:`~robustbench_wave.evaluation.evaluate` does on return)."""
        for (model, mode), why in sorted(self.upper_bounds().items()):
            log.warning("%s [%s]: its robust accuracies are upper bounds: %s", model, mode, why)

    def _one_model(self, model: str | None) -> str:
        names = sorted({str(m) for m in self.records["model"]}) if len(self.records) else []
        if model is None and len(names) != 1:
            raise ValueError(f"records hold models {names}: pass model= one of them")
        return model if model is not None else names[0]

    def robust_accuracy(
        self, threat: str, eps: float, *, model: str | None = None, grad_mode: str = metrics.WORST_MODE
    ) -> float:
        """Worst-case robust accuracy at (threat, eps) of one model (the only one unless ``model`` is given);
        ``grad_mode='worst'`` is the worst case over every gradient mode the model was attacked under. A
        UserWarning says so when the number rests on a mode that is only an upper bound."""
        rows = self.records if model is None else self.records[self.records["model"] == model]
        if rows["model"].nunique() != 1:
            raise ValueError(f"records hold models {sorted(set(rows['model']))}: pass model= one of them")
        eps = metrics.check_on_grid(rows, threat, eps)  # never an accuracy for a budget not attacked
        if grad_mode != metrics.WORST_MODE:
            if grad_mode not in set(rows["grad_mode"]):
                raise ValueError(f"no records under gradient mode {grad_mode!r}")
            rows = rows[rows["grad_mode"] == grad_mode]
        accuracy = metrics.robust_accuracy(rows, threat, eps)[0]
        name = str(rows["model"].iloc[0])
        bounds = {m: w for m in sorted(set(rows["grad_mode"])) if (w := self.trust.upper_bound(name, m))}
        if bounds:
            why = "; ".join(f"{m}: {w}" for m, w in bounds.items())
            warnings.warn(
                f"{name}'s robust accuracy {accuracy:.4f} at {threat} {eps:g} is an upper bound, not robustness "
                f"({why})",
                UserWarning,
                stacklevel=2,
            )
        return accuracy

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
        """Clean accuracy and the per-threat worst case, one line per (model, grad_mode, threat, eps); an upper
        bound's accuracy marked ``†`` and explained below the table, with the standing of every model."""
        s = self.summary()
        head = s[(s["threat"] == metrics.CLEAN_THREAT) | (s["attack"] == metrics.WORST)].copy()
        cols = ["model", "grad_mode", "threat", "eps", "n", "robust_accuracy", "ci_low", "ci_high"]
        trust = self.trust
        marked = [
            row.threat != metrics.CLEAN_THREAT
            and trust.upper_bound(str(row.model), str(row.grad_mode)) is not None
            for row in head.itertuples()
        ]
        head["robust_accuracy"] = [
            f"{v:.4g}{'†' if m else ''}" for v, m in zip(head["robust_accuracy"], marked, strict=True)
        ]
        lines = [head[cols].to_string(index=False, float_format=lambda v: f"{v:.4g}")]
        lines += [f"† {m} [{g}]: upper bound: {why}" for (m, g), why in sorted(trust.marks.items())]
        models = sorted({str(m) for m in head["model"]})
        standings = ", ".join(f"{m}: {trust.standing(m).value}" for m in models)
        if not trust.checklist and standings:
            lines.append(f"standing: {standings} ({NO_CHECKLIST})")
        return "\n".join(lines) + "\n"


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
