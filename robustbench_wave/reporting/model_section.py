"""The report's opening section about the models a user brought (``--model FILE.py:FACTORY``, ``timm:ARCH``):
their clean and worst-case accuracy per budget under each gradient mode beside the undefended baseline's,
what the gradient scan found and the rule each operation got (or "unhandled"), escalation, the checklist's
failures in words, and the verdict's sentences about them. A user who brought a defence reads its result on
the report's first screen; the zoo's runs (no external model) get no such section.

Everything is read from the run folders (records, meta.json, diagnostics), as every report section is.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from robustbench_wave.analysis.formatting import percent
from robustbench_wave.evaluation.meta_sections import ModelMeta
from robustbench_wave.evaluation.metrics import CLEAN_THREAT, WORST, WORST_MODE, summarize
from robustbench_wave.reporting.runs import RunFolder
from robustbench_wave.reporting.tables import MARK, markdown_table

#: The report's figure of the attack loss (the checklist's PGD, per mode), linked where the section speaks
#: of exact against BPDA / EOT.
LOSS_FIGURE = "figures/attack_loss.png"


def external_models(runs: Sequence[RunFolder]) -> list[str]:
    """The record names of the models from outside the zoo in these runs, in run order."""
    return list(dict.fromkeys(m.name for r in runs for m in r.models.values() if m.external))


def has_wavelet_model(runs: Sequence[RunFolder]) -> bool:
    """Whether a model with a wavelet tokenizer is in the runs: only then do the sections about the source
    paper's wavelet claim (its wording, the energy sparsification removes) belong in the report."""
    for run in runs:
        entries = list(run.models.values()) or [ModelMeta(str(n)) for n in run.records["model"].unique()]
        for entry in entries:
            spec = entry.model_spec or {}
            tokenizer = spec.get("tokenizer", "" if entry.external else entry.name)  # a zoo name says it
            if "wavelet" in str(tokenizer):
                return True
    return False


def models_markdown(
    runs: Sequence[RunFolder],
    verdict_text: str,
    baseline: str | None,
    marks: Mapping[tuple[str, str], str] | None = None,
) -> str:
    """One ``###`` block per external model (empty string when the runs hold none); ``marks``: the (model,
    mode) cells that failed a gradient check, marked as in the tables."""
    names = external_models(runs)
    blocks = [_model_block(runs, name, verdict_text, baseline, marks or {}) for name in names]
    return "\n\n".join(blocks)


def _model_block(
    runs: Sequence[RunFolder],
    name: str,
    verdict_text: str,
    baseline: str | None,
    marks: Mapping[tuple[str, str], str],
) -> str:
    entry = next(m for r in runs if (m := r.models.get(name)) is not None)
    parts = [f"### `{name}`", _provenance_line(entry)]
    parts.append(markdown_table(accuracy_table(runs[0].records, name, baseline, marks)))
    parts.append(
        "_cells: robust accuracy % at each budget, the per-example worst case over every attack of the suite "
        "under that gradient mode; `worst` over every mode; † a mode that failed a gradient check (an upper "
        "bound, not robustness)._"
    )
    parts += [_scan_text(entry.gradient_path), _modes_text(entry)]
    parts += [_escalation_text(entry.escalation), _checklist_text(runs, name)]
    parts.append(_verdict_text(verdict_text, name))
    return "\n\n".join(p for p in parts if p)


def _provenance_line(entry: ModelMeta) -> str:
    external = entry.external or {}
    reference = external.get("reference") if isinstance(external, Mapping) else external
    weights = str(entry.checkpoint_sha256 or "")[:12]
    clean = entry.clean_accuracy
    return (
        f"`{reference}`" + (f", weights sha256 `{weights}…`" if weights else "")
        + (f"; clean accuracy {percent(clean)}" if clean is not None else "")
        + f"; attacked under {', '.join(entry.grad_modes or [])}."
    )  # fmt: skip


def accuracy_table(
    records: pd.DataFrame,
    name: str,
    baseline: str | None,
    marks: Mapping[tuple[str, str], str] | None = None,
) -> pd.DataFrame:
    """Rows (threat, eps), columns: clean, each gradient mode's worst case (``†``: the mode failed a gradient
    check), ``worst`` over modes (a model with one mode: that mode's), and the baseline's worst case when
    the run holds one."""
    summary = summarize(records[records["model"].isin([name, baseline])])
    worst = summary[summary["attack"] == WORST]
    clean = summary[(summary["threat"] == CLEAN_THREAT) & (summary["model"] == name)]
    modes = [m for m in dict.fromkeys(worst.loc[worst["model"] == name, "grad_mode"]) if m != WORST_MODE]
    rows = []
    for (threat, eps), grp in worst.groupby(["threat", "eps"], sort=False):
        row: dict[str, Any] = {"threat": threat, "eps": f"{eps:g}"}
        row["clean"] = percent(clean["robust_accuracy"].iloc[0]) if len(clean) else ""
        for mode in modes:
            mark = MARK if (name, mode) in (marks or {}) else ""
            row[mode] = _worst_of(grp, name, mode) + mark
        row[WORST_MODE] = _worst_of(grp, name)
        if baseline and baseline != name:
            row[f"{baseline} (baseline)"] = _worst_of(grp, baseline)
        rows.append(row)
    return pd.DataFrame(rows)


def _worst_of(worst: pd.DataFrame, model: str, mode: str = WORST_MODE) -> str:
    """A model's worst case under ``mode`` (``worst``: over its modes; its only mode's when it has one)."""
    own = worst[worst["model"] == model]
    value = own.loc[own["grad_mode"] == mode, "robust_accuracy"]
    if mode == WORST_MODE and value.empty and own["grad_mode"].nunique() == 1:
        value = own["robust_accuracy"]
    return percent(value.iloc[0]) if len(value) else ""


def _scan_text(path: Mapping[str, Any] | None) -> str:
    """What the automatic scan found on the input's path, one line per operation with its rule."""
    if not path:
        return "**Gradient scan:** nothing on the input's path stops the gradient: exact gradients only."
    lines = [f"- `{f['op']}` [{f['kind']}]: {_rule(f['rule'])}" for f in path.get("findings") or []]
    lines += [
        f"- round trip out of torch: `{t['left']}` … `{t['back']}`, shape {t['shape']}, units x{t['scale']:g}: "
        "identity across it (BPDA)"
        for t in path.get("round_trips") or []
    ]
    unhandled = path.get("unhandled") or []
    head = "**Gradient scan** (what stops the input's gradient, and the rule the `bpda` mode gives it):"
    if unhandled:
        head += (
            f" **unhandled: {', '.join(f'`{u}`' for u in unhandled)}** — no rule brings their gradient back."
        )
    return "\n".join([head, *lines]) if lines else head


def _rule(rule: str) -> str:
    return f"**{rule}**" if rule == "unhandled" else rule


def _modes_text(entry: ModelMeta) -> str:
    """Exact against BPDA / EOT, side by side: where to look."""
    modes = entry.grad_modes or []
    eot = entry.eot or {}
    said = []
    if len(modes) > 1:
        said.append(
            f"the columns {', '.join(f'`{m}`' for m in modes)} are the same suite under each gradient rule; "
            f"the attack's loss per step under each is in [the attack-loss figure]({LOSS_FIGURE})"
        )
    if eot.get("stochastic"):
        said.append(
            "the model is randomised: gradient attacks averaged over draws (EOT) and every prediction is a vote "
            "over draws (see Set-up and provenance)"
        )
    return ("**Exact against BPDA / EOT:** " + "; ".join(said) + ".") if said else ""


def _escalation_text(escalation: Mapping[str, Any] | Sequence[Any] | None) -> str:
    if not escalation:
        return ""
    stages = escalation if isinstance(escalation, Sequence) else [escalation]
    why = "; ".join(str(s.get("reason", "")) for s in stages if isinstance(s, Mapping))
    return f"**Escalated** (Square at 5,000 queries at every threat, transfer from the baseline): {why}."


def _checklist_text(runs: Sequence[RunFolder], name: str) -> str:
    """The checklist's failures for this model, each in the words of its check (or that none ran)."""
    if not any(d.get("model") == name for run in runs for d in run.diagnostics):
        return "**Checklist:** none ran, so no number of this model is verified (each is an upper bound)."
    failed = [
        f"- `{c['name']}` under {c.get('grad_mode') or 'every mode'}: {c.get('meaning', '')}"
        for run in runs
        for d in run.diagnostics
        if d.get("model") == name
        for c in d.get("checks", [])
        if c.get("passed") is False
    ]
    if not failed:
        return "**Checklist:** every check passed (or did not apply)."
    return "\n".join(
        ["**Checklist failures** (numbers under these modes may overstate robustness):", *failed]
    )


def _verdict_text(verdict_text: str, name: str) -> str:
    """The verdict's paragraphs about this model."""
    paragraphs = [p for p in verdict_text.split("\n\n") if f"**{name}**" in p]
    return "\n\n".join(["**Verdict against the baseline:**", *paragraphs]) if paragraphs else ""
