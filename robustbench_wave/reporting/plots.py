"""Figures of the report: accuracy-vs-eps curves, attack-loss curves, energy removed by sparsification, and
accuracy against the severity of common corruptions (when the records hold them).

Carlini et al. 2019 ask for accuracy plotted against the budget (it must fall monotonically, to chance at
large eps) and for the attack's convergence; the energy plot tests the mechanism claimed by the source paper
(Zhu & Soricut 2024) directly. The numbers come from :mod:`robustbench_wave.reporting.tables` summaries (one
run, or mean ± sd over training seeds) and from the files ``measure_run`` left in the run folders.
matplotlib's object API with the Agg canvas is used (no pyplot, no global backend switch), and every PNG is
written atomically.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from robustbench_wave.attacks.corruptions import corruption_group, list_corruptions
from robustbench_wave.core.io import atomic_write
from robustbench_wave.evaluation.metrics import (
    CLEAN_THREAT,
    WORST,
    WORST_MODE,
    corruption_accuracy,
    summarize,
)
from robustbench_wave.models.frontend import GradMode
from robustbench_wave.reporting.runs import FIGURES_DIR, RunFolder, combined_energy
from robustbench_wave.reporting.tables import seed_summary

log = logging.getLogger(__name__)

MODE_STYLE = {
    GradMode.EXACT.value: "-",
    GradMode.BLOCKED.value: ":",
    GradMode.BPDA.value: "--",
    WORST_MODE: "-.",
}
#: A marker per gradient mode as well as a line style: two modes whose curves coincide stay distinguishable.
MODE_MARKER = {
    GradMode.EXACT.value: "o",
    GradMode.BLOCKED.value: "s",
    GradMode.BPDA.value: "^",
    WORST_MODE: "D",
}
CAPTIONS = {
    "accuracy": "Worst-case robust accuracy against ε",
    "loss": "PGD loss per step (diagnostics subset)",
    "energy": "Share of perturbation energy removed by sparsification",
    "corruptions": "Accuracy under common corruptions against severity (0 = clean)",
}


def _save(fig: Figure, path: Path) -> Path:
    FigureCanvasAgg(fig)
    fig.tight_layout()
    return atomic_write(path, lambda tmp: fig.savefig(tmp, format="png", dpi=110))


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-") or "x"


def accuracy_curves(summary: pd.DataFrame) -> pd.DataFrame:
    """Worst-case robust accuracy per (model, grad_mode, threat, eps) with its band, including eps = 0 (clean
    accuracy), from a :func:`~robustbench_wave.evaluation.metrics.summarize` or ``seed_summary`` table."""
    worst = summary[summary["attack"] == WORST]
    clean = summary[summary["threat"] == CLEAN_THREAT]
    frames = [worst]
    for threat in worst["threat"].unique():
        frames.append(clean.assign(threat=threat, eps=0.0))
    cols = ["model", "grad_mode", "threat", "eps", "robust_accuracy", "ci_low", "ci_high"]
    out = pd.concat(frames, ignore_index=True)[cols]
    return out.sort_values(["model", "grad_mode", "threat", "eps"]).reset_index(drop=True)


def plot_accuracy_vs_eps(
    curves: pd.DataFrame,
    out_dir: str | Path,
    *,
    chance: float | None = None,
    band_label: str = "95% Wilson CI",
) -> list[Path]:
    """One PNG per threat model: worst-case robust accuracy against eps, one line per model and grad mode."""
    out_dir = Path(out_dir)
    paths = []
    for threat, grp in curves.groupby("threat", sort=False):
        fig = accuracy_figure(grp, str(threat), line_colors(curves), chance=chance, band_label=band_label)
        paths.append(_save(fig, out_dir / f"accuracy_vs_eps_{_slug(str(threat))}.png"))
    return paths


def line_colors(curves: pd.DataFrame) -> dict[tuple[str, str], str]:
    """One colour per (model, grad mode), the same in every threat's figure."""
    lines = dict.fromkeys(zip(curves["model"], curves["grad_mode"], strict=True))
    return {key: f"C{i % 10}" for i, key in enumerate(lines)}


def accuracy_figure(
    curves: pd.DataFrame,
    threat: str,
    colors: Mapping[tuple[str, str], str],
    *,
    chance: float | None = None,
    band_label: str = "95% Wilson CI",
) -> Figure:
    """One threat's accuracy-vs-eps figure: each (model, mode) its colour, line style and marker; the worst
    case drawn wide and pale underneath, so a mode whose curve equals it stays visible on top."""
    fig = Figure(figsize=(6.4, 4.2))
    ax = fig.add_subplot()
    for (model, mode), line in curves.groupby(["model", "grad_mode"], sort=False):
        line, color, worst = line.sort_values("eps"), colors[(model, mode)], mode == WORST_MODE
        ax.plot(
            line["eps"], line["robust_accuracy"], MODE_STYLE.get(str(mode), "-"), color=color,
            lw=3.2 if worst else 1.6, alpha=0.55 if worst else 1.0, zorder=1 if worst else 2,
            marker=MODE_MARKER.get(str(mode), "o"), ms=6 if worst else 4, label=f"{model} / {mode}",
        )  # fmt: skip
        ax.fill_between(line["eps"], line["ci_low"], line["ci_high"], color=color, alpha=0.10)
    if chance is not None:
        ax.axhline(chance, color="grey", lw=0.8, ls=":", label="chance")
    ax.set_xlabel(f"{threat} budget ε (pixel units)")
    ax.set_ylabel("robust accuracy (worst case over attacks)")
    ax.set_ylim(-0.02, 1.02)
    ax.set_title(f"Accuracy vs ε — {threat} (bands: {band_label})", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="best")
    return fig


def corruption_curves(records: Sequence[pd.DataFrame]) -> pd.DataFrame:
    """Accuracy per (model, grad_mode, corruption, severity) of one run (bands: Wilson intervals) or the mean
    over several runs (training seeds; bands: mean ± sd); empty without corruption rows."""
    tables = [t for t in (corruption_accuracy(r) for r in records) if not t.empty]
    if len(tables) <= 1:
        return tables[0] if tables else pd.DataFrame()
    keys = ["model", "grad_mode", "corruption", "severity"]
    stats = pd.concat(tables).groupby(keys, sort=False)["accuracy"].agg(["mean", "std"]).reset_index()
    spread = stats["std"].fillna(0.0)
    return stats.assign(
        accuracy=stats["mean"],
        ci_low=(stats["mean"] - spread).clip(0, 1),
        ci_high=(stats["mean"] + spread).clip(0, 1),
    )


def _corruption_order(names: Sequence[str]) -> list[str]:
    """Hendrycks' order: the known corruptions by category, then any others as they come."""
    known = [c for c in list_corruptions() if c in names]
    return known + [n for n in names if n not in known]


def _group(name: str) -> str:
    return corruption_group(name) if name in list_corruptions() else "other"


def plot_corruptions(
    curves: pd.DataFrame, path: str | Path, *, chance: float | None = None, band_label: str = "95% Wilson CI"
) -> Path | None:
    """Accuracy against severity (0 = clean), one panel per corruption in Hendrycks' category order (noise,
    blur, weather, digital), one line per model (and gradient mode) side by side, with bands."""
    if curves is None or curves.empty:
        return None
    names = _corruption_order(list(dict.fromkeys(curves["corruption"])))
    cols = min(4, len(names))
    rows = -(-len(names) // cols)
    fig = Figure(figsize=(3.0 * cols, 2.5 * rows + 0.6))
    lines = list(dict.fromkeys(zip(curves["model"], curves["grad_mode"])))
    colors = {line: f"C{i % 10}" for i, line in enumerate(lines)}
    for i, name in enumerate(names):
        ax = fig.add_subplot(rows, cols, i + 1)
        sub = curves[curves["corruption"] == name]
        for (model, mode), line in sub.groupby(["model", "grad_mode"], sort=False):
            line = line.sort_values("severity")
            color = colors[(model, mode)]
            label = model if len({m for m, _ in lines}) == len(lines) else f"{model} / {mode}"
            ax.plot(
                line["severity"], line["accuracy"], "-", color=color, marker="o", ms=3, lw=1.5, label=label
            )
            ax.fill_between(line["severity"], line["ci_low"], line["ci_high"], color=color, alpha=0.12)
        if chance is not None:
            ax.axhline(chance, color="grey", lw=0.8, ls=":")
        ax.set_title(f"{_group(name)}: {name}", fontsize=9)
        ax.set_ylim(-0.02, 1.02)
        ax.set_xticks(range(0, 6))
        ax.grid(alpha=0.3)
        if i % cols == 0:
            ax.set_ylabel("accuracy")
        if i >= len(names) - cols:
            ax.set_xlabel("severity")
        if i == 0:
            ax.legend(fontsize=7, loc="lower left")
    fig.suptitle(f"Common corruptions (Hendrycks & Dietterich 2019); bands: {band_label}", fontsize=10)
    return _save(fig, Path(path))


def plot_loss_curves(histories: Mapping[str, Mapping[str, Sequence[float]]], path: str | Path) -> Path | None:
    """Attack loss (mean CE per PGD step) per model; one panel per model; labels ``mode:run`` get a line
    style per gradient mode and a colour per run (base / more steps / more restarts)."""
    histories = {m: h for m, h in histories.items() if h}
    if not histories:
        return None
    fig = Figure(figsize=(4.2 * len(histories), 3.6))
    for i, (model, curves) in enumerate(histories.items()):
        ax = fig.add_subplot(1, len(histories), i + 1)
        runs = list(dict.fromkeys(label.split(":")[-1] for label in curves))
        for label, values in curves.items():
            mode, run = label.split(":", 1) if ":" in label else ("", label)
            color = f"C{runs.index(run) % 10}" if run in runs else "C0"
            ax.plot(
                np.arange(1, len(values) + 1),
                values,
                MODE_STYLE.get(mode, "-"),
                color=color,
                lw=1.3,
                label=label,
            )
        ax.set_title(str(model), fontsize=10)
        ax.set_xlabel("PGD step")
        ax.set_ylabel("mean cross-entropy")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    return _save(fig, Path(path))


def plot_energy_removed(energy: pd.DataFrame, path: str | Path) -> Path | None:
    """Box plot of the share of perturbation energy sparsification removes, per model and perturbation."""
    if energy is None or energy.empty:
        return None
    models = list(dict.fromkeys(energy["model"]))
    kinds = list(dict.fromkeys(energy["perturbation"]))
    fig = Figure(figsize=(max(5.0, 1.1 * len(kinds) * len(models) + 1.5), 4.0))
    ax = fig.add_subplot()
    data, positions, colors, ticks, labels = [], [], [], [], []
    for mi, model in enumerate(models):
        for ki, kind in enumerate(kinds):
            vals = energy.loc[(energy["model"] == model) & (energy["perturbation"] == kind), "energy_removed"]
            if vals.empty:
                continue
            pos = mi * (len(kinds) + 1) + ki
            data.append(vals.to_numpy())
            positions.append(pos)
            colors.append(f"C{ki % 10}")
            ticks.append(pos)
            labels.append(f"{kind}\n{model}" if len(models) > 1 else kind)
    parts = ax.boxplot(data, positions=positions, widths=0.7, patch_artist=True)
    for patch, color in zip(parts["boxes"], colors):
        patch.set_facecolor(color)
        patch.set_alpha(0.5)
    ax.set_xticks(ticks)
    ax.set_xticklabels(labels, fontsize=7)
    ax.set_ylim(-0.02, 1.02)
    ax.set_ylabel("share of coefficient energy removed")
    ax.set_title("Energy of the perturbation removed by sparsification", fontsize=10)
    ax.grid(alpha=0.3, axis="y")
    return _save(fig, Path(path))


def write_figures(
    out_dir: str | Path,
    *,
    curves: pd.DataFrame | None = None,
    histories: Mapping[str, Mapping[str, Sequence[float]]] | None = None,
    energy: pd.DataFrame | None = None,
    chance: float | None = None,
    band_label: str = "95% Wilson CI",
    corruptions: pd.DataFrame | None = None,
) -> dict[str, list[Path]]:
    """All figures into ``out_dir/figures``; returns their paths by kind."""
    fig_dir = Path(out_dir) / FIGURES_DIR
    out: dict[str, list[Path]] = {"accuracy": [], "loss": [], "energy": []}
    if corruptions is not None and not corruptions.empty:
        p = plot_corruptions(corruptions, fig_dir / "corruptions.png", chance=chance, band_label=band_label)
        out["corruptions"] = [p] if p else []
    if curves is not None and not curves.empty:
        out["accuracy"] = plot_accuracy_vs_eps(curves, fig_dir, chance=chance, band_label=band_label)
    if histories:
        p = plot_loss_curves(histories, fig_dir / "attack_loss.png")
        out["loss"] = [p] if p else []
    if energy is not None and not energy.empty:
        p = plot_energy_removed(energy, fig_dir / "energy_removed.png")
        out["energy"] = [p] if p else []
    log.info("figures written to %s", fig_dir)
    return out


def run_figures(runs: Sequence[RunFolder], out_dir: str | Path, *, chance: float) -> dict[str, list[Path]]:
    """The report's figures for one run (bands: Wilson intervals) or several training seeds (mean ± sd);
    loss curves come from the first run's diagnostics, energy from every run's ``energy.csv``."""
    summaries = [summarize(r.records) for r in runs]
    if len(runs) == 1:
        curves, band = accuracy_curves(summaries[0]), "95% Wilson CI"
    else:
        curves, band = accuracy_curves(seed_summary(summaries)), "± 1 sd over seeds"
    histories = {d["model"]: d.get("histories", {}) for d in runs[0].diagnostics}
    energy = combined_energy(runs)
    corruptions = corruption_curves([r.records for r in runs])
    return write_figures(
        out_dir, curves=curves, histories=histories, energy=energy, chance=chance, band_label=band,
        corruptions=corruptions,
    )  # fmt: skip


def plot_pareto(points: pd.DataFrame, path: str | Path, *, title: str = "") -> Path | None:
    """Accuracy against GMACs per image, one line per Token Pooling method (its budgets, cheapest first),
    the points on the joint Pareto front circled: the trade-off claimed by Marin et al. (WACV 2023).

    ``points``: columns method, gmacs, accuracy (and optionally acc_sd, pareto), e.g.
    :func:`robustbench_wave.analysis.claim_rules.tokenpool_points`.
    """
    if points.empty:
        return None
    fig = Figure(figsize=(6.4, 4.2))
    ax = fig.add_subplot()
    for i, (method, line) in enumerate(points.groupby("method", sort=True)):
        line = line.sort_values("gmacs")
        sd = line["acc_sd"].fillna(0.0) if "acc_sd" in line else None
        ax.errorbar(
            line["gmacs"], line["accuracy"], yerr=sd, color=f"C{i % 10}", marker="o", ms=4, lw=1.4,
            capsize=2, label=str(method),
        )  # fmt: skip
    if "pareto" in points:
        front = points[points["pareto"].astype(bool)]
        ax.scatter(front["gmacs"], front["accuracy"], s=120, facecolors="none", edgecolors="black", lw=1.0,
                   label="Pareto front")  # fmt: skip
    ax.set_xlabel("GMACs per image (analytic, pooling included)")
    ax.set_ylabel("test top-1 accuracy")
    ax.set_title(title or "Token Pooling: accuracy against compute", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="best")
    return _save(fig, Path(path))
