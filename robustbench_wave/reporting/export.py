"""Leaderboard-ready export: RobustBench ``model_info`` JSON per model and threat, and a transfer matrix.

RobustBench keeps one JSON per model under ``model_info/<dataset>/<threat model>/<name>.json`` with the
paper's fields (``name``, ``authors``, ``link``, ``venue``, ``architecture``, ``additional_data``,
``number_forward_passes``, ``dataset``, ``eps``, ``clean_acc``, ``reported``, ``autoattack_acc``,
``external``, ``footnote``, ``unreliable``; accuracies as percent strings with two decimals, eps as "8/255")
at its standard budget per threat. :func:`model_info` fills them from records alone:

* eps: RobustBench's standard budget of the data set and threat (:data:`STANDARD_EPS`) when the run attacked
  it, else the run's reference budget (:func:`metrics.reference_eps`: the suite's declared one, else the
  middle of the grid); the data set
  is known by its identity (:func:`benchmark`: its ``DatasetInfo``'s classes, channels and size), not by how
  it was loaded, so CIFAR-10 read from an image-folder zip gets CIFAR-10's 8/255;
* clean_acc and the robust accuracy: :func:`metrics.clean_correct` / :func:`metrics.robust_flags` over every
  record of the model in every run given (all gradient modes, every attack and cross-check: every audited
  break counts). ``reported`` and ``external`` hold that worst case; ``autoattack_acc`` too, but only when
  the runs are the ``autoattack`` suite at full strength (its entries as shipped: every member with its
  standard hyper-parameters, :func:`full_autoattack`) and the records hold every member (APGD-CE, APGD-T,
  FAB-T, Square) at that threat and budget, since the number is then at most AutoAttack's; otherwise the
  key is ``worst_case_acc`` and the footnote and ``robustbench_wave.suite`` name the suite that made it;
* ``unreliable``: the model has no trusted gradient mode (:class:`~robustbench_wave.evaluation.trust.Trust`:
  the checklist flagged every mode, the scan found its gradient lost, or no checklist ran);
* ``robustbench_wave``: what RobustBench's files lack: the numbers as fractions with n, the attacks with their
  back-ends and library versions (``meta.json`` provenance), and every run's folder, git revision, config
  hash and records hash.

The transfer matrix (:func:`transfer_table`) has one row per surrogate and one column per target: the target's
robust accuracy under the run's transfer attacks alone (crafted on the surrogate: ``--surrogate``). One run
has one surrogate, so the matrix comes from several runs of the same models and examples, one per surrogate;
a cell is defined only when the transfer attacks ran on every clean-correct example they had not broken
(run them alone, ``--attacks transfer_pgd_linf``, or with ``--no-skip-broken``), else it is left empty and
the count of such examples is given. A surrogate that is its target gives a white-box cell (marked).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from robustbench_wave.analysis.formatting import percent
from robustbench_wave.attacks import Trait, families_with, is_average_case, load_suite
from robustbench_wave.core.io import atomic_write_json, atomic_write_text
from robustbench_wave.data import dataset_info
from robustbench_wave.evaluation.chunks import config_fingerprint
from robustbench_wave.evaluation.meta_sections import RecordsMeta
from robustbench_wave.evaluation.metrics import (
    CLEAN_THREAT,
    EPS_TOL,
    clean_correct,
    declared_reference,
    reference_eps,
    robust_flags,
    shared_status,
    threat_eps,
)
from robustbench_wave.reporting.runs import RunFolder, run_trust
from robustbench_wave.reporting.tables import _latex_escape, format_eps

log = logging.getLogger(__name__)

MODEL_INFO_DIR = "model_info"
TRANSFER_CSV = "transfer.csv"  # long form: one row per (threat, eps, surrogate, target)
MATRIX_CSV = "transfer_matrix.csv"
MATRIX_TEX = "transfer_matrix.tex"
#: RobustBench's budgets (its leaderboards); other data sets and threats use the reference budget.
STANDARD_EPS = {
    ("cifar10", "Linf"): 8 / 255,
    ("cifar10", "L2"): 0.5,
    ("cifar100", "Linf"): 8 / 255,
    ("imagenet", "Linf"): 4 / 255,
}
#: RobustBench's data sets this package can load, by the registered data set whose ``DatasetInfo`` is theirs.
BENCHMARKS = ("cifar10",)
#: The library each back-end's attacks come from (its version is read from meta.json's provenance).
BACKEND_LIBRARY = {"builtin": "robustbench_wave", "torchattacks": "torchattacks", "foolbox": "foolbox"}
TRANSFER_KIND = "transfer"
#: The suite whose full-strength runs alone give ``autoattack_acc`` (:func:`full_autoattack`).
AUTOATTACK_SUITE = "autoattack"


def _pct(value: float) -> str:
    """RobustBench's accuracy fields: percent with two decimals and no unit, "" when missing."""
    return percent(value, digits=2, unit="", missing="")


def export_eps(
    dataset: str, threat: str, grid: Sequence[float], declared: Mapping[str, float] | None = None
) -> tuple[float | None, str]:
    """(budget, why): RobustBench's standard budget when on the grid, else the reference budget (the suite's
    declared one, ``declared``: :func:`metrics.declared_reference`, else the middle of the grid)."""
    standard = STANDARD_EPS.get((dataset, threat))
    if standard is not None and any(abs(e - standard) <= EPS_TOL for e in grid):
        return next(e for e in grid if abs(e - standard) <= EPS_TOL), "RobustBench's standard budget"
    grid_frame = pd.DataFrame({"threat": threat, "eps": list(grid)})
    eps = reference_eps(grid_frame, threat, declared=declared)
    if declared and threat in declared and eps is not None and abs(eps - declared[threat]) <= EPS_TOL:
        return eps, "the suite's reference budget"
    return eps, "the reference budget (middle of the attacked grid)"


def full_autoattack(held: Sequence[RunFolder]) -> bool:
    """Whether every run is AutoAttack's suite at full strength: the shipped ``autoattack`` suite's entries
    exactly (every member, its standard hyper-parameters, none left out with ``--attacks``); its budgets may
    be the user's (``--eps``). Only then is a number AutoAttack's (``autoattack_acc``)."""
    shipped = [a.to_dict() for a in load_suite(AUTOATTACK_SUITE).attacks]
    return bool(held) and all(
        r.suite.name == AUTOATTACK_SUITE and list(r.suite.attacks or ()) == shipped for r in held
    )


def _suite_names(held: Sequence[RunFolder]) -> str:
    return ", ".join(dict.fromkeys(str(r.suite.name) for r in held))


def benchmark(name: str, info: Mapping[str, Any] | None) -> str:
    """The data set a run's data is, for RobustBench: the :data:`BENCHMARKS` entry whose registered
    ``DatasetInfo`` has the same classes (names, in order), channels and image size as ``info`` (meta.json's
    ``dataset.info``), whatever it was loaded as (``cifar10``, ``imagefolder:cifar10-jpeg.zip``); else
    ``name``."""
    if info:
        key = _identity(info)
        for bench in BENCHMARKS:
            if key == _identity(dataset_info(bench).to_dict()):
                return bench
    return name


def _identity(info: Mapping[str, Any]) -> tuple[Any, ...]:
    names = tuple(str(c).strip().lower() for c in info.get("class_names") or ())
    return (
        int(info.get("num_classes") or 0),
        int(info.get("in_chans") or 0),
        int(info.get("img_size") or 0),
        names,
    )


def _dataset(runs: Sequence[RunFolder]) -> str:
    """The one data set (and example set) of ``runs``, by its identity (:func:`benchmark`); ValueError when
    they differ."""
    names = {str(r.dataset.name) for r in runs}
    data = {r.dataset.data_sha256 for r in runs}
    if len(names) != 1 or len(data) != 1:
        raise ValueError(
            f"the runs were attacked on different data ({sorted(names)}, {len(data)} example sets); export "
            "runs of one data set and one --n-examples together"
        )
    return benchmark(names.pop(), runs[0].dataset.info)


def _model_rows(runs: Sequence[RunFolder], model: str) -> tuple[pd.DataFrame, list[RunFolder]]:
    """Every record of ``model`` over the runs holding it, checked to be one set of weights."""
    held = [r for r in runs if model in set(r.records["model"])]
    hashes = {_param_sha256(r, model) for r in held}
    if len(hashes) > 1:
        raise ValueError(
            f"model {model!r} has different weights in {[str(r.path) for r in held]}: export one checkpoint"
        )
    rows = pd.concat([r.records[r.records["model"] == model] for r in held], ignore_index=True)
    return rows, held


def _param_sha256(run: RunFolder, model: str) -> str | None:
    entry = run.models.get(model)
    return entry.param_sha256 if entry is not None else None


def _run_link(run: RunFolder) -> dict[str, Any]:
    config = run.invocation.config
    return {
        "run_dir": str(run.path),
        "git_revision": run.provenance.git_revision,
        "config_sha256": config_fingerprint(dict(config)) if config else None,
        "records_sha256": RecordsMeta.from_meta(run.meta, run.meta_file).sha256,
        "suite": run.suite.name,
        "created_utc": run.provenance.created_utc,
    }


def _attacks(rows: pd.DataFrame, held: Sequence[RunFolder]) -> list[dict[str, Any]]:
    """The attacks behind the number, each with its back-end and that library's version(s)."""
    out = []
    for (attack, family, backend), _ in rows.groupby(["attack", "family", "backend"], sort=True):
        library = BACKEND_LIBRARY.get(str(backend), str(backend))
        versions = sorted({str(r.provenance.libraries.get(library, "unknown")) for r in held})
        out.append(
            {"name": attack, "family": family, "backend": backend, "library": library, "versions": versions}
        )
    return out


def _unreliable(held: Sequence[RunFolder], model: str) -> tuple[bool, str]:
    """Whether the model's numbers are no robust accuracy (:class:`~robustbench_wave.evaluation.trust.Trust`:
    no trusted gradient mode -- every mode failed the checklist, the scan found the gradient lost, or no
    checklist ran), and why, in a line."""
    trust = run_trust(held)
    standing = trust.standing(model)
    if standing.trusted:
        return False, f"gradient-masking checklist: trusted modes {', '.join(trust.trusted_modes(model))}"
    why = (
        "; ".join(f"{m}: {w}" for m, w in trust.why(model).items()) or "no gradient-masking checklist was run"
    )
    return True, f"{standing.value}, an upper bound ({why})"


def _architecture(held: Sequence[RunFolder], model: str) -> str:
    entry = held[0].models.get(model)
    spec = (entry.model_spec if entry is not None else None) or {}
    if not spec.get("tokenizer"):
        return model
    body = spec.get("body") if isinstance(spec.get("body"), dict) else {}
    size = (
        f", depth {body['depth']}, width {body['embed_dim']}" if {"depth", "embed_dim"} <= set(body) else ""
    )
    return f"ViT-{spec.get('body_name', '?')} ({spec['tokenizer']} tokenizer{size})"


def model_info(runs: Sequence[RunFolder], model: str, threat: str) -> dict[str, Any] | None:
    """RobustBench's ``model_info`` fields for ``model`` at ``threat`` (None when it was not attacked there)."""
    dataset = _dataset(runs)
    rows, held = _model_rows(runs, model)
    eps, why = export_eps(dataset, threat, threat_eps(rows, threat), declared_reference(held[0].meta))
    if eps is None:
        return None
    at = rows[(rows["threat"] == threat) & (rows["eps"] <= eps + EPS_TOL)]
    clean = clean_correct(rows)
    robust = robust_flags(rows, threat, eps)
    clean_acc, robust_acc = float(clean.mean()), float(robust.mean())
    at_eps = at[(at["eps"] - eps).abs() <= EPS_TOL]
    members = set(families_with(Trait.AUTOATTACK)).issubset(at_eps["family"].astype(str))
    has_aa = members and full_autoattack(held)  # autoattack_acc: AutoAttack's suite at full strength only
    suites = _suite_names(held)
    unreliable, checklist = _unreliable(held, model)
    modes = sorted(set(rows["grad_mode"].astype(str)))
    names = ", ".join(dict.fromkeys(at["attack"].astype(str)))
    info: dict[str, Any] = {
        "name": model,
        "authors": "",
        "link": "; ".join(str(r.path) for r in held),
        "venue": "robustbench_wave evaluation",
        "architecture": _architecture(held, model),
        "additional_data": False,
        "number_forward_passes": 1,
        "dataset": dataset,
        "threat_model": threat,
        "eps": format_eps(eps),
        "clean_acc": _pct(clean_acc),
        "reported": _pct(robust_acc),
        **({"autoattack_acc": _pct(robust_acc)} if has_aa else {"worst_case_acc": _pct(robust_acc)}),
        "external": _pct(robust_acc),
        "footnote": f"Per-example worst case over {names} (suite {suites}"
        f"{'' if has_aa else ', not AutoAttack at full strength'}; eps = {format_eps(eps)}, {why}; gradient "
        f"modes {', '.join(modes)}); n = {len(clean)}; {checklist}.",
        "unreliable": unreliable,
    }
    info["robustbench_wave"] = {
        "eps": eps,
        "n": len(clean),
        "clean_accuracy": clean_acc,
        "robust_accuracy": robust_acc,
        "n_robust": int(robust.sum()),
        "grad_modes": modes,
        "autoattack_complete": has_aa,
        "suite": suites,
        "attacks": _attacks(at[at["threat"] != CLEAN_THREAT], held),
        "runs": [_run_link(r) for r in held],
    }
    return info


def write_model_info(runs: Sequence[RunFolder], out_dir: Path) -> list[Path]:
    """``out_dir/model_info/<dataset>/<threat>/<model>.json`` for every model and threat of the runs."""
    dataset = _dataset(runs)
    written = []
    models = dict.fromkeys(m for r in runs for m in r.records["model"].astype(str))
    for model in models:
        rows, _ = _model_rows(runs, model)
        for threat in dict.fromkeys(rows["threat"].astype(str)):
            worst_case = threat != CLEAN_THREAT and not is_average_case(threat)  # not corruptions
            info = model_info(runs, model, threat) if worst_case else None
            if info is not None:
                path = out_dir / MODEL_INFO_DIR / dataset / threat / f"{model}.json"
                written.append(atomic_write_json(path, info))
    return written


# ------------------------------------------------------------------------------------------ transfer


def _surrogate(run: RunFolder, model: str) -> tuple[str | None, bool]:
    """(surrogate name, whether it is the target itself: a white-box cell) of ``model`` in ``run``."""
    entry = run.models.get(model)
    if entry is None or entry.surrogate is None:
        return None, False
    name = entry.surrogate.name
    return name, name == model and entry.surrogate.param_sha256 == entry.param_sha256


def _transfer_cell(rows: pd.DataFrame, threat: str, eps: float) -> dict[str, Any]:
    """Robust accuracy of one target under the transfer rows alone; NaN when some example is unknown."""
    clean = clean_correct(rows)
    status = shared_status(rows[rows["kind"] == TRANSFER_KIND], threat, eps).reindex(clean.index)
    held = clean & (status == 0.0)
    unknown = clean & status.isna()
    n, k = len(clean), int(held.sum())
    acc = k / n if n and not unknown.any() else math.nan
    return {"n": n, "n_robust": k, "n_unknown": int(unknown.sum()), "robust_accuracy": acc}


def transfer_table(runs: Sequence[RunFolder]) -> pd.DataFrame:
    """Long form: one row per (threat, eps, surrogate, target) of the runs' transfer records."""
    dataset = _dataset(runs)
    rows: dict[tuple[str, str | None, str], dict[str, Any]] = {}
    for run in runs:
        transfer = run.records[run.records["kind"] == TRANSFER_KIND]
        for target in dict.fromkeys(transfer["model"].astype(str)):
            surrogate, white_box = _surrogate(run, target)
            mine = run.records[run.records["model"] == target]
            for threat in dict.fromkeys(transfer.loc[transfer["model"] == target, "threat"].astype(str)):
                eps, _ = export_eps(
                    dataset, threat, threat_eps(transfer, threat), declared_reference(run.meta)
                )
                cell = _transfer_cell(mine, threat, eps)
                row = {"threat": threat, "eps": eps, "surrogate": surrogate, "target": target, **cell}
                _add_cell(
                    rows,
                    (threat, surrogate, target),
                    row | {"white_box": white_box, "run_dir": str(run.path)},
                )
                if cell["n_unknown"]:
                    log.warning(
                        "%s -> %s (%s): %d examples were skipped by the transfer attack (broken first by "
                        "another attack); run the transfer alone (--attacks NAME) or with --no-skip-broken",
                        surrogate, target, threat, cell["n_unknown"],
                    )  # fmt: skip
    return pd.DataFrame(list(rows.values()))


def _add_cell(
    cells: dict[tuple[str, str | None, str], dict[str, Any]], key: Any, row: dict[str, Any]
) -> None:
    """One cell per (threat, surrogate, target): a run where the transfer attacked every example wins over one
    where other attacks left it unknown (e.g. a full suite with the same surrogate); otherwise the first is
    kept, and two defined cells that disagree are refused."""
    old = cells.get(key)
    both = old is not None and old["n_unknown"] == 0 and row["n_unknown"] == 0
    if both and (old["n"], old["n_robust"]) != (row["n"], row["n_robust"]):
        raise ValueError(
            f"{old['run_dir']} and {row['run_dir']} give different transfers from {key[1]} to {key[2]} "
            f"({key[0]}): export one of them"
        )
    if old is None or (old["n_unknown"] and not row["n_unknown"]):
        cells[key] = row


def transfer_matrix(table: pd.DataFrame) -> pd.DataFrame:
    """Surrogates (rows, per threat and eps) x targets (columns): robust accuracy under transfer."""
    wide = table.pivot_table(
        index=["threat", "eps", "surrogate"], columns="target", values="robust_accuracy", dropna=False
    )
    wide.columns.name = None
    return wide


def matrix_latex(table: pd.DataFrame) -> str:
    """booktabs LaTeX of the matrix in percent; white-box cells (surrogate = target) in italics."""
    wide = transfer_matrix(table)
    white = {(r.threat, r.eps, r.surrogate, r.target) for r in table.itertuples() if r.white_box}
    cells = wide.copy().astype(object)
    for (threat, eps, sur), row in wide.iterrows():
        for target, value in row.items():
            text = percent(value, unit="", missing="")
            cells.loc[(threat, eps, sur), target] = (
                rf"\textit{{{text}}}" if (threat, eps, sur, target) in white and text else text
            )
    cells.index = pd.MultiIndex.from_tuples(
        [(t, format_eps(e), _latex_escape(str(s))) for t, e, s in cells.index],
        names=["threat", r"$\epsilon$", "surrogate"],
    )
    cells.columns = [_latex_escape(str(c)) for c in cells.columns]
    return cells.style.to_latex(
        hrules=True,
        caption="Robust accuracy (\\%) of each target (column) under transfer attacks crafted on each "
        "surrogate (row); italics: surrogate = target (white-box)",
        label="tab:transfer",
        position_float="centering",
    )


def write_export(runs: Sequence[RunFolder], out_dir: str | Path) -> list[Path]:
    """model_info JSONs, and (when the runs hold transfer records) transfer.csv, the matrix CSV and LaTeX."""
    out_dir = Path(out_dir)
    written = write_model_info(runs, out_dir)
    table = transfer_table(runs)
    if len(table):
        written.append(
            atomic_write_text(out_dir / TRANSFER_CSV, table.to_csv(index=False, lineterminator="\n"))
        )
        matrix = transfer_matrix(table).to_csv(lineterminator="\n")
        written.append(atomic_write_text(out_dir / MATRIX_CSV, matrix))
        written.append(atomic_write_text(out_dir / MATRIX_TEX, matrix_latex(table)))
    return written
