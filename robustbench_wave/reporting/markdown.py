"""The run's Markdown report (readable on GitHub): one function per section, and :func:`write_report`.

The report of one run folder, or of several (training seeds, combined into mean ± standard deviation), is
rebuilt from the saved files alone (:mod:`robustbench_wave.reporting.runs`): records, provenance, and the
diagnostics and energy measurements ``measure_run`` added. Sections: the verdict on the claim of the source
paper (Zhu & Soricut 2024), robust accuracy, the gradient-masking diagnostics (Carlini et al. 2019; Athalye
et al. 2018; Croce & Hein 2020), adaptive attacks (the low-frequency attack's rows of the records and the
energy sparsification removes), figures, provenance and the commands that reproduce it. To add a section,
write a function returning its Markdown and list it in :func:`render_report`.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pandas as pd

from robustbench_wave import __version__
from robustbench_wave.analysis.checks.compare import self_transfer_models
from robustbench_wave.analysis.diagnostics import format_numbers
from robustbench_wave.analysis.energy import describe_energy, energy_summary
from robustbench_wave.analysis.formatting import DASH, percent
from robustbench_wave.analysis.verdict import claim_numbers
from robustbench_wave.attacks import Trait, families_with
from robustbench_wave.core.io import atomic_write_json, atomic_write_text
from robustbench_wave.evaluation.metrics import declared_reference, default_baseline, summarize, threat_eps
from robustbench_wave.evaluation.trust import Marks
from robustbench_wave.models.frontend import GradMode
from robustbench_wave.reporting.model_section import external_models, has_wavelet_model, models_markdown
from robustbench_wave.reporting.plots import CAPTIONS, corruption_curves, run_figures
from robustbench_wave.reporting.runs import (
    VERDICT_JSON,
    RunFolder,
    class_count,
    combined_energy,
    load_run,
    report_path,
    run_trust,
)
from robustbench_wave.reporting.tables import (
    MARK_LEGEND,
    by_column,
    corruption_table,
    formatted_table,
    markdown_table,
    seed_summary,
    with_marks,
)
from robustbench_wave.reporting.verdict_text import Verdict, verdict

log = logging.getLogger(__name__)

#: The command that rebuilds a report, as the report prints it.
REPORT_COMMAND = "python -m robustbench_wave.report"
_CHECK_RESULT = {True: "pass", False: "**FAIL**", None: "n/a"}
_PERCENT_COLUMNS = (
    "clean", *(f"wb_{m.value}" for m in GradMode), "gradient_free", "transfer", "lowfreq", "noise", "worst_case",
)  # fmt: skip


# --------------------------------------------------------------------------------------------------------
# the report
# --------------------------------------------------------------------------------------------------------
def write_report(
    runs: str | Path | RunFolder | Sequence[str | Path | RunFolder],
    out: str | Path | None = None,
    *,
    num_classes: int | None = None,
    baseline: str | None = None,
    figures: bool = True,
) -> Path:
    """Write the report of one run folder or several (training seeds); returns its path.

    ``out`` is the report file (a path ending in ``.md``) or a folder for ``report.md``; by default
    ``RUN/report.md`` for one run and ``report.md`` next to the first run for several. ``verdict.json`` and
    ``figures/`` go into the report's folder. ``baseline`` names the model to compare against (default:
    the models without gradient modes).
    """
    items = [runs] if isinstance(runs, str | Path | RunFolder) else list(runs)
    loaded = [r if isinstance(r, RunFolder) else load_run(r) for r in items]
    path = report_path([r.path for r in loaded], out)
    k = num_classes or class_count(loaded)
    v = run_verdict(loaded, num_classes=k, baseline=baseline)
    atomic_write_json(path.parent / VERDICT_JSON, v.to_dict())
    figure_paths = run_figures(loaded, path.parent, chance=1.0 / k) if figures else {}
    text = render_report(
        loaded, v, figures_markdown(figure_paths, path.parent), baseline=baseline, report_dir=path.parent
    )
    atomic_write_text(path, text)
    log.info("report written to %s", path)
    return path


def render_report(
    runs: Sequence[RunFolder],
    v: Verdict,
    figures: str,
    *,
    baseline: str | None = None,
    report_dir: Path | None = None,
) -> str:
    """The whole report: a title, then one ``##`` section per part. Models from outside the zoo come first
    (:mod:`.model_section`: what the user brought, on the first screen); the source paper's wavelet claim is
    worded only when a wavelet model is in the run; common corruptions only when the records hold them (their
    CEs relative to ``baseline``, default the ``patch`` model, else the first). ``report_dir``: where the
    report goes, so links to each run's meta.json resolve."""
    models = list(dict.fromkeys(m for r in runs for m in r.records["model"].unique()))
    first = runs[0]
    dataset = str(first.dataset.name or first.records["dataset"].iloc[0])
    now = datetime.now(timezone.utc).isoformat(timespec="seconds")
    external = external_models(runs)
    wavelet = has_wavelet_model(runs)
    sections = {
        ("Your model" if len(external) == 1 else "Your models"): models_markdown(
            runs, v.text, baseline or run_baseline(runs), run_trust(runs).marks
        ),
        ("Verdict on the claim" if wavelet else "Verdict"): verdict_markdown(v, wavelet_claim=wavelet),
        "Robust accuracy": comparison_markdown(runs),
        CORRUPTIONS_TITLE: corruptions_markdown(runs, baseline),
        "Diagnostics (is the evaluation trustworthy?)": diagnostics_markdown(runs),
        "Adaptive attacks": adaptive_markdown(runs),
        "Figures": figures,
        "Set-up and provenance": provenance_markdown(runs, report_dir),
        "Reproduce": commands_markdown(runs),
    }
    parts = [
        f"# Robustness report: {', '.join(models)} on {dataset}",
        f"_robustbench_wave {__version__}, written {now}; {len(runs)} run folder(s)._",
    ]
    optional = (CORRUPTIONS_TITLE, "Your model", "Your models")  # sections left out when they have nothing
    sections = {title: body for title, body in sections.items() if body or title not in optional}
    parts += [f"## {title}\n\n{body.rstrip()}" for title, body in sections.items()]
    return "\n\n".join(parts) + "\n"


# --------------------------------------------------------------------------------------------------------
# verdict
# --------------------------------------------------------------------------------------------------------
def run_verdict(runs: Sequence[RunFolder], *, num_classes: int, baseline: str | None = None) -> Verdict:
    """The verdict over every run (one per training seed), with their energy, diagnostics failures and marked
    cells; ``baseline`` defaults to the one the attack command was given (``--baseline``, its config.json)."""
    energy = combined_energy(runs)
    return verdict(
        [r.records for r in runs],
        num_classes=num_classes,
        eps=declared_reference(runs[0].meta) or None,  # the suite's reference; None: the middle of the grid
        baseline=baseline or run_baseline(runs),
        energy=describe_energy(energy_summary(energy)) if not energy.empty else {},
        diagnostics_failures=diagnostics_failures(runs),
        seeds=[i if r.train_seed is None else r.train_seed for i, r in enumerate(runs)],
        self_transfer=self_transfer(runs),
        trust=run_trust(runs),
    )


def table_marks(run: RunFolder) -> Marks | None:
    """The marks of one run's tables (:func:`~robustbench_wave.reporting.tables.write_tables`): its upper
    bounds (None without any: the tables as before)."""
    return dict(run_trust([run]).marks) or None


def run_baseline(runs: Sequence[RunFolder]) -> str | None:
    """The baseline the attack command was given (``--baseline``: config.json's ``baseline``, as a record
    name), when every run names the same one and it has records in each."""
    names = {r.invocation.baseline for r in runs}
    if len(names) != 1 or None in names:
        return None
    name = str(names.pop())
    return name if all(name in set(r.records["model"]) for r in runs) else None


def self_transfer(runs: Sequence[RunFolder]) -> set[str]:
    """Models whose transfer attacks were crafted on themselves in any of these runs (their meta.json)."""
    return {m for r in runs for m in self_transfer_models(r.meta)}


def diagnostics_failures(runs: Sequence[RunFolder]) -> dict[str, dict[str, list[str]]]:
    """model -> gradient mode ("all" for mode-free checks) -> failed checks, each once, over all runs (the
    models with a failure; :attr:`Trust.failures <robustbench_wave.evaluation.trust.Trust.failures>`)."""
    failures = run_trust(runs).failures
    return {m: {mode: list(names) for mode, names in f.items()} for m, f in failures.items() if f}


WAVELET_CLAIM = (
    "Claim under test (Zhu & Soricut 2024): the wavelet tokenizer makes ViTs *naturally resistant to "
    "adversarial attacks*. The fixed DWT passes input gradients through unchanged; only the "
    "sparsification mask is non-smooth, so robustness that appears only with blocked gradients is "
    "gradient masking (Athalye et al. 2018)."
)
DEFENCE_CLAIM = (
    "Claim under test: each candidate is more robust than the baseline (the undefended model, or the models "
    "without gradient modes) under attacks that adapt to it -- BPDA through operations that cut the "
    "gradient, EOT over its randomness, gradient-free and transfer attacks (Athalye, Carlini & Wagner 2018)."
)


def verdict_markdown(v: Verdict, *, wavelet_claim: bool = True) -> str:
    """The claim under test (the source paper's when a wavelet model is in the run), the verdict's text and
    its numbers."""
    claim = WAVELET_CLAIM if wavelet_claim else DEFENCE_CLAIM
    table = _verdict_numbers(v.numbers)
    parts = [claim, v.text, markdown_table(table)]
    if table.map(lambda c: isinstance(c, str) and (CUMULATIVE_MARK in c or RESTART_MARK in c)).any().any():
        parts.append(NUMBERS_NOTE)
    return "\n\n".join(parts)


CUMULATIVE_MARK = " (cum.)"
RESTART_MARK = " (white-box restart)"
NUMBERS_NOTE = (
    f"_{CUMULATIVE_MARK.strip()}: cumulative — the attack ran only on points the attacks before it had not "
    "broken (skip-broken), so the number is the worst case up to that attack, not the attack's own. "
    f"{RESTART_MARK.strip()}: a transfer attack crafted on the model itself, i.e. more white-box restarts._"
)


def _verdict_numbers(numbers: pd.DataFrame) -> pd.DataFrame:
    """The verdict's numbers as percentages, cumulative cells and self-transfer cells marked."""
    if numbers.empty:
        return numbers
    shown = ("model", "seed", "threat", "eps", "n", *_PERCENT_COLUMNS)
    df = numbers[[c for c in shown if c in numbers.columns]].copy()
    for c in _PERCENT_COLUMNS:
        if c in df:
            df[c] = [percent(v, missing=DASH) for v in df[c]]
    cumulative = numbers.get("cumulative", pd.Series("", index=numbers.index)).fillna("")
    restart = numbers.get("self_transfer", pd.Series(False, index=numbers.index)).fillna(False)
    for c in ("gradient_free", "transfer", "noise"):
        if c not in df:
            continue
        marks = [
            (RESTART_MARK if c == "transfer" and bool(r) else "")
            + (CUMULATIVE_MARK if c in str(k).split(",") else "")
            for k, r in zip(cumulative, restart)
        ]
        df[c] = [v + m if v != DASH else v for v, m in zip(df[c], marks)]
    if df["seed"].nunique() <= 1:
        df = df.drop(columns="seed")
    return df


# --------------------------------------------------------------------------------------------------------
# robust accuracy
# --------------------------------------------------------------------------------------------------------
def comparison_markdown(runs: Sequence[RunFolder]) -> str:
    """Rows (threat, attack, eps), columns model / mode: robust accuracy % ± CI half-width (one run), or
    mean ± sd over runs (several training seeds)."""
    summaries = [summarize(r.records) for r in runs]
    if len(runs) == 1:
        marks = table_marks(runs[0])
        table = formatted_table(with_marks(summaries[0], marks) if marks else summaries[0])
        note = (
            "cells: robust accuracy % ± half-width of the 95% Wilson interval; `worst-case` = per-example AND"
        )
        note += f"; {MARK_LEGEND}" if marks else ""
    else:
        table = formatted_table(seed_summary(summaries))
        note = f"cells: mean ± sd of robust accuracy % over {len(runs)} runs (training seeds)"
    wide = by_column(table, sep=" / ").reset_index()
    parts = [
        markdown_table(wide),
        f"_{note}; attack columns follow the suite's bookkeeping (see meta.json)._",
    ]
    parts += [f"Transfer surrogate: {choice}." for choice in surrogate_choices(runs)]
    lines = not_as_written(runs)
    if lines:
        parts += ["Suite entries not run as written:", "\n".join(lines)]
    return "\n\n".join(parts)


def not_as_written(runs: Sequence[RunFolder]) -> list[str]:
    """One line per suite entry that did not run as its suite wrote it, from meta.json: skipped for every
    model (``attacks.*.skipped``), skipped on or resolved for one model (its ``plan``), each once."""
    lines: list[str] = []
    for run in runs:
        for entry in run.attacks.values():
            if entry.skipped:
                lines.append(f"- `{entry.name}`: skipped for every model ({entry.skipped})")
        for m in run.models.values():
            model, plan = m.name, m.plan
            lines += [
                f"- `{a}` on `{model}`: skipped ({why})" for a, why in plan.get("not_applicable", {}).items()
            ]
            lines += [f"- `{a}` on `{model}`: {how}" for a, how in plan.get("resolved", {}).items()]
    return list(dict.fromkeys(lines))


def surrogate_choices(runs: Sequence[RunFolder]) -> list[str]:
    """How ``--surrogate auto`` chose the transfer surrogate (meta.json, each model's entry), each once."""
    notes = (m.surrogate_choice for r in runs for m in r.models.values())
    return list(dict.fromkeys(n for n in notes if n))


# --------------------------------------------------------------------------------------------------------
# common corruptions
# --------------------------------------------------------------------------------------------------------
CORRUPTIONS_TITLE = "Common corruptions (average case)"


def corruptions_markdown(runs: Sequence[RunFolder], baseline: str | None = None) -> str:
    """Accuracy under each corruption (mean over severities 1-5), mean corruption accuracy, mCE and relative
    mCE per model, then the full table per severity; mean over runs for several. Empty without corruptions."""
    tables = [t for t in (corruption_table(r.records, baseline) for r in runs) if not t.empty]
    if not tables:
        return ""
    table = pd.concat(tables).groupby(level=[0, 1], sort=False).mean() if len(tables) > 1 else tables[0]
    models = list(dict.fromkeys(table.index.get_level_values(0)))
    base = baseline if baseline in models else default_baseline(models)
    cells = table.map(lambda v: percent(v, missing=DASH))
    cells.index = [f"{m} / {g}" for m, g in cells.index]
    curves = corruption_curves([r.records for r in runs])
    wide = curves.assign(acc=curves["accuracy"].map(lambda v: percent(v, missing=DASH))).pivot_table(
        index=["corruption", "severity"],
        columns=["model", "grad_mode"],
        values="acc",
        aggfunc="first",
        sort=False,
    )
    wide.columns = [f"{m} / {g}" for m, g in wide.columns]
    text = (
        "Common corruptions (Hendrycks & Dietterich 2019), generated from the attack seed with the CIFAR-10-C "
        "severity parameters: accuracy over every example, averaged over severities 1-5 (`clean` = severity "
        f"0); mCE = mean over corruptions of sum_s err(model) / sum_s err({base}), relative mCE the same for "
        "the errors beyond each model's clean error (100% = as bad as the baseline). An average-case axis: "
        "these rows never enter the worst-case robust accuracy."
    )
    if len(tables) > 1:
        text += f" Mean over {len(tables)} runs."
    return "\n\n".join(
        [
            text,
            markdown_table(cells.T.reset_index(names="")),
            _details("accuracy per corruption and severity", markdown_table(wide.reset_index())),
        ]
    )


# --------------------------------------------------------------------------------------------------------
# diagnostics
# --------------------------------------------------------------------------------------------------------
def diagnostics_markdown(runs: Sequence[RunFolder]) -> str:
    """Per run: each model's status, then the table of checks."""
    intro = (
        "Checklist after Carlini et al. 2019, Athalye et al. 2018 and Croce & Hein 2020; per gradient mode. "
        "A `blocked` mode is expected to fail: it is the source paper's premise (no gradient), kept to show "
        "the masking."
    )
    blocks = []
    for run in runs:
        if not run.diagnostics:
            continue
        if len(runs) > 1:
            blocks.append(f"**{run.path.name}**")
        status = []
        for d in run.diagnostics:
            held = set(run.records.loc[run.records["model"] == d["model"], "grad_mode"])
            # only modes with records: a folder's diagnostics.json may judge a mode no attack ran under
            trusted = ", ".join(m for m in d.get("trusted_modes", []) if m in held) or "none"
            status.append(
                f"- `{d['model']}`: **{d['status']}** (gradient modes whose checks all pass: {trusted})"
            )
        blocks += ["\n".join(status), markdown_table(_checks_table(run.diagnostics))]
    if not blocks:
        return "_no diagnostics in this run folder (run `measure_run`)._"
    return "\n\n".join([intro, *blocks])


def _checks_table(diagnostics: Sequence[Mapping[str, Any]]) -> pd.DataFrame:
    rows = [
        {
            "model": d["model"],
            "check": c["name"],
            "grad mode": c["grad_mode"] or "all",
            "result": _CHECK_RESULT[c["passed"]],
            "numbers": format_numbers(c["numbers"]),
            "meaning": c["meaning"],
        }
        for d in diagnostics
        for c in d["checks"]
    ]
    return pd.DataFrame(rows)


# --------------------------------------------------------------------------------------------------------
# adaptive attacks
# --------------------------------------------------------------------------------------------------------
def adaptive_markdown(runs: Sequence[RunFolder]) -> str:
    """The low-frequency attack (its rows of the records) and the energy sparsification removes."""
    blocks = [b for b in (lowfreq_markdown(runs), energy_markdown(runs)) if b]
    return "\n\n".join(blocks) if blocks else "_no adaptive attacks in this run folder._"


def lowfreq_markdown(runs: Sequence[RunFolder]) -> str:
    """Per model and budget of the low-frequency entries: their accuracy next to exact-gradient PGD and the
    worst case; empty when no run has low-frequency rows."""
    rows: list[dict[str, Any]] = []
    cumulative = False
    for run in runs:
        for numbers in _lowfreq_numbers(run.records):
            cumulative |= numbers["lowfreq_alone"] is False
            rows.append(
                {
                    "run": run.path.name,
                    "model": numbers["model"],
                    "threat": numbers["threat"],
                    "eps": numbers["eps"],
                    "low-frequency PGD": percent(numbers["lowfreq"], missing=DASH),
                    "white-box, exact gradients": percent(
                        numbers[f"wb_{GradMode.EXACT.value}"], missing=DASH
                    ),
                    "worst case (all)": percent(numbers["worst_case"], missing=DASH),
                }
            )
    if not rows:
        return ""
    table = pd.DataFrame(rows)
    if len(runs) == 1:
        table = table.drop(columns="run")
    text = (
        "Low-frequency PGD: the perturbation is confined to the coarsest wavelet band (for db1 the "
        "2^L x 2^L block averages), where sparsification cannot remove it, under the same pixel budget"
    )
    if cumulative:
        text += (
            " (run, like every attack of this run, only on points the suite had not broken at that budget: "
            "its column counts on top of the suite's earlier attacks)"
        )
    return f"{text}.\n\n{markdown_table(table)}"


def _lowfreq_numbers(records: pd.DataFrame) -> list[dict[str, Any]]:
    """``claim_numbers`` rows at every (threat, eps) the low-frequency entries attacked, for the models they
    attacked."""
    low = records[records["family"].isin(families_with(Trait.LOW_FREQUENCY))]
    attacked = set(low["model"])
    out = []
    for threat in dict.fromkeys(low["threat"]):
        for eps in threat_eps(low, threat):
            numbers = claim_numbers(records, threat=threat, eps=eps)
            out += numbers[numbers["model"].isin(attacked)].to_dict("records")
    return out


def energy_markdown(runs: Sequence[RunFolder]) -> str:
    """The mean share of perturbation energy removed, per model and perturbation; empty without energy.csv."""
    energy = combined_energy(runs)
    if energy.empty:
        return ""
    summary = energy_summary(energy)
    return (
        "Energy removed by sparsification: the share of a perturbation's coefficient energy "
        "(||W(d) ⊙ (1 - mask(x+d))||² / ||W(d)||²) that the mask zeroes; `transmitted` = "
        "||S(x+d) - S(x)||² / ||W(d)||² (it can exceed 1 because the perturbation also flips which image "
        "coefficients are kept).\n\n" + markdown_table(summary)
    )


# --------------------------------------------------------------------------------------------------------
# figures, provenance, commands
# --------------------------------------------------------------------------------------------------------
def figures_markdown(paths: Mapping[str, Sequence[Path]], out_dir: Path) -> str:
    """Captioned image links, relative to the report's folder so they resolve on GitHub."""
    blocks = [
        f"**{CAPTIONS[kind]}** (`{p.stem}`)\n\n![{p.stem}]({p.relative_to(out_dir).as_posix()})"
        for kind, items in paths.items()
        for p in items
    ]
    return "\n\n".join(blocks) if blocks else "_no figures._"


def provenance_markdown(runs: Sequence[RunFolder], report_dir: Path | None = None) -> str:
    """Per run: data, suite, settings, models, code and platform, the attacks' hyper-parameters, and a link
    to its meta.json (every seed, version and setting; linked, not pasted: it runs to a thousand lines)."""
    blocks = []
    for run in runs:
        blocks += [_run_summary(run), _attacks_details(run), _meta_link(run, report_dir)]
    return "\n\n".join(b for b in blocks if b)


def _meta_link(run: RunFolder, report_dir: Path | None) -> str:
    path = run.path / "meta.json"
    shown = Path(os.path.relpath(path, report_dir) if report_dir is not None else path).as_posix()
    return f"Everything recorded about the run (seeds, library versions, git revision, every setting): [meta.json]({shown})."


def _run_summary(run: RunFolder) -> str:
    meta = run.meta
    prov, ds, suite = meta.get("provenance", {}), meta.get("dataset", {}), meta.get("suite", {})
    settings = meta.get("settings", {})
    lines = [
        f"**Run** `{run.path}`",
        "",
        f"- data: `{ds.get('name', '?')}`, {meta.get('n_examples', '?')} test examples "
        f"(sha256 `{str(meta.get('data_sha256', ''))[:12]}`), eps grid {ds.get('eps', {})}"
        + (f", reference budget {ds['reference']} (declared)" if ds.get("reference") else ""),
        f"- suite: `{suite.get('name', '?')}` — {suite.get('description', '')}",
        f"- settings: attack seed {meta.get('seeds', {}).get('attack_seed', '?')}, "
        f"skip_broken={settings.get('skip_broken')}, backend={settings.get('backend')}, "
        f"device={settings.get('device')}",
    ]
    for model in run.models.values():
        m = model.raw  # shown as recorded ('?': not recorded)
        sha = model.checkpoint_sha256 or model.param_sha256 or ""
        clean = percent(model.clean_accuracy, missing=DASH)
        lines.append(
            f"- model `{model.name}`: grad modes {m.get('grad_modes')}, clean accuracy "
            f"{clean}, train seed {m.get('train_seed', '?')}, checkpoint "
            f"`{str(sha)[:12]}`, attack time {m.get('seconds_total', '?')} s"
        )
        if model.eot:
            lines.append(f"  - randomness: {randomness_text(model.eot)}")
        path = model.gradient_path
        lines += [f"  - gradient path: {path['summary']}"] if path else []
    libs = ", ".join(f"{k} {v}" for k, v in prov.get("libraries", {}).items())
    lines.append(f"- code: git `{prov.get('git_revision', '?')}`; {libs}")
    lines.append(f"- platform: {prov.get('platform', '?')}; created {meta.get('created_utc', '?')}")
    return "\n".join(lines)


def randomness_text(eot: Mapping[str, Any]) -> str:
    """One model's randomness and what the run did about it (``meta.json``'s ``eot`` entry, evaluation.eot)."""
    found = eot.get("randomness") or {}
    if not eot.get("stochastic"):
        what = (
            "deterministic (two forwards and input gradients agree)" if found else "not probed (no examples)"
        )
    else:
        diff = found.get("max_rel_logit_diff", float("nan"))
        what = f"randomised (two forwards differ by up to {diff:.3g} of the logits)"
    common = (
        "; every point classified on the same draws (common random numbers)"
        if eot.get("common_draws")
        else ""
    )
    if eot.get("eot_iter", 1) <= 1:
        if eot.get("stochastic") and eot.get("draws", 1) > 1:
            return (
                f"{what}; single-draw gradients (--eot {eot.get('mode', '?')}): its attacks are not adaptive; "
                f"predictions (clean included) over K = {eot.get('draws')} draws: {eot.get('rule')}{common}"
            )
        caveat = ": its numbers are one draw's, not the randomised model's" if eot.get("stochastic") else ""
        return f"{what}; single-draw gradients and predictions (--eot {eot.get('mode', '?')}){caveat}"
    skipped = eot.get("skipped") or {}
    return (
        f"{what}; EOT (--eot {eot.get('mode')}, AutoAttack's 'rand' protocol): gradient attacks average "
        f"{eot['eot_iter']} draws per step; predictions (clean included) over K = {eot.get('draws')} draws: "
        f"{eot.get('rule')}{common}" + (f"; skipped, no EOT: {', '.join(sorted(skipped))}" if skipped else "")
    )


def _attacks_details(run: RunFolder) -> str:
    rows = [
        {
            "attack": a.name,
            "family": a.family,
            "kind": a.kind,
            "threat": a.threat,
            "backend": a.backend,
            "eps": ", ".join(f"{e:.4g}" for e in a.eps),
            "hyper-parameters": ", ".join(f"{p}={v}" for p, v in a.params.items()),
        }
        for a in run.attacks.values()
    ]
    return _details("attacks and hyper-parameters", markdown_table(pd.DataFrame(rows))) if rows else ""


def _details(summary: str, body: str) -> str:
    return f"<details><summary>{summary}</summary>\n\n{body}\n\n</details>"


def rerun_command(recorded: str) -> str:
    """The shell command that reruns a run, from its ``meta["run"]["command"]``.

    Runs record the command itself (``python -m robustbench_wave.attack ...``, behind ``torchrun`` when it
    started them); runs written before that recorded the module's file path first, which is replaced.
    """
    if recorded.startswith(("python -m ", "torchrun ")):
        return recorded
    args = recorded.split(" ", 1)[1] if " " in recorded else ""
    return f"python -m robustbench_wave.attack {args}".rstrip()


def commands_markdown(runs: Sequence[RunFolder]) -> str:
    """The attack command of each run, then the command that rebuilds this report."""
    blocks = []
    for run in runs:
        cmd = run.invocation.command
        if cmd:
            blocks.append(f"```bash\n{rerun_command(cmd)}\n```")
    rebuild = " ".join([REPORT_COMMAND, *(str(r.path) for r in runs)])
    blocks += [
        "Rebuild this report from the saved files (no attacks are re-run):",
        f"```bash\n{rebuild}\n```",
    ]
    return "\n\n".join(blocks)
