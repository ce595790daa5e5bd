"""The run's Markdown report (readable on GitHub) and ``finalize_run``, the last step of an attack run.

``finalize_run`` adds what the benchmark alone does not: the adaptive low-frequency attack (its records join
the tables), the energy-removed measurement, the gradient-masking diagnostics (Carlini et al. 2019; Athalye
et al. 2018; Croce & Hein 2020), the figures and the verdict, then writes ``report.md``.  ``write_report``
rebuilds the report from the files in one or several run folders (several training seeds are combined into
mean ± standard deviation) without re-running anything:

    python -m robustbench_wave.report_md results/attack/fashion-mnist/RUN [RUN2 RUN3 ...] [--out report.md]
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import sys
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch
from torch import nn

from robustbench_wave import __version__
from robustbench_wave.analysis.diagnostics import DiagnosticsReport, mode_view, run_diagnostics, threat_eps
from robustbench_wave.analysis.energy import describe_energy, energy_removed, energy_summary
from robustbench_wave.analysis.verdict import claim_numbers, verdict
from robustbench_wave.attacks.lowfreq import find_wavelet_front_end, lowfreq_records
from robustbench_wave.io import atomic_write_json, atomic_write_text
from robustbench_wave.reporting.plots import accuracy_curves, combine_seeds, write_figures

log = logging.getLogger(__name__)

ADAPTIVE_RECORDS = "adaptive_records.csv.gz"
ENERGY_FILE = "energy.csv"
DIAGNOSTICS_CSV = "diagnostics.csv"
DIAGNOSTICS_JSON = "diagnostics.json"
VERDICT_JSON = "verdict.json"
REPORT_FILE = "report.md"


# --------------------------------------------------------------------------------------------------------
# finalize a run
# --------------------------------------------------------------------------------------------------------
def finalize_run(
    run_dir: str | Path,
    models: Mapping[str, nn.Module],
    images: torch.Tensor,
    labels: torch.Tensor,
    info: Any,
    *,
    example_ids: Sequence[int] | None = None,
    n_diagnostics: int = 64,
    diagnostics_eps: float | None = None,
    diagnostics_steps: int = 10,
    square_queries: int = 300,
    lowfreq: bool = True,
    lowfreq_steps: int = 20,
    lowfreq_modes: Sequence[str] = ("exact", "bpda"),
    lowfreq_eps: Sequence[float] | None = None,
    lowfreq_skip_broken: bool | None = None,
    energy: bool = True,
    energy_n: int = 64,
    seed: int = 0,
    baseline: str | None = None,
    batch_size: int = 128,
) -> Path:
    """Diagnostics, adaptive attacks, figures, verdict and ``report.md`` for a saved benchmark run.

    ``run_dir`` holds ``records.csv.gz`` and ``meta.json`` (``EvaluationResult.save``); ``models`` maps the
    record's model names to the evaluated modules; ``images``/``labels`` are the evaluated tensors
    (``example_ids`` index them, default ``0..N-1`` as in ``benchmark.evaluate``); ``info`` is the
    DatasetInfo.  The low-frequency attack runs on every evaluated example (its records must cover them all to
    join the per-example worst case) at ``lowfreq_eps`` (default: the run's Linf grid) under ``lowfreq_modes``
    (``blocked`` is left out by default: a zero gradient cannot steer it); with ``lowfreq_skip_broken``
    (default: the run's own ``skip_broken`` setting) points the suite already broke at a budget are not
    attacked again, as for every other attack of the run.  Writes ``adaptive_records.csv.gz``, ``energy.csv``, ``diagnostics.csv/json``,
    ``figures/*.png``, ``verdict.json`` and ``report.md``; returns the report's path.
    """
    from robustbench_wave.evaluation import records as rec

    run_dir = Path(run_dir)
    records, meta, _ = rec.read_run(run_dir)
    if lowfreq_skip_broken is None:
        lowfreq_skip_broken = bool((meta.get("settings") or {}).get("skip_broken", True))
    x_all, y_all, ids = _check_alignment(records, images, labels, example_ids)
    unknown = sorted(set(models) - set(records["model"].unique()))
    if unknown:
        raise ValueError(
            f"models {unknown} have no records in {run_dir}; its models: {sorted(records['model'].unique())}"
        )
    dataset = str(getattr(info, "name", "dataset"))
    level = next(
        (int(f.levels) for m in models.values() if (f := find_wavelet_front_end(m)) is not None), None
    )

    adaptive: list[pd.DataFrame] = []
    if lowfreq and level is not None:
        eps_list = list(lowfreq_eps) if lowfreq_eps is not None else threat_eps(records, "Linf")
        for name, model in models.items():
            modes = [m for m in lowfreq_modes if m in set(records.loc[records["model"] == name, "grad_mode"])]
            if not modes or not eps_list:
                continue
            log.info("low-frequency PGD on %s (level %d, modes %s)", name, level, modes)
            skip = (
                {(m, float(e)): broken_ids(records, name, m, e) for m in modes for e in eps_list}
                if lowfreq_skip_broken
                else None
            )
            adaptive.append(
                lowfreq_records(
                    model,
                    x_all,
                    y_all,
                    eps_list,
                    model_name=name,
                    dataset=dataset,
                    level=level,
                    grad_modes=modes,
                    skip_ids=skip,
                    steps=lowfreq_steps,
                    seed=seed,
                    batch_size=batch_size,
                    example_ids=ids,
                )
            )
        if adaptive:
            rec.write_records(rec.concat(adaptive), run_dir / ADAPTIVE_RECORDS)
    elif lowfreq:
        log.info("no model has a wavelet front-end: the low-frequency attack has no level to target; skipped")

    energy_frames = []
    if energy:
        eps_e = diagnostics_eps if diagnostics_eps is not None else _median_eps(records)
        for name, model in models.items():
            if find_wavelet_front_end(model) is None:
                continue
            k = min(energy_n, len(x_all))
            energy_frames.append(
                energy_removed(
                    model,
                    x_all[:k],
                    y_all[:k],
                    eps=eps_e,
                    model_name=name,
                    seed=seed,
                    example_ids=ids[:k],
                    steps=lowfreq_steps,
                )
            )
    energy_df = pd.concat(energy_frames, ignore_index=True) if energy_frames else pd.DataFrame()
    if not energy_df.empty:
        atomic_write_text(run_dir / ENERGY_FILE, energy_df.to_csv(index=False, lineterminator="\n"))

    combined = rec.concat([records, *adaptive])
    reports: list[DiagnosticsReport] = []
    for name, model in models.items():
        reports.append(
            run_diagnostics(
                model,
                x_all,
                y_all,
                combined[combined["model"] == name],
                info=info,
                model_name=name,
                n=n_diagnostics,
                eps=diagnostics_eps,
                steps=diagnostics_steps,
                square_queries=square_queries,
                seed=seed,
            )
        )
    write_diagnostics(run_dir, reports)
    write_report(run_dir, num_classes=int(info.num_classes), baseline=baseline)
    return run_dir / REPORT_FILE


def broken_ids(records: pd.DataFrame, model: str, mode: str, eps: float, threat: str = "Linf") -> set[int]:
    """Example ids not robust at (threat, eps) in the run's worst case for this model and gradient mode."""
    rows = mode_view(records, mode, model)
    at = rows[((rows["threat"] == threat) & (rows["eps"] <= eps + 1e-9)) | (rows["kind"] == "clean")]
    ok = at["correct"].astype(bool).groupby(at["example_id"]).all()
    return {int(i) for i in ok.index[~ok.to_numpy()]}


def _median_eps(records: pd.DataFrame) -> float:
    eps = threat_eps(records, "Linf")
    return float(np.median(eps)) if eps else 0.1


def _check_alignment(
    records: pd.DataFrame, images: torch.Tensor, labels: torch.Tensor, example_ids: Sequence[int] | None
) -> tuple[torch.Tensor, torch.Tensor, list[int]]:
    """Images ordered like the run's example ids; raises if labels disagree with the records."""
    from robustbench_wave.attacks.lowfreq import as_float_images

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


def write_diagnostics(run_dir: str | Path, reports: Sequence[DiagnosticsReport]) -> None:
    """diagnostics.csv (the table) and diagnostics.json (statuses, checks, loss curves, settings)."""
    run_dir = Path(run_dir)
    table = pd.concat([r.table() for r in reports], ignore_index=True) if reports else pd.DataFrame()
    atomic_write_text(run_dir / DIAGNOSTICS_CSV, table.to_csv(index=False, lineterminator="\n"))
    atomic_write_json(run_dir / DIAGNOSTICS_JSON, {"models": [r.to_dict() for r in reports]})


# --------------------------------------------------------------------------------------------------------
# reading a run folder
# --------------------------------------------------------------------------------------------------------
def load_run(run_dir: str | Path) -> dict[str, Any]:
    """Everything the report needs from one run folder (missing optional files give empty values)."""
    from robustbench_wave.evaluation import records as rec

    run_dir = Path(run_dir)
    records, meta, _ = rec.read_run(run_dir)
    adaptive_path = run_dir / ADAPTIVE_RECORDS
    if adaptive_path.exists():
        records = rec.concat([records, rec.read_records(adaptive_path)])
    diag = (
        json.loads((run_dir / DIAGNOSTICS_JSON).read_text("utf-8"))
        if (run_dir / DIAGNOSTICS_JSON).exists()
        else {}
    )
    energy_path = run_dir / ENERGY_FILE
    energy = pd.read_csv(energy_path) if energy_path.exists() else pd.DataFrame()
    return {
        "dir": run_dir,
        "records": records,
        "meta": meta,
        "diagnostics": diag.get("models", []),
        "energy": energy,
    }


def _num_classes(runs: Sequence[Mapping[str, Any]]) -> int:
    info = (runs[0]["meta"].get("dataset") or {}).get("info") or {}
    if info.get("num_classes"):
        return int(info["num_classes"])
    labels = pd.concat([r["records"]["label"] for r in runs])
    return max(2, int(labels.max()) + 1)


# --------------------------------------------------------------------------------------------------------
# Markdown
# --------------------------------------------------------------------------------------------------------
def md_table(df: pd.DataFrame, index: bool = False) -> str:
    """A GitHub Markdown table (no extra dependency); '|' in cells is escaped."""
    if index:
        df = df.reset_index()
    cols = [str(c) for c in df.columns]

    def cell(v: Any) -> str:
        if isinstance(v, float):
            v = "" if math.isnan(v) else f"{v:.4g}"
        return str(v).replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(cols) + " |", "|" + "|".join("---" for _ in cols) + "|"]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in df.itertuples(index=False)]
    return "\n".join(lines)


def comparison_markdown(runs: Sequence[Mapping[str, Any]]) -> str:
    """Rows (threat, attack, eps), columns model/mode: robust accuracy % ± CI half-width (one run), or mean ±
    sd over runs (several training seeds)."""
    from robustbench_wave.reporting.tables import format_eps, summarize

    summaries = [summarize(r["records"]) for r in runs]
    keys = ["model", "grad_mode", "threat", "attack", "eps"]
    if len(summaries) == 1:
        s = summaries[0]
        s = s.assign(
            cell=[_cell_ci(a, lo, hi) for a, lo, hi in zip(s["robust_accuracy"], s["ci_low"], s["ci_high"])]
        )
        note = (
            "cells: robust accuracy % ± half-width of the 95% Wilson interval; `worst-case` = per-example AND"
        )
    else:
        allsum = pd.concat(summaries, ignore_index=True)
        g = allsum.groupby(keys, sort=False)["robust_accuracy"]
        s = g.agg(["mean", "std", "count"]).reset_index()
        s["cell"] = [_cell_sd(m, sd, n) for m, sd, n in zip(s["mean"], s["std"], s["count"])]
        note = f"cells: mean ± sd of robust accuracy % over {len(runs)} runs (training seeds)"
    s = s.assign(column=s["model"] + " / " + s["grad_mode"])
    s = s.assign(row_eps=[format_eps(e) if t != "none" else "" for t, e in zip(s["threat"], s["eps"])])
    wide = s.pivot_table(
        index=["threat", "attack", "row_eps"], columns="column", values="cell", aggfunc="first", sort=False
    )
    wide = wide.reset_index().rename(columns={"row_eps": "eps"}).fillna("--")
    return md_table(wide) + f"\n\n_{note}; attack columns follow the suite's bookkeeping (see meta.json)._"


def _cell_ci(acc: float, lo: float, hi: float) -> str:
    return "--" if math.isnan(acc) else f"{100 * acc:.1f} ± {100 * (hi - lo) / 2:.1f}"


def _cell_sd(mean: float, sd: float, n: int) -> str:
    if math.isnan(mean):
        return "--"
    return f"{100 * mean:.1f} ± {100 * sd:.1f}" if n > 1 and not math.isnan(sd) else f"{100 * mean:.1f}"


def provenance_markdown(runs: Sequence[Mapping[str, Any]]) -> str:
    lines = []
    for run in runs:
        meta = run["meta"]
        prov = meta.get("provenance", {})
        ds = meta.get("dataset", {})
        suite = meta.get("suite", {})
        lines.append(f"**Run** `{run['dir']}`")
        lines.append("")
        lines.append(
            f"- data: `{ds.get('name', '?')}`, {meta.get('n_examples', '?')} test examples "
            f"(sha256 `{str(meta.get('data_sha256', ''))[:12]}`), eps grid {ds.get('eps', {})}"
        )
        lines.append(f"- suite: `{suite.get('name', '?')}` — {suite.get('description', '')}")
        settings = meta.get("settings", {})
        lines.append(
            f"- settings: attack seed {meta.get('seeds', {}).get('attack_seed', '?')}, "
            f"skip_broken={settings.get('skip_broken')}, backend={settings.get('backend')}, "
            f"device={settings.get('device')}"
        )
        for name, m in (meta.get("models") or {}).items():
            sha = m.get("checkpoint_sha256") or m.get("param_sha256") or ""
            lines.append(
                f"- model `{name}`: grad modes {m.get('grad_modes')}, clean accuracy "
                f"{_fmt_pct(m.get('clean_accuracy'))}, train seed {m.get('train_seed', '?')}, checkpoint "
                f"`{str(sha)[:12]}`, attack time {m.get('seconds_total', '?')} s"
            )
        libs = prov.get("libraries", {})
        lines.append(
            f"- code: git `{prov.get('git_revision', '?')}`; "
            + ", ".join(f"{k} {v}" for k, v in libs.items())
        )
        lines.append(f"- platform: {prov.get('platform', '?')}; created {meta.get('created_utc', '?')}")
        attacks = meta.get("attacks") or {}
        if attacks:
            rows = [
                {
                    "attack": k,
                    "family": a.get("family"),
                    "kind": a.get("kind"),
                    "threat": a.get("threat"),
                    "backend": a.get("backend"),
                    "eps": ", ".join(f"{e:.4g}" for e in a.get("eps", [])),
                    "hyper-parameters": ", ".join(f"{p}={v}" for p, v in (a.get("params") or {}).items()),
                }
                for k, a in attacks.items()
            ]
            lines += [
                "",
                "<details><summary>attacks and hyper-parameters</summary>",
                "",
                md_table(pd.DataFrame(rows)),
                "",
                "</details>",
            ]
        lines += [
            "",
            "<details><summary>meta.json</summary>",
            "",
            "```json",
            json.dumps(meta, indent=1, sort_keys=True, default=str)[:20000],
            "```",
            "",
            "</details>",
            "",
        ]
    return "\n".join(lines)


def _fmt_pct(v: Any) -> str:
    try:
        return f"{100 * float(v):.1f}%"
    except (TypeError, ValueError):
        return "?"


def diagnostics_markdown(runs: Sequence[Mapping[str, Any]]) -> str:
    lines = []
    for run in runs:
        if not run["diagnostics"]:
            continue
        if len(runs) > 1:
            lines += [f"**{run['dir'].name}**", ""]
        for d in run["diagnostics"]:
            trusted = ", ".join(d.get("trusted_modes", [])) or "none"
            lines.append(
                f"- `{d['model']}`: **{d['status']}** (gradient modes whose checks all pass: {trusted})"
            )
        lines.append("")
        rows = []
        for d in run["diagnostics"]:
            for c in d["checks"]:
                result = {True: "pass", False: "**FAIL**", None: "n/a"}[c["passed"]]
                numbers = "; ".join(f"{k}={_short(v)}" for k, v in c["numbers"].items())
                rows.append(
                    {
                        "model": d["model"],
                        "check": c["name"],
                        "grad mode": c["grad_mode"] or "all",
                        "result": result,
                        "numbers": numbers,
                        "meaning": c["meaning"],
                    }
                )
        lines += [md_table(pd.DataFrame(rows)), ""]
    if not lines:
        return "_no diagnostics in this run folder (run `finalize_run`)._"
    return "\n".join(lines)


def _short(v: Any) -> str:
    if isinstance(v, float):
        return "nan" if math.isnan(v) else f"{v:.3g}"
    return str(v)


def adaptive_markdown(runs: Sequence[Mapping[str, Any]], num_classes: int) -> str:
    lines = []
    low = [r["records"][r["records"]["family"] == "lowfreq-pgd"] for r in runs]
    if any(not lf.empty for lf in low):
        rows = []
        cumulative = False
        for run, lf in zip(runs, low):
            if lf.empty:
                continue
            for eps in threat_eps(lf, "Linf"):
                nums = claim_numbers(run["records"], threat="Linf", eps=eps)
                for _, r in nums.iterrows():
                    cumulative |= r["lowfreq_alone"] is False
                    rows.append(
                        {
                            "run": run["dir"].name,
                            "model": r["model"],
                            "Linf eps": eps,
                            "low-frequency PGD": _fmt_pct(r["lowfreq"]),
                            "white-box, exact gradients": _fmt_pct(r["wb_exact"]),
                            "worst case (all)": _fmt_pct(r["worst_case"]),
                        }
                    )
        table = pd.DataFrame(rows)
        if len(runs) == 1:
            table = table.drop(columns="run")
        lines += [
            "Low-frequency PGD: the perturbation is confined to the coarsest wavelet band (for db1 the "
            "2^L x 2^L block averages), where sparsification cannot remove it, under the same pixel budget"
            + (
                " (run, like every attack of this run, only on points the suite had not broken at that budget: "
                "its column counts on top of the suite)."
                if cumulative
                else "."
            ),
            "",
            md_table(table),
            "",
        ]
    energies = [r["energy"] for r in runs if not r["energy"].empty]
    if energies:
        summ = energy_summary(pd.concat(energies, ignore_index=True))
        lines += [
            "Energy removed by sparsification: the share of a perturbation's coefficient energy "
            "(||W(d) ⊙ (1 - mask(x+d))||² / ||W(d)||²) that the mask zeroes; `transmitted` = "
            "||S(x+d) - S(x)||² / ||W(d)||² (it can exceed 1 because the perturbation also flips which image "
            "coefficients are kept).",
            "",
            md_table(summ),
            "",
        ]
    return "\n".join(lines) if lines else "_no adaptive attacks in this run folder._"


def write_report(
    run_dirs: str | Path | Sequence[str | Path],
    out: str | Path | None = None,
    *,
    num_classes: int | None = None,
    baseline: str | None = None,
    figures: bool = True,
) -> Path:
    """Write the Markdown report for one run folder (``RUN/report.md``) or several (one per training seed,
    combined into mean ± sd; default ``out`` = ``report.md`` next to the first run folder)."""
    dirs = [Path(run_dirs)] if isinstance(run_dirs, str | Path) else [Path(d) for d in run_dirs]
    if not dirs:
        raise ValueError("give at least one run folder")
    runs = [load_run(d) for d in dirs]
    out = (
        Path(out)
        if out is not None
        else (dirs[0] / REPORT_FILE if len(dirs) == 1 else dirs[0].parent / REPORT_FILE)
    )
    out_dir = out.parent
    k = num_classes or _num_classes(runs)
    energy_by_model = _energy_means(runs)
    failures = _failures(runs)
    v = verdict(
        [r["records"] for r in runs],
        num_classes=k,
        baseline=baseline,
        energy=energy_by_model,
        diagnostics_failures=failures,
        seeds=[_seed_label(r, i) for i, r in enumerate(runs)],
    )
    atomic_write_json(out_dir / VERDICT_JSON if len(dirs) > 1 else dirs[0] / VERDICT_JSON, v.to_dict())
    fig_links: list[str] = []
    if figures:
        fig_links = _figures(runs, out_dir, k)
    models = list(dict.fromkeys(m for r in runs for m in r["records"]["model"].unique()))
    dataset = str(runs[0]["meta"].get("dataset", {}).get("name") or runs[0]["records"]["dataset"].iloc[0])
    now = datetime.now(timezone.utc).isoformat(timespec="seconds")
    parts = [
        f"# Robustness report: {', '.join(models)} on {dataset}",
        "",
        f"_robustbench_wave {__version__}, written {now}; {len(runs)} run folder(s)._",
        "",
        "## Verdict on the claim",
        "",
        "Claim under test (Zhu & Soricut 2024): the wavelet tokenizer makes ViTs *naturally resistant to "
        "adversarial attacks*. The fixed DWT passes input gradients through unchanged; only the "
        "sparsification "
        "mask is non-smooth, so robustness that appears only with blocked gradients is gradient masking "
        "(Athalye et al. 2018).",
        "",
        v.text,
        "",
        md_table(_verdict_numbers(v.numbers)),
        "",
        "## Robust accuracy",
        "",
        comparison_markdown(runs),
        "",
        "## Diagnostics (is the evaluation trustworthy?)",
        "",
        "Checklist after Carlini et al. 2019, Athalye et al. 2018 and Croce & Hein 2020; per gradient mode. "
        "A `blocked` mode is expected to fail: it is the seed's premise (no gradient), kept to show the "
        "masking.",
        "",
        diagnostics_markdown(runs),
        "",
        "## Adaptive attacks",
        "",
        adaptive_markdown(runs, k),
        "",
        "## Figures",
        "",
        *fig_links,
        "",
        "## Set-up and provenance",
        "",
        provenance_markdown(runs),
        "## Reproduce",
        "",
        *_commands(runs),
        "",
    ]
    path = atomic_write_text(out, "\n".join(parts))
    log.info("report written to %s", path)
    return path


def _seed_label(run: Mapping[str, Any], i: int) -> Any:
    seeds = {m.get("train_seed") for m in (run["meta"].get("models") or {}).values()}
    seeds.discard(None)
    return seeds.pop() if len(seeds) == 1 else i


def _energy_means(runs: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    energies = [r["energy"] for r in runs if not r["energy"].empty]
    if not energies:
        return {}
    return describe_energy(energy_summary(pd.concat(energies, ignore_index=True)))


def _failures(runs: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, list[str]]]:
    """model -> gradient mode ("all" for mode-free checks) -> failed checks, over all runs."""
    out: dict[str, dict[str, list[str]]] = {}
    for run in runs:
        for d in run["diagnostics"]:
            for c in d["checks"]:
                if c["passed"] is False:
                    out.setdefault(d["model"], {}).setdefault(c["grad_mode"] or "all", []).append(c["name"])
    return out


_PERCENT_COLUMNS = (
    "clean", "wb_exact", "wb_blocked", "wb_bpda", "gradient_free", "transfer", "lowfreq", "noise", "worst_case",
)  # fmt: skip


def _verdict_numbers(numbers: pd.DataFrame) -> pd.DataFrame:
    if numbers.empty:
        return numbers
    shown = ("model", "seed", "threat", "eps", "n", *_PERCENT_COLUMNS)
    df = numbers[[c for c in shown if c in numbers.columns]].copy()
    for c in _PERCENT_COLUMNS:
        if c in df:
            df[c] = [
                _fmt_pct(v) if v is not None and not (isinstance(v, float) and math.isnan(v)) else "--"
                for v in df[c]
            ]
    if df["seed"].nunique() <= 1:
        df = df.drop(columns="seed")
    return df


def _figures(runs: Sequence[Mapping[str, Any]], out_dir: Path, num_classes: int) -> list[str]:
    curves = [accuracy_curves(r["records"]) for r in runs]
    if len(runs) == 1:
        c, band = curves[0], "95% Wilson CI"
    else:
        c, band = combine_seeds(curves), "± 1 sd over seeds"
    histories: dict[str, dict[str, list[float]]] = {}
    for d in runs[0]["diagnostics"]:
        histories[d["model"]] = d.get("histories", {})
    energy = pd.concat(
        [r["energy"] for r in runs if not r["energy"].empty] or [pd.DataFrame()], ignore_index=True
    )
    paths = write_figures(
        out_dir, curves=c, histories=histories, energy=energy, chance=1.0 / num_classes, band_label=band
    )
    links = []
    captions = {
        "accuracy": "Worst-case robust accuracy against ε",
        "loss": "PGD loss per step (diagnostics subset)",
        "energy": "Share of perturbation energy removed by sparsification",
    }
    for kind, items in paths.items():
        for p in items:
            rel = p.relative_to(out_dir).as_posix()
            links += [f"**{captions[kind]}** (`{p.stem}`)", "", f"![{p.stem}]({rel})", ""]
    return links or ["_no figures._"]


def _commands(runs: Sequence[Mapping[str, Any]]) -> list[str]:
    out = []
    for run in runs:
        cmd = (run["meta"].get("run") or {}).get("command")
        if cmd:
            out += [
                "```bash",
                f"python -m robustbench_wave.attack {cmd.split(' ', 1)[1] if ' ' in cmd else ''}".strip(),
                "```",
            ]
    out += [
        "Rebuild this report from the saved files (no attacks are re-run):",
        "",
        "```bash",
        "python -m robustbench_wave.report_md " + " ".join(str(r["dir"]) for r in runs),
        "```",
    ]
    return out


# --------------------------------------------------------------------------------------------------------
# CLI
# --------------------------------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m robustbench_wave.report_md",
        description="Write the Markdown report of one or several attack run folders (several = training "
        "seeds, "
        "combined into mean ± sd). Nothing is re-run: diagnostics come from finalize_run's files.",
    )
    p.add_argument("run_dirs", nargs="+", type=Path, help="run folder(s) with records.csv.gz and meta.json")
    p.add_argument("--out", type=Path, default=None, help="report path (default RUN/report.md)")
    p.add_argument(
        "--baseline", default=None, help="model to compare against (default: models without grad modes)"
    )
    p.add_argument("--no-figures", dest="figures", action="store_false", help="skip the PNG figures")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    try:
        path = write_report(args.run_dirs, args.out, baseline=args.baseline, figures=args.figures)
    except ValueError as err:
        raise SystemExit(str(err)) from None
    sys.stdout.write(f"report: {path}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
