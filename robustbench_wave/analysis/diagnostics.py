"""Is a reported robust accuracy trustworthy, or gradient masking?  Runs the checklist for one model.

:func:`run_diagnostics` runs every check registered in :mod:`robustbench_wave.analysis.checks` (Carlini et
al. 2019; Athalye et al. 2018; Croce & Hein 2020) and collects the results in a :class:`DiagnosticsReport`
(one line of status per model, a table, loss curves). Record checks read the benchmark's per-example
records; where those cannot decide (``skip_broken`` hid a comparison) they fall back to records of a small
generated suite (:func:`diagnostics_suite`: sign noise, FGSM, PGD and Square at the reference budget) that
the ordinary evaluation (:func:`robustbench_wave.evaluation.evaluate`) runs on a subset with
``skip_broken=False`` -- the same attacks, budget audit and record schema as the benchmark -- and, for the
budget-monotonicity check, to the subset's PGD at :data:`SWEEP_FACTORS` x the reference budget
(:func:`sweep_suite`, again without skip-broken: skip-broken records cannot show accuracy rising with eps).
Model checks run on the same subset, per gradient mode.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import pandas as pd
import torch
from torch import nn

from robustbench_wave.analysis.checks import (
    Check,
    CheckInputs,
    CheckResult,
    default_checks,
)
from robustbench_wave.analysis.checks.compare import (
    as_white_box_restarts,
    check_records,
    self_transfer_models,
)
from robustbench_wave.attacks import (
    Suite,
    Threat,
    as_float_images,
    attack_mode,
    model_device,
    modes_for,
    parse_suite,
)
from robustbench_wave.evaluation import EvalSettings, EvaluationResult
from robustbench_wave.evaluation.eot import EotPlan, EotSettings
from robustbench_wave.evaluation.evaluator import evaluate_suite
from robustbench_wave.evaluation.meta_sections import ModelsMeta, SettingsMeta
from robustbench_wave.evaluation.metrics import declared_reference, reference_eps, worst_case_rows
from robustbench_wave.evaluation.trust import Trust

log = logging.getLogger(__name__)

FALLBACK_EPS = 0.1  # reference Linf budget when the records hold none
LINF = Threat.LINF.value  # the subset attacks' threat model
PGD_REL_STEP = 2.5  # step size x steps / eps of the subset PGD (as the convergence sweeps)
SWEEP_FACTORS = (0.5, 1.0, 2.0)  # the budget sweep's budgets, as multiples of the reference budget (<= 1)


@dataclass
class DiagnosticsReport:
    """All checks of one model, plus the loss curves and the subset records they were computed from."""

    model: str
    checks: list[CheckResult]
    histories: dict[str, list[float]] = field(default_factory=dict)
    subset_records: pd.DataFrame | None = None
    settings: dict[str, Any] = field(default_factory=dict)

    @property
    def failed(self) -> list[str]:
        return [c.label for c in self.checks if c.passed is False]

    @property
    def status(self) -> str:
        """ "reliable" or "suspicious (checks: ...)" -- the run's one-line summary per model."""
        failed = [c for c in self.checks if c.passed is False]
        if not failed:
            return "reliable"
        modes: dict[str, list[str]] = {}
        for c in failed:
            modes.setdefault(c.name, [])
            if c.grad_mode:
                modes[c.name].append(c.grad_mode)
        names = [f"{n}[{', '.join(m)}]" if m else n for n, m in modes.items()]
        return f"suspicious (checks: {'; '.join(names)})"

    @property
    def modes(self) -> list[str]:
        return sorted({c.grad_mode for c in self.checks if c.grad_mode})

    @property
    def trusted_modes(self) -> list[str]:
        """Gradient modes none of whose checks failed (mode-free checks such as determinism count for all), by
        the one rule (:class:`~robustbench_wave.evaluation.trust.Trust`)."""
        entry = {"model": self.model, "checks": [asdict(c) for c in self.checks]}
        meta = {"models": {self.model: {"grad_modes": self.modes}}}
        return Trust.from_run(meta, [entry]).trusted_modes(self.model, self.modes)

    def table(self) -> pd.DataFrame:
        """One row per check: model, check, grad_mode ("all" for mode-free checks), result, numbers, meaning."""
        columns = ["model", "check", "grad_mode", "result", "passed", "numbers", "meaning"]
        rows = [
            [
                self.model,
                c.name,
                c.grad_mode or "all",
                c.result,
                c.passed,
                format_numbers(c.numbers),
                c.meaning,
            ]
            for c in self.checks
        ]
        return pd.DataFrame(rows, columns=columns)

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "status": self.status,
            "trusted_modes": self.trusted_modes,
            "checks": [asdict(c) for c in self.checks],
            "histories": self.histories,
            "settings": self.settings,
        }


def format_numbers(numbers: dict[str, Any], digits: int = 3) -> str:
    """Compact ``key=value`` text for tables (floats rounded)."""
    parts = []
    for key, value in numbers.items():
        if isinstance(value, float | np.floating):
            value = "nan" if math.isnan(value) else f"{float(value):.{digits}g}"
        parts.append(f"{key}={value}")
    return "; ".join(parts)


def diagnostics_suite(eps: float | Sequence[float], *, steps: int = 10, square_queries: int = 300) -> Suite:
    """The subset's suite: sign noise, FGSM, PGD (``steps``, one start) and, if ``square_queries`` > 0,
    Square, at the Linf budget(s) ``eps`` -- every family a record check compares, each at suite defaults."""
    grid = [float(eps)] if isinstance(eps, int | float) else [float(e) for e in eps]
    attacks: list[dict[str, Any]] = [
        {"name": "clean", "family": "clean"},
        {"name": "noise_sign", "family": "noise", "distribution": "sign", "threat": LINF},
        {"name": "fgsm_linf", "family": "fgsm", "threat": LINF},
        _pgd_entry(steps),
    ]
    if square_queries > 0:
        attacks.append(
            {"name": "square_linf", "family": "square", "threat": LINF, "n_queries": square_queries}
        )
    return _suite(
        "diagnostics",
        "every attack a record check compares, on the diagnostics subset",
        grid,
        attacks,
        "diagnostics_suite",
    )


def sweep_suite(eps: float, *, steps: int = 10, factors: Sequence[float] = SWEEP_FACTORS) -> Suite:
    """The budget sweep: the subset's PGD (:func:`diagnostics_suite`'s entry) at ``factors`` x ``eps``
    (capped at 1), the evidence ``eps_monotone`` reads when skip-broken records cannot show a rise."""
    grid = sorted({min(1.0, float(f) * float(eps)) for f in factors})
    attacks = [{"name": "clean", "family": "clean"}, _pgd_entry(steps)]
    return _suite(
        "diagnostics-sweep",
        "the subset's PGD at several budgets, every point at every budget",
        grid,
        attacks,
        "sweep_suite",
    )


def _pgd_entry(steps: int) -> dict[str, Any]:
    if steps < 1:
        raise ValueError(f"steps must be >= 1 (got {steps})")
    return {
        "name": "pgd_linf",
        "family": "pgd",
        "threat": LINF,
        "steps": steps,
        "rel_step_size": PGD_REL_STEP / steps,
        "restarts": 1,
    }


def _suite(
    name: str, description: str, grid: Sequence[float], attacks: list[dict[str, Any]], builder: str
) -> Suite:
    """A Linf suite of ``attacks`` at ``grid``, its source the function that built it."""
    return parse_suite(
        {"name": name, "description": description, "eps": {"default": {LINF: list(grid)}}, "attack": attacks},
        source=f"robustbench_wave.analysis.diagnostics.{builder}",
    )


def _pick_subset(model: nn.Module, x: torch.Tensor, y: torch.Tensor, n: int) -> torch.Tensor:
    """Indices of the first ``n`` examples (clean-correct first, so attacks have something to do)."""
    dev = model_device(model)
    with attack_mode(model), torch.no_grad():
        ok = torch.cat(
            [model(x[i : i + 256].to(dev)).argmax(1).cpu() == y[i : i + 256] for i in range(0, len(x), 256)]
        )
    order = torch.cat([torch.nonzero(ok).flatten(), torch.nonzero(~ok).flatten()])
    return order[:n].sort().values


def _model_rows(
    records: pd.DataFrame | None, model_name: str | None, meta: Mapping[str, Any] | None = None
) -> tuple[pd.DataFrame | None, str, bool]:
    """The benchmark rows of ``model_name`` (the only model of ``records`` when not given), and whether its
    transfer rows were crafted on itself (``meta``), in which case they are relabelled as white-box restarts."""
    if records is None or records.empty:
        return None, model_name or "model", False
    check_records(records, one_model=False)
    names = sorted(records["model"].unique())
    if model_name is None:
        if len(names) != 1:
            raise ValueError(f"records hold several models {names}: pass model_name=")
        model_name = str(names[0])
    rows = records[records["model"] == model_name]
    if rows.empty:
        raise ValueError(f"records have no rows for model {model_name!r}; they hold {names}")
    rows = worst_case_rows(rows)  # corruptions are average-case accuracy: no check reads them
    if model_name not in self_transfer_models(meta):
        return rows, model_name, False
    return as_white_box_restarts(rows, [model_name]), model_name, True


def _evaluate_subset(
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    ids: torch.Tensor,
    suite: Suite,
    info: Any,
    modes: Sequence[str],
    seed: int,
    model_name: str,
    eot: EotSettings,
) -> EvaluationResult:
    """Records (and meta) of ``suite`` on the subset: the ordinary evaluation, every attack on every clean-correct point,
    with the run's EOT choice (a randomised model is attacked as the run attacked it)."""
    settings = EvalSettings(
        model_name=model_name, dataset=info, grad_modes=tuple(modes), seed=seed, skip_broken=False, eot=eot
    )
    return evaluate_suite(model, x, y, suite, settings, example_ids=ids, progress=False)


def _eot_plan(
    run_meta: Mapping[str, Any] | None, subset_meta: Mapping[str, Any], name: str
) -> EotPlan | None:
    """What the run did about the model's randomness (its meta.json), else what the subset evaluation did."""
    for meta in (run_meta or {}, subset_meta):
        entry = ModelsMeta.from_meta(meta).get(name)
        if entry is not None and entry.eot:
            return EotPlan.from_meta(entry.eot)
    return None


#: The checklist's subset: examples per model its extra attacks run on, and the PGD steps they take. One
#: default for every door (the attack command, ``measure_run``, a direct call): a library caller gets the
#: protocol the command line runs.
DIAGNOSTICS_SAMPLE = 32
DIAGNOSTICS_STEPS = 10


def run_diagnostics(
    model: nn.Module,
    images: torch.Tensor,
    labels: torch.Tensor,
    records: pd.DataFrame | None,
    *,
    info: Any,
    model_name: str | None = None,
    grad_modes: Sequence[str] | None = None,
    n: int = DIAGNOSTICS_SAMPLE,
    eps: float | None = None,
    steps: int = DIAGNOSTICS_STEPS,
    square_queries: int = 300,
    seed: int = 0,
    checks: Sequence[Check] | None = None,
    meta: Mapping[str, Any] | None = None,
) -> DiagnosticsReport:
    """Run the checklist (every registered check, or ``checks``) for one model.

    ``records`` are the benchmark's per-example records (rows of ``model_name`` are used, ``example_id``
    indexing ``images``). The subset is ``n`` examples (clean-correct first); ``eps`` (default: the
    records' reference Linf budget, :func:`metrics.reference_eps`, the one ``meta`` declares if any) and
    ``steps`` set the subset attacks.
    ``meta`` (the run's ``meta.json``) says whether the transfer attacks were crafted on ``model_name``
    itself: their rows are then read as an exact white-box restart (:func:`as_white_box_restarts`).
    """
    num_classes = int(getattr(info, "num_classes", 0) or 0)
    if num_classes < 2:
        raise ValueError("info.num_classes must be >= 2 (pass the DatasetInfo of the data)")
    records, model_name, self_transfer = _model_rows(records, model_name, meta)
    checks = list(checks) if checks is not None else default_checks()
    x_all, y_all = as_float_images(images), labels.long()
    modes = modes_for(model, grad_modes)
    eps = reference_eps(records, LINF, FALLBACK_EPS, declared_reference(meta)) if eps is None else eps
    idx = _pick_subset(model, x_all, y_all, n)
    log.info("diagnostics for %s on %d examples, modes %s, eps=%.4g", model_name, len(idx), modes, eps)
    inputs = _check_inputs(
        model, x_all[idx], y_all[idx], idx, records, info=info, model_name=model_name, modes=modes, eps=eps,
        steps=steps, square_queries=square_queries, seed=seed, meta=meta,
    )  # fmt: skip
    results = [c.run(inputs, None) for c in checks if not c.per_mode]
    results += [c.run(inputs, mode) for mode in modes for c in checks if c.per_mode]
    settings = {"n": len(idx), "eps": eps, "steps": steps, "square_queries": square_queries, "modes": modes}
    settings |= {"seed": seed, "self_transfer": self_transfer, "thresholds": _thresholds(checks)}
    report = DiagnosticsReport(model_name, results, inputs.histories, inputs.subset_records, settings)
    log.info("%s: %s", model_name, report.status)
    return report


def _check_inputs(
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    idx: torch.Tensor,
    records: pd.DataFrame | None,
    *,
    info: Any,
    model_name: str,
    modes: Sequence[str],
    eps: float,
    steps: int,
    square_queries: int,
    seed: int,
    meta: Mapping[str, Any] | None,
) -> CheckInputs:
    """The evidence the checks read: the subset's suite and its budget sweep (every attack on every
    clean-correct point), both under the run's EOT choice, and what the run did about randomness."""
    run_settings = SettingsMeta.from_meta(meta or {})  # the run's EOT choice (absent in older runs: default)
    chosen = {"mode": run_settings.eot, "draws": run_settings.eot_draws}
    eot = EotSettings(**{name: value for name, value in chosen.items() if value is not None})

    def on_subset(suite: Suite) -> EvaluationResult:
        return _evaluate_subset(model, x, y, idx, suite, info, modes, seed, model_name, eot)

    evaluated = on_subset(diagnostics_suite(eps, steps=steps, square_queries=square_queries))
    dev = model_device(model)
    return CheckInputs(
        records=records,
        subset_records=evaluated.records,
        sweep_records=on_subset(sweep_suite(eps, steps=steps)).records,
        model=model,
        x=x.to(dev),
        y=y.to(dev),
        num_classes=int(info.num_classes),
        eps=eps,
        steps=steps,
        seed=seed,
        eot=_eot_plan(meta, evaluated.meta, model_name),
    )


def _thresholds(checks: Sequence[Check]) -> dict[str, Any]:
    """Each check's thresholds, recorded with the report so a verdict can be re-read later."""
    return {c.name: c.thresholds() for c in checks}
