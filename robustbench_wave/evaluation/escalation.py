"""Escalation: where a model's gradient is lost, unhandled or masked, the stronger gradient-free and transfer
attacks run by themselves (Athalye et al. 2018; Croce & Hein 2020).

A suite is written for models whose gradient reaches the input. When it does not -- a NumPy or PIL round
trip the scan cannot link, an operation with no straight-through rule (:mod:`robustbench_wave.models.
autobpda`) -- or when every gradient mode the model was attacked under failed a check of the gradient-masking
checklist, the suite's gradient attacks measured nothing and its black-box attacks (Square at 500-1,000
queries, transfer only at L∞) are too weak to stand in for them. The harness then *escalates*:

* Square (Andriushchenko et al. 2020) with AutoAttack's settings -- 5,000 queries, ``p_init`` 0.8, margin
  loss, one restart -- at every threat of the suite's grid that has a norm (L∞ and L2), every budget;
* a transfer attack from the run's undefended baseline (its surrogate; none when the surrogate is the
  model itself or absent), at every such threat where the suite has no transfer entry: the suite's
  transfer entry's hyper-parameters, or PGD's (:data:`TRANSFER_PARAMS`).

When is decided twice (:func:`scan_reason`, :func:`checklist_reason`): before any attack from the scan
(the gradient reaches the input in no mode, or a finding is unhandled), and after the suite from the
checklist (no mode the model was attacked under passes every check). A model one of whose modes passes is
never escalated: its worst case over modes already rests on a healthy gradient (the zoo's wavelet ViT,
whose blocked mode fails the checklist by design). The escalation is an ordinary evaluation
(:func:`~robustbench_wave.evaluation.evaluate`) of :func:`escalation_suite` that starts from the suite's
records (``prior_records``: with skip-broken, points the suite broke are recorded as skipped, as if its
entries had followed the suite's), with the suite's seed and seeding block; its rows are records like any
other, of attacks named ``escalation_*`` (:func:`is_escalation`), audited and counted in every worst case.
"""

from __future__ import annotations

import copy
import hashlib
import logging
from collections.abc import Mapping
from typing import Any

import pandas as pd
import torch
from torch import nn

from robustbench_wave.attacks import AttackKind, Suite, Threat, parse_suite
from robustbench_wave.evaluation import records as rec
from robustbench_wave.evaluation.evaluator import evaluate_suite
from robustbench_wave.evaluation.plan import EvalSettings
from robustbench_wave.evaluation.result import EvaluationResult
from robustbench_wave.evaluation.trust import Trust, path_reason
from robustbench_wave.models.autobpda import gradient_path

log = logging.getLogger(__name__)

#: Attack names of the escalation's rows begin with this (suite entries cannot be named so by accident:
#: :func:`is_escalation` is what every reader asks).
PREFIX = "escalation_"
#: The meta.json key (under the model's entry) that says why and how a model was escalated.
META_KEY = "escalation"
#: AutoAttack's Square (``version='standard'``): 5,000 queries, p_init 0.8, margin loss, one restart.
SQUARE_PARAMS = {"n_queries": 5000, "p_init": 0.8, "restarts": 1, "loss": "margin"}
#: A transfer attack's settings when the suite has no transfer entry: the headline suite's PGD.
TRANSFER_PARAMS = {"steps": 20, "rel_step_size": 0.125, "restarts": 1, "random_start": True}
#: Threats escalated: those with a norm ball (corruptions are average-case; L0 has no Square).
THREATS = (Threat.LINF.value, Threat.L2.value)
#: The two moments an escalation is decided (meta.json's ``stage``).
SCAN, CHECKLIST = "scan", "checklist"


def is_escalation(attack: str) -> bool:
    """Whether a records' attack name is an escalation's."""
    return str(attack).startswith(PREFIX)


def escalated(records: pd.DataFrame, model: str) -> bool:
    """Whether ``model``'s records already hold escalation rows (an escalated run is not escalated again)."""
    rows = records[records["model"] == model]
    return bool(rows["attack"].map(is_escalation).any())


# ---------------------------------------------------------------------------------------------- when


def scan_reason(model: nn.Module) -> str | None:
    """Why the scan calls for escalation, or None (:func:`path_reason` of what :func:`auto_bpda
    <robustbench_wave.models.autobpda.auto_bpda>` found). A model the scan did not wrap (exact gradients, or its
    own gradient-mode switches such as a ``FixedFrontEnd``) never."""
    path = gradient_path(model)
    return None if path is None else path_reason(path.to_dict())


def checklist_reason(diagnostics: Mapping[str, Any], meta: Mapping[str, Any] | None = None) -> str | None:
    """Why the checklist calls for escalation (one model's ``diagnostics.json`` entry), or None: every
    gradient mode it judged failed a check (:meth:`Trust.checklist_escalation
    <robustbench_wave.evaluation.trust.Trust.checklist_escalation>`, the one rule)."""
    return Trust.from_run(meta or {}, [diagnostics]).checklist_escalation(str(diagnostics.get("model", "")))


# ---------------------------------------------------------------------------------------------- what


def norm_grid(suite: Suite, dataset: Any) -> dict[str, list[float]]:
    """``suite``'s L∞ and L2 budgets for ``dataset``: what an escalation attacks. Empty for a suite of
    common corruptions alone, which has no worst case for an escalation to lower (its rows are average
    case and never gradient-based), so such a run is not escalated."""
    return {t: v for t, v in suite.resolved_eps(dataset).items() if t in THREATS and v}


def escalation_suite(suite: Suite, dataset: Any, *, transfer: bool) -> Suite:
    """Square-5000 at every norm threat and budget of ``suite``'s grid for ``dataset``, and (``transfer``)
    a transfer attack at each such threat the suite has none for; the suite's ``rng_block``. Its name is the
    suite's with ``-escalation``."""
    grid = norm_grid(suite, dataset)
    if not grid:
        raise ValueError(f"suite {suite.name!r} has no L∞ or L2 budgets: nothing to escalate with")
    attacks: list[dict[str, Any]] = [{"name": "clean", "family": "clean"}]
    for threat in grid:
        attacks.append(
            {
                "name": attack_name("square_5000", threat),
                "family": "square",
                "threat": threat,
                **SQUARE_PARAMS,
            }
        )
    own = [e for e in suite.attacks if e.kind == AttackKind.TRANSFER.value]
    params = dict(own[0].params) if own else dict(TRANSFER_PARAMS)
    covered = {e.threat for e in own}
    for threat in grid:
        if transfer and threat not in covered:
            attacks.append(
                {"name": attack_name("transfer", threat), "family": "transfer", "threat": threat, **params}
            )
    return parse_suite(
        {
            "name": f"{suite.name}-escalation",
            "description": "Square 5,000 queries (AutoAttack) and transfer from the baseline, where the gradient fails",
            "settings": {"rng_block": suite.rng_block},
            "eps": {"default": {t: list(v) for t, v in grid.items()}},
            "attack": attacks,
        },
        source="robustbench_wave.evaluation.escalation.escalation_suite",
    )


def attack_name(what: str, threat: str) -> str:
    """``escalation_<what>_<threat>`` in lower case (``escalation_square_5000_l2``)."""
    return f"{PREFIX}{what}_{threat.lower()}"


# ---------------------------------------------------------------------------------------------- how


def escalate(
    model: nn.Module,
    images: torch.Tensor,
    labels: torch.Tensor,
    suite: Suite,
    settings: EvalSettings,
    prior: pd.DataFrame,
    *,
    reason: str,
    stage: str,
    surrogate: nn.Module | None = None,
    surrogate_name: str | None = None,
    **evaluate_kwargs: Any,
) -> EvaluationResult:
    """The escalation rows of one model (no clean rows: the suite's stand) and its meta.json note.

    ``prior`` are the model's records of ``suite`` on the same examples (``example_ids`` among
    ``evaluate_kwargs``); their breaks start the worst case. The surrogate is used for transfer unless it is
    the model itself (that would be a white-box attack on the lost gradient). ``evaluate_kwargs`` go to
    :func:`~robustbench_wave.evaluation.evaluator.evaluate_suite` (batch size, device, cache, specs, ...); the prior's digest
    joins the chunk fingerprint, so a resumed escalation is one of these very records.
    """
    sur = surrogate if surrogate is not None and surrogate is not model else None
    esc = escalation_suite(suite, settings.dataset, transfer=sur is not None)
    rows = prior[(prior["model"] == settings.model_name) & prior["threat"].isin(THREATS)]
    specs = dict(evaluate_kwargs.pop("specs", None) or {})
    specs["prior_records"] = _frame_sha256(rows)
    log.warning("%s: escalating (%s): %s", settings.model_name, stage, reason)
    result = evaluate_suite(
        model, images, labels, esc, settings, surrogate=sur, surrogate_name=surrogate_name if sur else None,
        specs=specs, prior_records=rows, **evaluate_kwargs,
    )  # fmt: skip
    records = result.records[result.records["kind"] != AttackKind.CLEAN.value].reset_index(drop=True)
    model_meta = result.meta["models"][settings.model_name]
    note = {
        "stage": stage,
        "reason": reason,
        "suite": {k: v for k, v in esc.to_dict().items() if k not in ("description", "source")},
        "surrogate": surrogate_name if sur is not None else None,
        "transfer": None if sur is not None else _no_transfer(surrogate, model),
        "timing": model_meta.get("timing", [])[1:],
        "resumed_chunks": model_meta.get("resumed_chunks", 0),
    }
    return EvaluationResult(records, {META_KEY: note}, adversarial=result.adversarial)


def after_suite(
    result: EvaluationResult,
    model: nn.Module,
    images: torch.Tensor,
    labels: torch.Tensor,
    suite: Suite,
    settings: EvalSettings,
    *,
    surrogate: nn.Module | None = None,
    surrogate_name: str | None = None,
    **evaluate_kwargs: Any,
) -> EvaluationResult:
    """``result`` (one model's suite) with its escalation joined when the scan calls for one (else as is): what
    :func:`~robustbench_wave.evaluation.evaluate` does after the suite at every door, each shard of a sharded
    run on its own examples (so the merged records are one process's)."""
    reason = scan_reason(model)
    name = settings.model_name
    if reason is None or not norm_grid(suite, settings.dataset) or escalated(result.records, name):
        return result
    extra = escalate(
        model, images, labels, suite, settings, result.records, reason=reason, stage=SCAN,
        surrogate=surrogate, surrogate_name=surrogate_name, **evaluate_kwargs,
    )  # fmt: skip
    return join(result, name, extra)


def _no_transfer(surrogate: nn.Module | None, model: nn.Module) -> str:
    if surrogate is model:
        return "skipped: the run's surrogate is this model itself"
    return "skipped: the run has no undefended baseline to transfer from (--baseline NAME / --surrogate NAME)"


def _frame_sha256(rows: pd.DataFrame) -> str:
    """A digest of the records the escalation starts from (which points it may skip)."""
    key = rows[["grad_mode", "threat", "eps", "example_id", "attacked", "correct"]]
    return hashlib.sha256(key.to_csv(index=False, lineterminator="\n").encode()).hexdigest()


def join(base: EvaluationResult, model: str, extra: EvaluationResult) -> EvaluationResult:
    """``base`` with ``model``'s escalation rows appended (after all of ``base``'s rows, so every earlier
    row keeps its place) and its note in ``meta["models"][model]["escalation"]``; adversarial points the
    escalation kept join the model's set."""
    meta = copy.deepcopy(base.meta)
    meta.pop(rec.META_RECORDS, None)
    meta["models"][model][META_KEY] = extra.meta[META_KEY]
    adversarial = dict(base.adversarial)
    if model in extra.adversarial:
        if model in adversarial:
            adversarial[model].update(extra.adversarial[model])
        else:
            adversarial[model] = extra.adversarial[model]
    return EvaluationResult(rec.concat([base.records, extra.records]), meta, adversarial=adversarial)
