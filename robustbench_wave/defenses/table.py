"""The gallery's one table: per defence, what a naive evaluation sees and what the adaptive one finds.

Every number is recomputed from the run folders' records (:func:`robustbench_wave.evaluation.metrics.
robust_flags`, the per-example worst case) at one budget, the threat's reference budget of the undefended
CNN's run unless given, with 95 % Wilson intervals:

* ``clean`` -- clean accuracy of the adaptive run (for a random model: decided over the run's draws);
* ``exact`` -- the naive run's exact-gradient attacks alone (white-box rows of mode ``exact``, counting only
  the points they broke themselves, not those another attack broke first and they skipped): what a
  gradient-based evaluation that trusts the model reports;
* ``naive`` -- the naive run's worst case over every attack (noise, gradient-free, transfer included);
* ``adaptive`` -- the adaptive run's worst case over every attack and gradient mode (automatic BPDA / EOT);
* ``within_undefended`` -- whether that adaptive worst case lies inside the undefended CNN's interval
  (descriptive);
* ``standing`` / ``untrusted_modes`` -- what the adaptive worst case is (:class:`~robustbench_wave.evaluation.
  trust.Trust`, the one rule: the checklist's failed checks, a gradient the scan found lost, a mode no
  checklist judged), over the gradient modes of the defence's adaptive records: ``verified`` (some mode
  judged and passed), ``unverified`` (none trusted, some failed a check or lost its gradient: an upper
  bound), ``unchecked`` (no checklist judged any); and each untrusted mode with why ("mode: why; ...");
* ``baseline`` / ``baseline_standing`` / ``paired_*`` / ``outcome`` / ``broken`` -- the defence against the
  undefended CNN on the same images (both runs attack the first N test images): the paired difference of
  the two per-example worst cases, its Newcombe interval and exact McNemar p, the verdict's outcome
  (:func:`broken_outcome`) and ``broken``, the verdict's category in the table's words (:func:`judge_broken`):

  - ``yes`` -- not more robust by the verdict's minimum effect (less robust, equivalent within it, or more
    robust by less); for a defence that is not verified only when even its upper bound is that (the
    verdict's "no advantage") against a verified baseline;
  - ``no`` -- more robust by at least the minimum effect (the interval clears it); only a verified defence;
  - ``inconclusive`` -- the test cannot decide, or a verified defence without an advantage over a baseline
    whose own number is an upper bound;
  - ``unverified`` / ``unchecked`` -- the defence's standing where its upper bound decides nothing: never
    "no", whatever the comparison says;
  - ``reference`` -- the CNN's own row; ``no baseline`` -- an own defence given without one;
* ``checks_naive`` / ``checks_adaptive`` -- the checklist's failed checks of every gradient mode of each run
  (:meth:`Trust.failed_checks <robustbench_wave.evaluation.trust.Trust.failed_checks>`), per mode, the
  mode-free ones under ``all``: "all: deterministic; bpda: a, b; exact: c" ("" = none failed; NaN = no
  checklist judged the defence in that run).

A user's own defence (``own``: its record name -> its baseline's, the undefended twin attacked in the same
runs) is judged the same way against that baseline instead of the CNN; "no baseline" for a defence given
without one, since nothing then says what its undefended network would score.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from robustbench_wave.analysis.formatting import DASH, interval, number, points
from robustbench_wave.analysis.verdict import (
    ADVANTAGE,
    NO_ADVANTAGE,
    RULES_OUT,
    VerdictSettings,
    comparison_outcome,
    judged_outcome,
    p_values,
)
from robustbench_wave.attacks import AttackKind, Threat
from robustbench_wave.core.io import atomic_write_text
from robustbench_wave.defenses.protocols import ADAPTIVE, NAIVE, AttackOptions, run_dir
from robustbench_wave.evaluation.metrics import (
    CLEAN_KIND,
    EPS_TOL,
    PairedComparison,
    clean_correct,
    declared_reference,
    paired_comparison,
    reference_eps,
    robust_flags,
    threat_eps,
    wilson_interval,
)
from robustbench_wave.evaluation.trust import ALL_MODES, Standing, Trust
from robustbench_wave.models.frontend import GradMode
from robustbench_wave.models.gallery import GALLERY, UNDEFENDED
from robustbench_wave.reporting.runs import RunFolder, load_run

#: Accuracy columns of the table, each with ``_low`` / ``_high`` (Wilson) beside it.
ACCURACIES = ("clean", "exact", "naive", "adaptive")
TABLE_FILES = {"csv": "gallery.csv", "tex": "gallery.tex", "txt": "gallery.txt"}
HEADERS = {
    "clean": "clean",
    "exact": "exact gradients",
    "naive": "naive (all attacks)",
    "adaptive": "BPDA / EOT (all attacks)",
}

#: How an own defence is judged against its baseline: the verdict's level and equivalence margin.
JUDGEMENT = VerdictSettings()
#: The ``broken`` column's words (the module docstring says what each means); the same in every format.
YES, NO, INCONCLUSIVE = "yes", "no", "inconclusive"
UNVERIFIED, UNCHECKED = Standing.UNVERIFIED.value, Standing.UNCHECKED.value
REFERENCE, NO_BASELINE = "reference", "no baseline"
BROKEN_WORDS = (YES, NO, INCONCLUSIVE, UNVERIFIED, UNCHECKED, REFERENCE, NO_BASELINE)
#: The legend's second line, in a table with own defences.
OWN_LEGEND = (
    "a defence of yours (ext-FACTORY-<hash>) is judged against its baseline instead, your undefended model "
    "attacked in the same runs on the same images (and the transfer attacks' surrogate): vs baseline = the "
    "paired difference of the two worst cases in points, its 95% Newcombe interval and the exact McNemar p; "
    "broken by the same rule as the gallery's rows (inconclusive where the baseline is not verified and the defence shows no advantage over it); no baseline = given without --baseline: "
    "nothing says what the undefended network scores, so it is not judged"
)

GalleryRuns = Mapping[str, Mapping[str, RunFolder]]  # defence -> protocol -> run


def load_gallery_runs(options: AttackOptions) -> dict[str, dict[str, RunFolder]]:
    """Every (defence, protocol) run folder of ``options`` (an own defence under its record name), checked by
    :func:`reporting.runs.load_run`."""
    runs: dict[str, dict[str, RunFolder]] = {}
    for defence in options.names:
        for protocol in (NAIVE, ADAPTIVE):
            path = run_dir(defence, protocol, options)
            if not (path / "records.csv.gz").exists():
                raise ValueError(
                    f"no {protocol} run of {defence} in {path}; run python -m robustbench_wave.gallery attack "
                    "with the same --results-dir, --dataset, --suite, --n-examples and --seed first"
                )
            runs.setdefault(defence, {})[protocol] = load_run(path)
    return runs


def _accuracy(prefix: str, flags: pd.Series) -> dict[str, float]:
    k, n = int(flags.sum()), len(flags)
    low, high = wilson_interval(k, n)
    return {prefix: k / n if n else math.nan, f"{prefix}_low": low, f"{prefix}_high": high}


def _records(run: RunFolder, threat: str, eps: float, model: str | None = None) -> pd.DataFrame:
    """The records of ``model`` (None: the run's one model); ValueError for a run of several models when
    none is named, a model the run lacks, or a run without ``eps``."""
    records = run.records
    models = records["model"].unique()
    if model is not None:
        if model not in models:
            raise ValueError(f"{run.path} has no records of {model} (it holds {sorted(models)})")
        records = records[records["model"] == model]
    elif len(models) != 1:
        raise ValueError(f"{run.path} holds {len(models)} models; a gallery run attacks one defence")
    if not any(abs(e - eps) <= EPS_TOL for e in threat_eps(records, threat)):
        raise ValueError(
            f"{run.path} has no {threat} eps = {eps:g}; attack every defence with the same suite"
        )
    return records


def grad_modes(records: pd.DataFrame) -> list[str]:
    """The gradient modes the records were attacked under, sorted."""
    return sorted({str(m) for m in records["grad_mode"].dropna().unique() if str(m)})


def _one_model(run: RunFolder, model: str | None) -> str:
    models = run.records["model"].unique()
    if model is None and len(models) != 1:
        raise ValueError(f"{run.path} holds {len(models)} models; name the one whose checks to read")
    return str(model if model is not None else models[0])


def failed_checks(run: RunFolder, *, model: str | None = None, modes: Iterable[str] | None = None) -> Any:
    """The failed checks of ``model`` (None: the run's one model) in every gradient mode of ``modes`` (None:
    every mode of its records) and the mode-free ones (under ``all``), per mode: "all: deterministic; bpda: a,
    b; exact: c" (modes and names sorted); "" when none failed, NaN when no checklist judged it."""
    model = _one_model(run, model)
    if modes is None:
        modes = grad_modes(run.records[run.records["model"] == model])
    return mode_checks(run.trust, model, modes)


def mode_checks(trust: Trust, model: str, modes: Iterable[str]) -> Any:
    """:func:`failed_checks` from the run's :class:`Trust`."""
    modes = [str(m) for m in modes]
    fails = trust.failed_checks(model, modes)
    if not fails and not any(trust.is_checked(model, m) for m in modes):
        return math.nan
    order = sorted(fails, key=lambda m: (m != ALL_MODES, m))
    return "; ".join(f"{m}: {', '.join(sorted(set(fails[m])))}" for m in order)


def _untrusted(trust: Trust, model: str, modes: Iterable[str]) -> str:
    """Each of the model's untrusted modes with why (:meth:`Trust.why`), "mode: why; ..."; "" when none."""
    return "; ".join(f"{m}: {why}" for m, why in sorted(trust.why(model, modes).items()))


def _own_breaks(rows: pd.DataFrame) -> pd.DataFrame:
    """``rows`` with the points their attack skipped counted as standing.

    Under skip-broken a point that any earlier attack broke (the transfer attack, Square, ...) is recorded
    as skipped and not correct by every attack after it, so the white-box rows alone would carry those
    breaks. Here only what the white-box attacks broke themselves counts: points another attack broke first
    stand, which makes the column an upper bound of what exact gradients alone find.
    """
    skipped = (rows["kind"] != CLEAN_KIND) & ~rows["attacked"].astype(bool)
    return rows.assign(correct=rows["correct"].astype(bool) | skipped)


def defence_row(
    naive: RunFolder, adaptive: RunFolder, threat: str, eps: float, model: str | None = None
) -> dict[str, Any]:
    """One defence's numbers (see the module docstring); ``model``: its records in runs of several models."""
    plain, best = _records(naive, threat, eps, model), _records(adaptive, threat, eps, model)
    white = plain[
        (plain["grad_mode"] == GradMode.EXACT.value)
        & plain["kind"].isin([CLEAN_KIND, AttackKind.WHITE_BOX.value])
    ]
    if white.empty:
        raise ValueError(f"{naive.path} has no exact-gradient records; the naive run must include 'exact'")
    white = _own_breaks(white)
    name, modes = str(best["model"].iloc[0]), grad_modes(best)
    trust = adaptive.trust
    return {
        "model": best["model"].iloc[0],
        "n": int(best["example_id"].nunique()),
        **_accuracy("clean", clean_correct(best)),
        **_accuracy("exact", robust_flags(white, threat, eps)),
        **_accuracy("naive", robust_flags(plain, threat, eps)),
        **_accuracy("adaptive", robust_flags(best, threat, eps)),
        "modes_naive": "+".join(sorted(plain["grad_mode"].unique())),
        "modes_adaptive": "+".join(sorted(best["grad_mode"].unique())),
        "checks_naive": mode_checks(naive.trust, str(plain["model"].iloc[0]), grad_modes(plain)),
        "checks_adaptive": mode_checks(trust, name, modes),
        "standing": trust.standing(name, modes).value,
        "untrusted_modes": _untrusted(trust, name, modes),
    }


def baseline_columns(
    adaptive: RunFolder, defence: str, baseline: str | None, threat: str, eps: float
) -> dict[str, Any]:
    """An own defence's comparison with its baseline in the same adaptive run (see the module docstring)."""
    if baseline is None:
        others = sorted(set(adaptive.records["model"]) - {defence})
        if others:
            raise ValueError(
                f"{adaptive.path} also holds {others}: the runs were made with a --baseline; pass it again"
            )
        return _no_pair(NO_BASELINE)
    mine, twin = _records(adaptive, threat, eps, defence), _records(adaptive, threat, eps, baseline)
    trust = adaptive.trust
    return pair_columns(
        baseline,
        robust_flags(mine, threat, eps),
        robust_flags(twin, threat, eps),
        standing=trust.standing(defence, grad_modes(mine)),
        base_standing=trust.standing(baseline, grad_modes(twin)),
    )


def gallery_pair_columns(
    adaptive: RunFolder, undefended: RunFolder, defence: str, threat: str, eps: float
) -> dict[str, Any]:
    """A gallery defence against the undefended CNN on the same images (both runs attack the data set's first
    N images, so their per-example worst cases pair by example id); the CNN's own row is the reference."""
    if defence == UNDEFENDED:
        return _no_pair(REFERENCE)
    mine, cnn = _records(adaptive, threat, eps), _records(undefended, threat, eps)
    return pair_columns(
        UNDEFENDED,
        robust_flags(mine, threat, eps),
        robust_flags(cnn, threat, eps),
        standing=adaptive.trust.standing(str(mine["model"].iloc[0]), grad_modes(mine)),
        base_standing=undefended.trust.standing(str(cnn["model"].iloc[0]), grad_modes(cnn)),
    )


def pair_columns(
    baseline: str,
    ours: pd.Series,
    theirs: pd.Series,
    *,
    standing: Standing = Standing.VERIFIED,
    base_standing: Standing = Standing.VERIFIED,
) -> dict[str, Any]:
    """The paired comparison of a defence's per-example worst case with its baseline's, the verdict's outcome
    and ``broken`` (:func:`judge_broken`), given the two models' :class:`Standing`."""
    paired = paired_comparison(ours, theirs)
    outcome = broken_outcome(paired, standing, base_standing)
    return {
        "baseline": baseline,
        **_accuracy("baseline_adaptive", theirs),
        "baseline_standing": base_standing.value,
        "paired_diff": paired.diff, "paired_low": paired.ci_low, "paired_high": paired.ci_high,
        "paired_p": paired.p_value, "outcome": outcome, "broken": broken_word(outcome, standing),
    }  # fmt: skip


def _no_pair(broken: str) -> dict[str, Any]:
    """The comparison's columns of a row that has none: the CNN's own (:data:`REFERENCE`), or an own defence
    without a baseline (:data:`NO_BASELINE`)."""
    return {
        "baseline": "",
        **_accuracy("baseline_adaptive", pd.Series([], dtype=bool)),
        "baseline_standing": "",
        **dict.fromkeys(("paired_diff", "paired_low", "paired_high", "paired_p"), math.nan),
        "outcome": "",
        "broken": broken,
    }


def broken_outcome(
    paired: PairedComparison,
    standing: Standing = Standing.VERIFIED,
    base_standing: Standing = Standing.VERIFIED,
    settings: VerdictSettings = JUDGEMENT,
) -> str:
    """The verdict's outcome for defence (A) vs its undefended model (B) on the same images, as
    :func:`~robustbench_wave.analysis.verdict.categorize` reaches it: the paired rule with the minimum effect
    (:func:`~robustbench_wave.analysis.verdict.comparison_outcome`), as the standings let it stand
    (:func:`~robustbench_wave.analysis.verdict.judged_outcome`)."""
    outcome = comparison_outcome(paired, p_values(paired, None, settings), settings)
    return judged_outcome(outcome, standing, base_standing)


def broken_word(outcome: str, standing: Standing = Standing.VERIFIED) -> str:
    """The ``broken`` cell of a :func:`broken_outcome`: for a verified defence :data:`NO` on an advantage,
    :data:`YES` where the comparison rules one out, else :data:`INCONCLUSIVE`; for one that is not verified
    :data:`YES` only on the verdict's "no advantage" (even its upper bound is no better than a verified
    baseline), else its standing (:data:`UNVERIFIED` / :data:`UNCHECKED`), never :data:`NO`."""
    if not standing.trusted:
        return YES if outcome == NO_ADVANTAGE else standing.value
    if outcome in ADVANTAGE:
        return NO
    return YES if outcome in RULES_OUT else INCONCLUSIVE


def judge_broken(
    paired: PairedComparison,
    *,
    standing: Standing = Standing.VERIFIED,
    base_standing: Standing = Standing.VERIFIED,
    settings: VerdictSettings = JUDGEMENT,
) -> str:
    """``broken`` for defence (A) vs its undefended model (B) on the same images: the verdict's category in
    the table's words (:func:`broken_outcome`, :func:`broken_word`). A verified defence against a verified
    baseline: :data:`NO` (not broken) when it is more robust by the minimum effect (the 95% interval of the
    difference clears it), :data:`YES` when it is less robust, equivalent within the minimum effect, or more
    robust by less, :data:`INCONCLUSIVE` when the test cannot decide."""
    return broken_word(broken_outcome(paired, standing, base_standing, settings), standing)


def build_table(
    runs: GalleryRuns,
    threat: str = Threat.LINF.value,
    eps: float | None = None,
    own: Mapping[str, str | None] | None = None,
) -> pd.DataFrame:
    """The table, one row per defence in gallery order, the undefended CNN first (it sets the reference),
    then the ``own`` defences (record name -> baseline record name or None), each judged against its
    baseline in its own runs."""
    own = dict(own or {})
    gallery = [d for d in runs if d not in own]
    if gallery and UNDEFENDED not in runs:
        raise ValueError("the table compares every gallery defence with the undefended CNN: attack 'cnn' too")
    for defence, protocols in runs.items():
        missing = {NAIVE, ADAPTIVE} - set(protocols)
        if missing:
            raise ValueError(f"{defence} lacks its {', '.join(sorted(missing))} run")
    if not runs:
        raise ValueError("no defence to tabulate")
    if eps is None:
        first = UNDEFENDED if UNDEFENDED in runs else next(iter(runs))
        reference_run = runs[first][ADAPTIVE]
        eps = reference_eps(reference_run.records, threat, declared=declared_reference(reference_run.meta))
        if eps is None:
            raise ValueError(f"the run of {first} has no {threat} budget; pass another threat")
    order = [d for d in GALLERY if d in gallery] + [d for d in gallery if d not in GALLERY] + list(own)
    rows = []
    for defence in order:
        entry = GALLERY.get(defence)
        naive, adaptive = runs[defence][NAIVE], runs[defence][ADAPTIVE]
        model = defence if defence in own else None
        row = {
            "defence": defence,
            "source": entry.source if entry else "",
            "broken_by": entry.broken_by if entry else "",
            "threat": threat,
            "eps": float(eps),
            **defence_row(naive, adaptive, threat, eps, model),
        }
        if defence in own:
            row |= baseline_columns(adaptive, defence, own[defence], threat, eps)
        else:
            row |= gallery_pair_columns(adaptive, runs[UNDEFENDED][ADAPTIVE], defence, threat, eps)
        rows.append(row)
    table = pd.DataFrame(rows)
    if table["n"].nunique() != 1:
        raise ValueError(f"the runs evaluate different numbers of examples {sorted(table['n'].unique())}")
    at_most = table["adaptive"] <= table["baseline_adaptive_high"] + EPS_TOL
    within = (table["adaptive"] >= table["baseline_adaptive_low"] - EPS_TOL) & at_most
    table["within_undefended"] = within.astype(object).where(table["baseline"] != "", math.nan)
    return table


# ------------------------------------------------------------------------------------------------ rendering


def _checks_cell(value: Any) -> str:
    """A checks column for reading: per mode, how many checks failed ("all 1, bpda 2, exact 1"); "no" when
    none did, "not run" without a checklist."""
    if not isinstance(value, str):
        return "not run"
    if not value:
        return "no"
    modes = (part.split(": ", 1) for part in value.split("; "))
    return ", ".join(f"{mode} {len(names.split(', '))}" for mode, names in modes)


def _paired_cell(row: pd.Series) -> str:
    """'+12.5 [+3.1, +21.0] p = 0.01': the paired difference in points, its interval and the exact p."""
    if pd.isna(row["paired_diff"]):
        return DASH
    diff = points(row["paired_diff"], unit="")
    return f"{diff} {interval(row['paired_low'], row['paired_high'])} p = {row['paired_p']:.2g}"


def formatted(table: pd.DataFrame, pm: str = " ± ") -> pd.DataFrame:
    """Strings for reading: accuracies as '% ± half-width of the Wilson interval', flags as yes (count) / no."""
    out = pd.DataFrame({"defence": table["defence"], "source": table["source"]})
    for col in ACCURACIES:
        half = (table[f"{col}_high"] - table[f"{col}_low"]) / 2
        out[HEADERS[col]] = [number(v, h, scale=100.0, pm=pm, missing=DASH) for v, h in zip(table[col], half)]
    if has_own(table):  # each row's baseline beside it (the gallery's own rows: the CNN)
        out["baseline"] = [b or DASH for b in table["baseline"]]
        half = (table["baseline_adaptive_high"] - table["baseline_adaptive_low"]) / 2
        out["baseline BPDA / EOT"] = [
            number(v, h, scale=100.0, pm=pm, missing=DASH) for v, h in zip(table["baseline_adaptive"], half)
        ]
    out["vs baseline (paired)"] = [_paired_cell(row) for _, row in table.iterrows()]
    out["broken"] = [str(b) for b in table["broken"]]
    out["flagged naive"] = [_checks_cell(v) for v in table["checks_naive"]]
    out["flagged adaptive"] = [_checks_cell(v) for v in table["checks_adaptive"]]
    return out


def has_own(table: pd.DataFrame) -> bool:
    """Whether the table holds a defence of the user's (judged against its own baseline, not the CNN)."""
    return bool(((table["baseline"] != UNDEFENDED) & (table["defence"] != UNDEFENDED)).any())


def title(table: pd.DataFrame, dataset: str = "", suite: str = "") -> str:
    """One line: data, n, threat and budget, suite."""
    first = table.iloc[0]
    what = "Defences, naive vs adaptive" if has_own(table) else "Defences known to be broken"
    parts = [f"{what}{' on ' + dataset if dataset else ''} (n = {first['n']})"]
    parts.append(f"worst case at {first['threat']} eps = {first['eps']:g}")
    if suite:
        parts.append(f"suite {suite}")
    return "; ".join(parts)


def render_text(table: pd.DataFrame, heading: str) -> str:
    """The terminal table with its legend."""
    lines = [heading, formatted(table).to_string(index=False), ""]
    lines.append(
        "cells: robust accuracy % ± half-width of the 95% Wilson interval; exact gradients = the naive run's "
        "white-box attacks in mode exact (their own breaks only); naive = every attack without BPDA or EOT; BPDA / EOT = every attack "
        "and gradient mode of the adaptive run; vs baseline (paired) = the defence's worst case minus the undefended CNN's on "
        "the same images, in points, with its 95% Newcombe interval and exact McNemar p; broken = the verdict's category: yes when the "
        f"defence is not more robust than the undefended CNN by the minimum effect of {JUDGEMENT.minimum_effect * 100:.0f} points (less "
        "robust, equivalent within it, or more robust by less: the verdict's rule), no when the interval clears it, inconclusive when "
        "the test cannot decide (attack more images) or the CNN's own number is an upper bound; unverified / unchecked when no gradient "
        "mode of the defence's adaptive run is trusted (each failed a gradient-masking check or lost its gradient at the scan / no "
        "checklist judged it): its number is an upper bound, never read as not broken, and broken = yes only when even that upper "
        "bound is within the minimum effect of a verified baseline or below it; flagged = the checks of the gradient-masking "
        "checklist that failed, counted per gradient mode (all = the mode-free checks; gallery.csv names them), no = none failed, "
        "not run = no checklist"
    )
    if has_own(table):
        lines.append(OWN_LEGEND)
    lines += _standing_notes(table)
    return "\n".join(lines) + "\n"


def _standing_notes(table: pd.DataFrame) -> list[str]:
    """One line per defence whose adaptive number is not verified, and per own baseline that is not: why."""
    notes = []
    for _, row in table.iterrows():
        if row["standing"] != Standing.VERIFIED.value:
            why = row["untrusted_modes"] if isinstance(row["untrusted_modes"], str) else ""
            notes.append(f"{row['defence']}: {row['standing']}, an upper bound ({why or 'no mode judged'})")
    shown = set(table["defence"])
    for base, standing in zip(table["baseline"], table["baseline_standing"]):
        if base and base not in shown and standing != Standing.VERIFIED.value:
            shown.add(base)
            notes.append(
                f"baseline {base}: {standing}, an upper bound: only an advantage over it can be shown"
            )
    return notes


def render_latex(table: pd.DataFrame, heading: str) -> str:
    """booktabs LaTeX of :func:`formatted` (pandas' Styler, as ``reporting.tables``)."""
    cells = formatted(table, pm=r" $\pm$ ").map(lambda s: s.replace("_", r"\_").replace("&", r"\&"))
    return cells.style.hide(axis="index").to_latex(
        column_format="ll" + "r" * (cells.shape[1] - 2),
        hrules=True,
        caption=heading.replace("_", r"\_"),
        label="tab:gallery",
        position_float="centering",
    )


def write_table(table: pd.DataFrame, directory: str | Path, heading: str) -> str:
    """Write ``gallery.csv`` (every number and the failed checks' names), ``gallery.tex`` and
    ``gallery.txt`` atomically into ``directory``; returns the terminal text."""
    directory = Path(directory)
    text = render_text(table, heading)
    atomic_write_text(directory / TABLE_FILES["csv"], table.to_csv(index=False, lineterminator="\n"))
    atomic_write_text(directory / TABLE_FILES["tex"], render_latex(table, heading))
    atomic_write_text(directory / TABLE_FILES["txt"], text)
    return text
