"""Evaluate any ``torch.nn.Module`` classifier on [0,1] inputs against an attack suite (RobustBench's spirit).

    from robustbench_wave.evaluation import EvalSettings, evaluate
    settings = EvalSettings(model_name="wavelet", dataset="fashion-mnist")
    result = evaluate(model, images, labels, "default", settings, batch_size=256)
    result.records / result.meta / result.summary()
    result.save("results/attack/fashion-mnist/my-run")   # tables: reporting.tables.write_tables

How the numbers are made honest (Croce & Hein 2020; Carlini et al. 2019; Athalye et al. 2018):

* Settings and run time: :class:`EvalSettings` holds every choice that changes the records (model name, data
  set, gradient modes, back-end, seed, skip-broken, cross-check); the keyword arguments only change how fast
  and where the evaluation runs (batch size, device, progress, chunk cache) or name its inputs (surrogate,
  example ids, provenance).
* Gradient modes: a model with a fixed front-end (``has_fixed_front_end``) is attacked under every mode in
  ``settings.grad_modes`` (default: each of exact, blocked, bpda the model offers; a mode it does not offer
  is refused before any attack), one row each. Attacks that never differentiate the target
  (noise, Square, transfer) are *shared*: they run once, under the forward pass every mode has in common, on
  the points still robust in at least one mode; their records are replicated into every mode's rows, where a
  point already broken in that mode is recorded as skipped. So every mode's worst case includes them.
* Per-example worst case (:class:`RobustState`): with ``skip_broken`` (default) each attack runs at each eps
  (ascending) only on points still robust at that eps; a skipped point is recorded with
  ``attacked=False, correct=False``. ``skip_broken=False`` runs every attack on every clean-correct point
  (for per-attack comparisons).
* Common corruptions (threat ``corruption``, eps = severity) are an average-case axis: they run once, on
  every example (clean errors included), are recorded under the first gradient mode only, and neither skip
  nor mark broken points (:func:`~robustbench_wave.attacks.is_average_case`).
* Budget audit on every returned point (``attacks.budget.audit``); predictions are recomputed here.
* Randomised models (:mod:`eot`): two forwards of the first examples are compared before any attack; a
  model whose forwards differ gets AutoAttack's 'rand' protocol (``settings.eot``, default ``auto``): 20 EOT
  iterations in every gradient attack that has them, the others skipped with a reason, and every prediction,
  clean included, decided over K draws. A deterministic model's records are those of a plain evaluation.
* Per-example randomness: results do not depend on ``batch_size`` (:mod:`execute`).
* Resume: with ``cache_dir`` every finished (model, attack, grad mode) chunk is saved and reused when the
  configuration (suite, data, weights, model specs, seed, modes, backend) is unchanged (:mod:`chunks`).
* ``save_adversarial``: the audited points that broke examples, one per (mode, threat, eps, example) where
  the worst case first fell (:mod:`adversarial`); they never change the records.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch
from torch import nn
from tqdm.auto import tqdm

from robustbench_wave.attacks import (
    DEFAULT_SUITE,
    AttackEntry,
    GradSafe,
    RunContext,
    RunnerSpec,
    Suite,
    attack_mode,
    audit,
    get_runner,
    input_gradient_blocked,
    is_average_case,
    load_suite,
    model_device,
)
from robustbench_wave.evaluation import records as rec
from robustbench_wave.evaluation.adversarial import AdversarialSet
from robustbench_wave.evaluation.chunks import (
    Chunk,
    ChunkCache,
    config_fingerprint,
    state_sha256,
    tensor_sha256,
)
from robustbench_wave.evaluation.eot import EotPlan, decide
from robustbench_wave.evaluation.execute import Predictor, Progress, run_attack
from robustbench_wave.evaluation.meta import ModelRun, build_meta
from robustbench_wave.evaluation.metrics import EPS_TOL, cross_attack_name
from robustbench_wave.evaluation.plan import (
    DEFAULT_BATCH_SIZE,
    SHARED,
    CrossPlan,
    EvalSettings,
    Examples,
    Plan,
)
from robustbench_wave.evaluation.result import EvaluationResult
from robustbench_wave.evaluation.state import RobustState
from robustbench_wave.models.frontend import MODE_NAMES, GradMode, grad_mode, offered_modes, parse_mode

log = logging.getLogger(__name__)
ALL_MODES = [m.value for m in GradMode]
CLEAN_BACKEND = "builtin"


@dataclass
class _Run:
    """One model's evaluation in progress: its inputs, running worst case and progress bar."""

    model: nn.Module  # GradSafe-wrapped target
    images: torch.Tensor
    labels: torch.Tensor
    ids: torch.Tensor
    clean_correct: torch.Tensor
    modes: list[str]
    state: RobustState
    ctx: RunContext
    settings: EvalSettings
    rng_block: int
    device: torch.device
    batch_size: int
    predictor: Predictor  # clean and adversarial predictions (K draws for a randomised model)
    pbar: Any = None  # tqdm bar: inner progress per batch / id block
    adversarial: AdversarialSet | None = None  # the points that break examples (save_adversarial), or None


# ------------------------------------------------------------------------------------------------- inputs


def resolve_grad_modes(model: nn.Module, grad_modes: Sequence[str] | None) -> list[str]:
    """The modes to evaluate, in :data:`MODE_NAMES` order. None: every mode of the three the model offers
    (``supported_grad_modes``: all three with a fixed front-end, exact and bpda with automatic BPDA, else exact).
    A list is a request, honoured whole or refused: a mode the model does not offer (``offered_modes``, a scoped
    mode such as ``bpda-assignment`` included) is a ValueError naming the ones it does, never replaced by
    another, so no page can speak of a mode that did not run."""
    offered = offered_modes(model)
    if grad_modes is None:
        return [m for m in MODE_NAMES if m in ALL_MODES and m in offered]
    asked = [parse_mode(m).name for m in grad_modes]
    if not asked:
        raise ValueError(f"grad_modes names no gradient mode; this model offers {offered}")
    missing = [m for m in dict.fromkeys(asked) if m not in offered]
    if missing:
        raise ValueError(
            f"the model does not offer gradient mode(s) {missing}; it offers {offered} (blocked needs a "
            "FixedFrontEnd sub-module, bpda one or an operation automatic BPDA finds: models/external.py). "
            "Ask only for offered modes, or leave grad_modes unset for all of them"
        )
    return [m for m in MODE_NAMES if m in asked]


def _check_inputs(images: torch.Tensor, labels: torch.Tensor, example_ids: Any) -> Examples:
    if not isinstance(images, torch.Tensor) or images.dim() != 4:
        raise ValueError("images must be a tensor (N, C, H, W) with values in [0,1]")
    if images.dtype == torch.uint8:
        images = images.float() / 255.0
    images = images.detach().float()
    if not torch.isfinite(images).all() or float(images.min()) < 0 or float(images.max()) > 1:
        raise ValueError("images must be finite and in [0,1]; convert uint8 data with data.to_float")
    labels = torch.as_tensor(labels).detach().long().view(-1)
    if len(labels) != len(images):
        raise ValueError(f"{len(images)} images but {len(labels)} labels")
    ids = torch.arange(len(images)) if example_ids is None else torch.as_tensor(example_ids).long().view(-1)
    if len(ids) != len(images) or len(torch.unique(ids)) != len(ids):
        raise ValueError("example_ids must be one unique integer per image")
    return Examples(images.cpu(), labels.cpu(), ids.cpu())


def _check_device(model: nn.Module, device: str | torch.device | None) -> torch.device:
    dev = model_device(model)
    want = torch.device(device) if device is not None else dev
    if want.type != dev.type or want.index not in (None, dev.index):
        raise ValueError(f"the model lives on {dev} but device={device!r}; move it first (model.to(device))")
    return dev


def _fingerprint(
    plan: Plan,
    settings: EvalSettings,
    data: Examples,
    model: nn.Module,
    surrogate: nn.Module | None,
    modes: list[str],
    specs: Mapping[str, str] | None = None,
    eot: EotPlan | None = None,
) -> str:
    """Identity of everything a chunk's records depend on (a resumed chunk must match it); ``specs``, the
    cross-check, EOT and parameters fitted to the model (a resolved low-frequency level) only when present,
    so the fingerprints of callers without them stay what they were."""
    suite = {k: v for k, v in plan.suite.to_dict().items() if k not in ("description", "source")}
    return config_fingerprint(
        {
            "suite": suite,
            "eps": plan.threat_eps,
            "data": tensor_sha256(*data.tensors()),
            "weights": state_sha256(model),
            "surrogate": state_sha256(surrogate) if surrogate is not None else None,
            "seed": settings.seed,
            "skip_broken": settings.skip_broken,
            "backends": plan.backends,
            "modes": modes,
            "dataset": settings.dataset_name,
        }
        | ({"specs": dict(specs)} if specs else {})
        | ({"cross_check": {n: dataclasses.asdict(c) for n, c in plan.cross.items()}} if plan.cross else {})
        | ({"eot": eot.identity()} if eot is not None and eot.changes_records else {})
        | ({"fitted": fitted} if (fitted := _fitted_params(plan)) else {})
    )


def _fitted_params(plan: Plan) -> dict[str, dict[str, Any]]:
    """The entries whose parameters were fitted to this model (e.g. the low-frequency ``level = "auto"``
    resolved, ``attacks.fit_entry``): name -> the parameters they run with."""
    written = {e.name: dict(e.params) for e in plan.suite.attacks}
    return {e.name: dict(e.params) for e in plan.entries if dict(e.params) != written.get(e.name)}


@contextmanager
def _attack_context(
    model: nn.Module, surrogate: nn.Module | None, seed: int, num_classes: int | None, eot_rows: int
) -> Iterator[RunContext]:
    """Target and surrogate in attack mode (restored on exit); the surrogate always with exact gradients.
    ``num_classes`` (the data set's, when known) is what targeted attacks aim at; ``eot_rows`` the rows of a
    batched EOT forward (:attr:`EotPlan.draw_rows`)."""
    with ExitStack() as stack:
        stack.enter_context(attack_mode(model))
        if surrogate is not None:
            stack.enter_context(attack_mode(surrogate))
            stack.enter_context(grad_mode(surrogate, GradMode.EXACT.value))
        yield RunContext(
            seed=seed,
            surrogate=GradSafe(surrogate) if surrogate is not None else None,
            num_classes=num_classes,
            eot_rows=eot_rows,
        )


# ------------------------------------------------------------------------------------------------ records


def _records(
    run: _Run,
    block: rec.RecordBlock,
    attacked: torch.Tensor,
    idx: torch.Tensor,
    outcome: tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None],
) -> pd.DataFrame:
    """Records of every example for one block; ``outcome`` = (pred, loss, norm, correct_last) of ``idx``."""
    n = len(run.labels)
    pred, loss, norms, last = outcome
    at = idx.numpy()
    pred_full = np.zeros(n, dtype=np.int64)
    pred_full[at] = pred.numpy()
    norm_full = np.full(n, np.nan)
    norm_full[at] = norms.numpy()
    loss_full = np.full(n, np.nan)
    loss_full[at] = loss.numpy()
    last_full = None
    if last is not None:
        last_full = np.zeros(n, dtype=bool)
        last_full[at] = last.numpy()
    return rec.build_records(
        block,
        run.ids.numpy(),
        run.labels.numpy(),
        attacked.numpy(),
        pred_full,
        norm=norm_full,
        loss=loss_full,
        correct_last=last_full,
    )


def _block(
    run: _Run, entry: AttackEntry, mode: str, eps: float, backend: str, attack: str | None = None
) -> rec.RecordBlock:
    """The shared columns of one block; ``attack`` names a cross-check's rows (default: the entry's name)."""
    s = run.settings
    return rec.RecordBlock(
        s.model_name,
        s.dataset_name,
        mode,
        attack or entry.name,
        entry.family,
        entry.kind,
        entry.threat,
        eps,
        backend,
    )


def _timing(entry: AttackEntry, mode: str, eps: float, backend: str, n: int, t0: float) -> dict[str, Any]:
    return {
        "attack": entry.name,
        "grad_mode": mode,
        "eps": float(eps),
        "backend": backend,
        "n_attacked": n,
        "seconds": round(time.perf_counter() - t0, 3),
    }


# ------------------------------------------------------------------------------------------------- chunks


def _progress(run: _Run, label: str) -> Progress | None:
    """Inner progress (batch / id block) on the bar's postfix, unless the bar is off."""
    if run.pbar is None or run.pbar.disable:
        return None
    return lambda i, n: run.pbar.set_postfix_str(f"{label} batch {i + 1}/{n}")


Outcome = tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None]  # pred, loss, norm, last


def _attack_points(
    run: _Run, spec: RunnerSpec, entry: AttackEntry, eps: float, idx: torch.Tensor, run_mode: str, label: str
) -> tuple[Outcome, torch.Tensor]:
    """Attack run.images[idx]; returns (pred, loss, norms, correct_last) after the budget audit, and the
    audited points."""
    x = run.images[idx]
    progress = _progress(run, f"{label} [{run_mode}] eps={eps:.4g}")
    with grad_mode(run.model, run_mode):
        x_adv, last = run_attack(
            spec,
            run.model,
            x,
            run.labels[idx],
            run.ids[idx],
            eps,
            entry,
            run.ctx,
            batch_size=run.batch_size,
            rng_block=run.rng_block,
            device=run.device,
            progress=progress,
            by_block=run.predictor.common,
        )
    norms = audit(x, x_adv, eps, entry.threat, label).float()
    pred, loss = run.predictor(
        run.model, x_adv, run.labels[idx], label, run_mode, repr(eps), ids=run.ids[idx]
    )
    return (pred, loss, norms, last), x_adv


def _one_step_if_blocked(run: _Run, entry: AttackEntry, mode: str) -> tuple[AttackEntry, str | None]:
    """With no gradient reaching the input anywhere every iterate equals the start, so 1 step == N steps."""
    if mode == SHARED or "steps" not in entry.params or not len(run.images):
        return entry, None
    with grad_mode(run.model, mode):
        if not input_gradient_blocked(run.model.model, run.images[:2].to(run.device)):
            return entry, None
    entry = dataclasses.replace(entry, params={**entry.params, "steps": 1})
    log.warning(
        "%s: %s [%s]: no gradient reaches the input (structurally zero), so this gradient attack cannot move a "
        "point: its numbers are upper bounds that rest on the gradient-free and transfer attacks",
        run.settings.model_name, entry.name, mode,
    )  # fmt: skip
    return entry, "input gradient structurally zero: ran 1 step (identical to all steps)"


def _eligible(run: _Run, entry: AttackEntry, modes: list[str], eps: float) -> dict[str, torch.Tensor]:
    """Per recorded mode, the points this attack counts at ``eps``: still robust, or every clean-correct;
    every example for a corruption (average-case accuracy: clean errors are evaluated too)."""
    if is_average_case(entry.threat):
        return {m: torch.ones(len(run.labels), dtype=torch.bool) for m in modes}
    if not run.settings.skip_broken:
        return {m: run.clean_correct.clone() for m in modes}
    return {m: run.state.robust(m, entry.threat, eps) for m in modes}


def _mark_broken(
    run: _Run, block: rec.RecordBlock, frame: pd.DataFrame, points: tuple[torch.Tensor, torch.Tensor]
) -> None:
    """The points this block's attack broke leave the running worst case of its mode at its eps and above;
    ``points`` = (positions attacked, their audited points), kept where a flag fell (``save_adversarial``)."""
    if is_average_case(block.threat):  # a corruption's misclassification is no break of the worst case
        return
    broken = torch.from_numpy(np.array(frame["attacked"] & ~frame["correct"], dtype=bool))
    if run.adversarial is not None:
        _keep_breaks(run, block, broken, points)
    run.state.mark_broken(block.grad_mode, block.threat, block.eps, broken)


def _keep_breaks(
    run: _Run, block: rec.RecordBlock, broken: torch.Tensor, points: tuple[torch.Tensor, torch.Tensor]
) -> None:
    """The points that broke examples still robust at this budget: those the worst case counts there."""
    new = (broken & run.state.robust(block.grad_mode, block.threat, block.eps)).nonzero().flatten()
    idx, x_adv = points
    row = torch.full((len(run.labels),), -1, dtype=torch.long)
    row[idx] = torch.arange(len(idx))
    col = block.columns()
    info = {k: str(col[k]) for k in ("backend", "family", "kind")}
    key = (str(col["grad_mode"]), str(col["threat"]), float(col["eps"]))
    run.adversarial.add(key, run.ids[new], x_adv[row[new]], str(col["attack"]), info)


def _run_eps(
    run: _Run, entry: AttackEntry, mode: str, backend: str, eps: float, note: str | None
) -> tuple[list[pd.DataFrame], dict[str, Any], torch.Tensor]:
    """One eps of a chunk: attack the eligible points, record every recorded mode, update the worst case."""
    t0 = time.perf_counter()
    rec_modes = run.modes if mode == SHARED else [mode]
    if is_average_case(entry.threat):  # one row per example, under the first mode (exact when evaluated)
        rec_modes = rec_modes[:1]
    run_mode = GradMode.EXACT.value if mode == SHARED else mode
    eligible = _eligible(run, entry, rec_modes, eps)
    target = torch.stack(list(eligible.values())).any(0)
    idx = target.nonzero().flatten()
    run.pbar.set_postfix_str(f"{entry.name} {mode} eps={eps:.4g} n={len(idx)}")
    spec = get_runner(entry.family, backend)
    outcome, x_adv = _attack_points(run, spec, entry, eps, idx, run_mode, f"{entry.name} ({backend})")
    frames = []
    for m in rec_modes:
        block = _block(run, entry, m, eps, backend)
        frame = _records(run, block, eligible[m] & target, idx, outcome)
        frames.append(frame)
        _mark_broken(run, block, frame, (idx, x_adv))
    timing = _timing(entry, mode, eps, backend, len(idx), t0)
    return frames, ({**timing, "note": note} if note else timing), idx


def _cross_check_eps(
    run: _Run, entry: AttackEntry, mode: str, backend: str, eps: float, idx: torch.Tensor
) -> tuple[pd.DataFrame, dict[str, Any]]:
    """Another back-end on exactly the points the primary one attacked. Its rows are the records of attack
    ``entry@backend``, and its breaks count: an audited adversarial example is a break whoever found it."""
    t0 = time.perf_counter()
    spec = get_runner(entry.family, backend)
    label = cross_attack_name(entry.name, backend)
    outcome, x_adv = _attack_points(run, spec, entry, eps, idx, mode, label)
    attacked = torch.zeros(len(run.labels), dtype=torch.bool)
    attacked[idx] = True
    block = _block(run, entry, mode, eps, backend, label)
    frame = _records(run, block, attacked, idx, outcome)
    _mark_broken(run, block, frame, (idx, x_adv))
    return frame, {**_timing(entry, mode, eps, backend, len(idx), t0), "attack": label, "crosscheck": True}


def _run_chunk(
    run: _Run, entry: AttackEntry, mode: str, backend: str, eps_list: Sequence[float], cross: CrossPlan | None
) -> Chunk:
    """Every eps of one (attack, mode) chunk, ascending; at a cross-checked eps the other back-ends run on the
    points the primary one attacked, before the next eps (so their breaks count there and above)."""
    entry, note = _one_step_if_blocked(run, entry, mode)
    frames, timing = [], []
    for eps in eps_list:
        eps_frames, eps_timing, idx = _run_eps(run, entry, mode, backend, eps, note)
        frames += eps_frames
        timing.append(eps_timing)
        crossed = cross is not None and any(math.isclose(eps, e, abs_tol=EPS_TOL) for e in cross.eps)
        for other in cross.backends if crossed else ():
            xframe, xtiming = _cross_check_eps(run, entry, mode, other, eps, idx)
            frames.append(xframe)
            timing.append(xtiming)
        run.pbar.update(1)
    return rec.concat(frames), timing


def _chunk(
    run: _Run, plan: Plan, entry: AttackEntry, mode: str, cache: ChunkCache | None
) -> tuple[Chunk, bool]:
    """One chunk, and whether it came from the cache (a finished chunk of this configuration)."""
    name, outer = run.settings.model_name, run.adversarial
    cached = cache.load(name, entry.name, mode) if cache else None
    kept = cache.load_adversarial(name, entry.name, mode) if cache and outer is not None else None
    if cached is not None and (outer is None or kept is not None):
        run.state.apply_records(cached[0], run.ids.tolist())
        if outer is not None and kept is not None:
            outer.update(kept)
        run.pbar.update(len(plan.entry_eps[entry.name]))
        return cached, True
    cross = plan.cross.get(entry.name) if mode != SHARED else None
    run.adversarial = kept = AdversarialSet(name) if outer is not None else None  # this chunk's points
    try:
        chunk = _run_chunk(run, entry, mode, plan.backends[entry.name], plan.entry_eps[entry.name], cross)
    finally:
        run.adversarial = outer
    if outer is not None and kept is not None:
        outer.update(kept)
    if cache:
        cache.save(name, entry.name, mode, chunk, adversarial=kept)
    return chunk, False


def _clean_frames(
    run: _Run, entry: AttackEntry, pred: torch.Tensor, loss: torch.Tensor
) -> list[pd.DataFrame]:
    """Clean records (eps 0, every example attacked by nothing) under every mode."""
    idx = torch.arange(len(run.labels))
    every = torch.ones(len(run.labels), dtype=torch.bool)
    outcome = (pred, loss, torch.zeros(len(run.labels)), None)
    return [_records(run, _block(run, entry, m, 0.0, CLEAN_BACKEND), every, idx, outcome) for m in run.modes]


def _attack_all(run: _Run, plan: Plan, cache: ChunkCache | None, progress: bool) -> tuple[list[Chunk], int]:
    """Every chunk of the suite in order; returns the chunks and how many came from the cache."""
    chunks, resumed = [], 0
    name = run.settings.model_name
    total = plan.n_steps(run.modes)
    with tqdm(total=total, desc=f"attack {name}", unit="step", disable=not progress, leave=False) as pbar:
        run.pbar = pbar
        for entry in plan.entries:
            for mode in plan.chunk_modes(entry, run.modes):
                chunk, from_cache = _chunk(run, plan, entry, mode, cache)
                resumed += from_cache
                chunks.append(chunk)
                log.info("%s %s [%s]: %.1f s", name, entry.name, mode, sum(t["seconds"] for t in chunk[1]))
    return chunks, resumed


# ---------------------------------------------------------------------------------------------------- API


def evaluate_suite(
    model: nn.Module,
    images: torch.Tensor,
    labels: torch.Tensor,
    suite: str | Path | Suite = DEFAULT_SUITE,
    settings: EvalSettings | None = None,
    *,
    surrogate: nn.Module | None = None,
    surrogate_name: str | None = None,
    example_ids: Sequence[int] | torch.Tensor | None = None,
    batch_size: int = DEFAULT_BATCH_SIZE,
    device: str | torch.device | None = None,
    progress: bool = True,
    cache_dir: str | Path | None = None,
    save_adversarial: bool = False,
    specs: Mapping[str, str] | None = None,
    extra_meta: dict[str, Any] | None = None,
    prior_records: pd.DataFrame | None = None,
) -> EvaluationResult:
    """Attack ``model`` (logits from [0,1] images) with every entry of ``suite`` and keep per-example records:
    the suite alone, on a model taken as it is (the public :func:`~robustbench_wave.evaluation.evaluate`
    checks and scans the model first and escalates after; the checklist and the escalation call this).

    ``settings`` (default ``EvalSettings()``) are the choices that change the records: the data set (a
    DatasetInfo or its name) picks the suite's eps block, ``backend`` ('auto', 'builtin', 'torchattacks',
    'foolbox') overrides the family defaults where the family supports it (PGD defaults to 'builtin',
    FGSM/APGD/Square to 'torchattacks'), ``cross_check`` ('off', 'headline', 'all':
    :class:`~robustbench_wave.evaluation.plan.CrossCheck`) also runs every other back-end of each gradient
    attack on the points the primary one attacked, as records of attack ``name@backend`` whose breaks count.

    The keywords never change the records. ``surrogate`` crafts the transfer attacks (``surrogate_name``
    names it in ``meta.json``); ``example_ids`` (default ``0..N-1``) are the images' ids in the whole run;
    ``batch_size``, ``device`` (checked against the model's), ``progress`` and ``cache_dir`` (finished chunks,
    resumed when the configuration is unchanged) change only speed and memory. ``specs`` (e.g. the hashes
    of the zoo specs that built ``model`` and ``surrogate``) identify what the weights alone do not: a cached
    chunk made under other specs is never resumed; ``extra_meta`` joins the model's ``meta.json`` entry.
    ``save_adversarial`` keeps the audited points that broke examples (``result.adversarial[model_name]``,
    :mod:`adversarial`); a cached chunk without its points is then computed again (same records).
    ``prior_records`` (this model's records of an earlier evaluation of the same examples and modes, e.g.
    the suite before an escalation, :mod:`escalation`) start the running worst case: with ``skip_broken``
    the points they broke are recorded as skipped, as if this suite's entries had followed theirs (a caller
    that resumes such an evaluation puts the prior's digest into ``specs``).
    """
    t_start = time.perf_counter()
    settings = settings or EvalSettings()
    if batch_size < 1:
        raise ValueError("batch_size must be >= 1")
    suite = load_suite(suite)
    data = _check_inputs(images, labels, example_ids)
    modes = resolve_grad_modes(model, settings.grad_modes)
    dev = _check_device(model, device)
    plan, eot = _plan(model, data, suite, settings, surrogate is not None, dev)
    fingerprint = _fingerprint(plan, settings, data, model, surrogate, modes, specs, eot)
    cache = ChunkCache(cache_dir, fingerprint) if cache_dir is not None else None
    predictor = _predictor(eot, settings.seed, batch_size, dev)
    with _attack_context(model, surrogate, settings.seed, settings.num_classes, eot.draw_rows) as ctx:
        run, clean = _start(GradSafe(model), data, modes, plan, ctx, settings, predictor)
        if prior_records is not None:
            run.state.apply_records(prior_records, run.ids.tolist())
        run.adversarial = AdversarialSet(settings.model_name) if save_adversarial else None
        chunks, resumed = _attack_all(run, plan, cache, progress)
    model_run = ModelRun(
        name=settings.model_name,
        model=model,
        modes=modes,
        clean_correct=run.clean_correct,
        surrogate=surrogate,
        surrogate_name=surrogate_name,
        timing=[clean[1]] + [t for c in chunks for t in c[1]],
        resumed=resumed,
        seconds=time.perf_counter() - t_start,
        extra=extra_meta,
        eot=eot.to_meta(),
    )
    meta = build_meta(
        plan, settings, data, model_run, device=dev, batch_size=batch_size, fingerprint=fingerprint
    )
    return _result(clean[0], chunks, meta, run.adversarial)


def _result(
    clean: list[pd.DataFrame], chunks: list[Chunk], meta: dict[str, Any], adversarial: AdversarialSet | None
) -> EvaluationResult:
    """The records in suite order (clean first), each cross-check after its primary attack, the meta and
    (``save_adversarial``) the points that broke examples."""
    kept = {adversarial.model: adversarial} if adversarial is not None else {}
    return EvaluationResult(rec.concat(clean + [c[0] for c in chunks]), meta, adversarial=kept)


def _plan(
    model: nn.Module,
    data: Examples,
    suite: Suite,
    settings: EvalSettings,
    has_surrogate: bool,
    dev: torch.device,
) -> tuple[Plan, EotPlan]:
    """What runs on this model: the randomness protocol it needs (EOT for a randomised model), then the suite's
    entries fitted to it, without those it cannot run under that protocol."""
    eot = decide(model, data.images, data.labels, settings.eot, settings.seed, dev)
    suite, eot = eot.apply(suite)
    plan = Plan.make(
        suite, settings.dataset, settings.backend, has_surrogate, data.images, settings.cross_check,
        model=model, model_name=settings.model_name,
    )  # fmt: skip
    return _skip(plan, eot.skipped), eot


def _predictor(eot: EotPlan, seed: int, batch_size: int, dev: torch.device) -> Predictor:
    """Single draws for a deterministic model (as called); for a randomised model K draws per prediction on
    common random numbers per example (its records then do not depend on ``batch_size``); under ``--eot on``
    for a deterministic model K seeded draws per call."""
    return Predictor(
        batch_size,
        dev,
        eot.draws,
        seed if eot.changes_records else None,
        rows=eot.draw_rows,
        common=eot.stochastic,
    )


def _skip(plan: Plan, skipped: Mapping[str, str]) -> Plan:
    """``plan`` without the attacks in ``skipped`` (name -> why): this model's, so they join the entries it
    cannot run (``Plan.not_applicable``, its meta.json ``plan``), not those skipped for every model."""
    if not skipped:
        return plan
    return dataclasses.replace(
        plan,
        entries=[e for e in plan.entries if e.name not in skipped],
        not_applicable={**plan.not_applicable, **skipped},
        cross={name: c for name, c in plan.cross.items() if name not in skipped},
    )


def _start(
    model: nn.Module,
    data: Examples,
    modes: list[str],
    plan: Plan,
    ctx: RunContext,
    settings: EvalSettings,
    predictor: Predictor,
) -> tuple[_Run, tuple[list[pd.DataFrame], dict[str, Any]]]:
    """Clean predictions: the run's starting worst case, and the clean records with their timing."""
    images, labels, ids = data.tensors()
    t0 = time.perf_counter()
    pred, loss = predictor(model, images, labels, "clean", ids=ids)
    clean_correct = pred == labels
    worst_eps = {t: v for t, v in plan.threat_eps.items() if not is_average_case(t)}
    state = RobustState(clean_correct, modes, worst_eps)
    run = _Run(
        model, images, labels, ids, clean_correct, modes, state, ctx, settings, plan.suite.rng_block,
        predictor.device, predictor.batch_size, predictor,
    )  # fmt: skip
    clean = plan.suite.attacks[0]
    frames = _clean_frames(run, clean, pred, loss)
    return run, (frames, _timing(clean, SHARED, 0.0, CLEAN_BACKEND, len(labels), t0))
