"""Evaluate any ``torch.nn.Module`` classifier on [0,1] inputs against an attack suite (RobustBench's spirit).

    from robustbench_wave.evaluation.evaluate import evaluate
    result = evaluate(model, images, labels, "default", dataset="fashion-mnist", model_name="wavelet")
    print(result)                  # readable table;  result.records / result.meta / result.table()
    result.save("results/attack/fashion-mnist/my-run")

How the numbers are made honest (Croce & Hein 2020; Carlini et al. 2019; Athalye et al. 2018):

* Gradient modes: a model with a fixed front-end (``has_fixed_front_end``) is attacked under every mode in
  ``grad_modes`` (default exact, blocked, bpda), one row each. Attacks that never differentiate the target
  (noise, Square, transfer) are *shared*: they run once, under the forward pass every mode has in common, on
  the points still robust in at least one mode; their records are replicated into every mode's rows, where a
  point already broken in that mode is recorded as skipped. So every mode's worst case includes them.
* Per-example worst case: with ``skip_broken`` (default) each attack runs at each eps (ascending) only on
  points still robust at that eps; a skipped point is recorded with ``attacked=False, correct=False``.
  ``skip_broken=False`` runs every attack on every clean-correct point (for per-attack comparisons).
* Budget audit on every returned point (:func:`bookkeeping.audit`); predictions are recomputed here.
* Per-example randomness: results do not depend on ``batch_size`` (builtin attacks seed each example;
  library attacks run on fixed blocks of example ids, ``suite.rng_block``, each with its own seed).
* Resume: with ``cache_dir`` every finished (model, attack, grad mode) chunk is saved and reused when the
  configuration (suite, data, weights, seed, modes, backend) is unchanged.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import logging
import math
import re
import time
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch
from torch import nn
from tqdm.auto import tqdm

from robustbench_wave.attacks.budget import audit
from robustbench_wave.attacks.runners import (
    GradSafe,
    RunContext,
    RunnerSpec,
    attack_mode,
    derive_seed,
    get_runner,
    input_gradient_blocked,
    model_device,
    seeded,
)
from robustbench_wave.attacks.suite import BACKENDS, AttackEntry, Suite, load_suite
from robustbench_wave.evaluation import records as rec
from robustbench_wave.evaluation.state import RobustState
from robustbench_wave.io import atomic_write_json, provenance
from robustbench_wave.models.frontend import GradMode, grad_mode, has_fixed_front_end
from robustbench_wave.reporting import tables

log = logging.getLogger(__name__)
SHARED = "shared"
ALL_MODES = [m.value for m in GradMode]


@dataclass
class EvaluationResult:
    """Per-example records, provenance and the tables computed from them."""

    records: pd.DataFrame
    meta: dict[str, Any]
    crosscheck_records: pd.DataFrame | None = None
    _summary: pd.DataFrame | None = field(default=None, repr=False)

    def summary(self) -> pd.DataFrame:
        """Tidy numeric summary with Wilson intervals (see :func:`tables.summarize`)."""
        if self._summary is None:
            self._summary = tables.summarize(self.records)
        return self._summary

    def table(self, formatted: bool = False) -> pd.DataFrame:
        """Rows (model, grad_mode) incl. the per-model ``worst`` row; columns (threat, attack, eps)."""
        s = self.summary()
        return tables.formatted_table(s) if formatted else tables.comparison_table(s)

    def crosscheck(self) -> pd.DataFrame | None:
        if self.crosscheck_records is None or not len(self.crosscheck_records):
            return None
        return tables.crosscheck_table(self.records, self.crosscheck_records)

    def robust_accuracy(
        self, threat: str, eps: float, *, model: str | None = None, grad_mode: str = "worst"
    ) -> float:
        """Worst-case robust accuracy at (threat, eps); ``grad_mode='worst'`` falls back to the only mode."""
        s = self.summary()
        s = s[(s["attack"] == tables.WORST) & (s["threat"] == threat) & np.isclose(s["eps"], eps)]
        if model is not None:
            s = s[s["model"] == model]
        if grad_mode not in set(s["grad_mode"]):
            grad_mode = "exact"
        s = s[s["grad_mode"] == grad_mode]
        if len(s) != 1:
            raise ValueError(
                f"no unique worst-case entry for {threat} eps={eps} model={model}: {len(s)} rows"
            )
        return float(s["robust_accuracy"].iloc[0])

    def save(self, out_dir: str | Path) -> dict[str, Path]:
        """Write records.csv.gz, meta.json (+ cross-check records) and every table into ``out_dir``."""
        out_dir = Path(out_dir)
        paths = {"records": rec.write_records(self.records, out_dir / rec.RECORDS_FILE)}
        if self.crosscheck_records is not None and len(self.crosscheck_records):
            paths["crosscheck_records"] = rec.write_records(
                self.crosscheck_records, out_dir / rec.CROSSCHECK_FILE
            )
        paths["meta"] = rec.write_meta(self.meta, out_dir / rec.META_FILE)
        paths.update(
            tables.write_tables(self.records, out_dir, meta=self.meta, cross=self.crosscheck_records)
        )
        return paths

    @classmethod
    def load(cls, run_dir: str | Path) -> EvaluationResult:
        records, meta, cross = rec.read_run(run_dir)
        return cls(records, meta, cross)

    @classmethod
    def merge(cls, results: Sequence[EvaluationResult]) -> EvaluationResult:
        """One result for several models evaluated on the same data and suite."""
        if not results:
            raise ValueError("nothing to merge")
        meta = copy.deepcopy(results[0].meta)
        for r in results[1:]:
            meta.setdefault("models", {}).update(copy.deepcopy(r.meta.get("models", {})))
        cross = [r.crosscheck_records for r in results if r.crosscheck_records is not None]
        return cls(
            rec.concat([r.records for r in results]),
            meta,
            rec.concat(cross) if cross else None,
        )

    def __str__(self) -> str:
        return tables.render_terminal(self.summary(), title=tables.table_title(self.records, self.meta))


# ------------------------------------------------------------------------------------------------- helpers


def resolve_grad_modes(model: nn.Module, grad_modes: Sequence[str] | None) -> list[str]:
    """Modes to evaluate: all three for a model with a fixed front-end, only 'exact' otherwise."""
    if not has_fixed_front_end(model):
        if grad_modes and set(grad_modes) - {"exact"}:
            log.info("model has no fixed front-end: blocked/bpda equal exact, evaluating 'exact' only")
        return ["exact"]
    modes = [GradMode.parse(m).value for m in (grad_modes or ALL_MODES)]
    return sorted(dict.fromkeys(modes), key=ALL_MODES.index)


def state_sha256(model: nn.Module) -> str:
    """Hash of the state dict (names, dtypes, shapes and bytes): identifies the weights being attacked."""
    h = hashlib.sha256()
    for name, t in sorted(model.state_dict().items()):
        t = t.detach().cpu().contiguous()
        h.update(f"{name}|{t.dtype}|{tuple(t.shape)}|".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def _tensor_sha256(*tensors: torch.Tensor) -> str:
    h = hashlib.sha256()
    for t in tensors:
        t = t.detach().cpu().contiguous()
        h.update(f"{t.dtype}|{tuple(t.shape)}|".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", name).strip("-") or "model"


def _check_inputs(
    images: torch.Tensor, labels: torch.Tensor, example_ids: Any
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
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
    return images.cpu(), labels.cpu(), ids.cpu()


@torch.no_grad()
def _predict(
    model: nn.Module, x: torch.Tensor, y: torch.Tensor, batch_size: int, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    preds, losses = [], []
    for i in range(0, len(x), batch_size):
        logits = model(x[i : i + batch_size].to(device)).float()
        yb = y[i : i + batch_size].to(device)
        preds.append(logits.argmax(1).cpu())
        losses.append(nn.functional.cross_entropy(logits, yb, reduction="none").cpu())
    if not preds:
        return torch.zeros(0, dtype=torch.long), torch.zeros(0)
    return torch.cat(preds), torch.cat(losses)


def _groups(
    spec: RunnerSpec, ids: torch.Tensor, batch_size: int, rng_block: int
) -> list[tuple[torch.Tensor, int | None]]:
    """Index groups to attack together: batches for per-example-seeded runners, id blocks for the others."""
    if spec.per_example_rng:
        pos = torch.arange(len(ids))
        return [(pos[i : i + batch_size], None) for i in range(0, len(ids), batch_size)]
    blocks = torch.div(ids, rng_block, rounding_mode="floor")
    return [((blocks == b).nonzero().flatten(), int(b)) for b in torch.unique(blocks).tolist()]


def _execute(
    spec: RunnerSpec,
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    ids: torch.Tensor,
    eps: float,
    entry: AttackEntry,
    ctx: RunContext,
    *,
    batch_size: int,
    rng_block: int,
    device: torch.device,
    progress: Callable[[int, int], None] | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Run one attack at one eps on the given points; returns (x_adv on CPU, correct_last or None)."""
    if len(x) == 0 or eps == 0:  # nothing to attack / nothing an attack may change
        return x.clone(), None
    out = torch.empty_like(x)
    last: torch.Tensor | None = None
    groups = _groups(spec, ids, batch_size, rng_block)
    for i, (pos, block) in enumerate(groups):
        if progress is not None:
            progress(i, len(groups))
        ctx.block_seed = derive_seed(ctx.seed, entry.name, repr(eps), "block", block) % (1 << 31)
        with seeded(ctx.block_seed, device):
            res = spec.fn(model, x[pos].to(device), y[pos].to(device), ids[pos], eps, entry, ctx)
        out[pos] = res.x_adv.detach().to(out.device, out.dtype)
        if res.correct_last is not None:
            if last is None:
                last = torch.ones(len(x), dtype=torch.bool)
            last[pos] = res.correct_last.cpu()
    return out, last


class ChunkCache:
    """Finished (model, attack, grad mode) chunks on disk, valid only for the same configuration."""

    def __init__(self, directory: str | Path, fingerprint: str) -> None:
        self.dir = Path(directory)
        self.fingerprint = fingerprint

    def _stem(self, model: str, attack: str, mode: str) -> Path:
        return self.dir / f"{_safe(model)}__{_safe(attack)}__{mode}"

    def load(
        self, model: str, attack: str, mode: str, need_cross: bool
    ) -> tuple[pd.DataFrame, pd.DataFrame | None, list] | None:
        stem = self._stem(model, attack, mode)
        info_path = stem.with_suffix(".json")
        if not info_path.exists():
            return None
        info = json.loads(info_path.read_text(encoding="utf-8"))
        if info.get("fingerprint") != self.fingerprint:
            log.info("ignoring stale chunk %s (configuration changed)", info_path.name)
            return None
        if need_cross and not info.get("crosscheck"):
            return None
        records = rec.read_records(Path(f"{stem}.csv.gz"))
        xpath = Path(f"{stem}.xcheck.csv.gz")
        cross = rec.read_records(xpath) if xpath.exists() else None
        return records, cross, info.get("timing", [])

    def save(
        self,
        model: str,
        attack: str,
        mode: str,
        records: pd.DataFrame,
        cross: pd.DataFrame | None,
        timing: list,
        crosscheck: bool,
    ) -> None:
        stem = self._stem(model, attack, mode)
        rec.write_records(records, Path(f"{stem}.csv.gz"))
        if cross is not None:
            rec.write_records(cross, Path(f"{stem}.xcheck.csv.gz"))
        # the JSON is written last: its presence marks the chunk complete
        atomic_write_json(
            stem.with_suffix(".json"),
            {"fingerprint": self.fingerprint, "timing": timing, "crosscheck": crosscheck},
        )


@dataclass
class _Run:
    """Everything one model's evaluation shares between chunks."""

    model: nn.Module  # GradSafe-wrapped target
    images: torch.Tensor
    labels: torch.Tensor
    ids: torch.Tensor
    clean_correct: torch.Tensor
    modes: list[str]
    state: RobustState
    ctx: RunContext
    base: dict[str, Any]  # constant record columns (model, dataset)
    skip_broken: bool
    batch_size: int
    rng_block: int
    device: torch.device
    pbar: Any = None  # tqdm bar (or None): inner progress per batch / id block


def _frame(
    run: _Run,
    entry: AttackEntry,
    mode: str,
    eps: float,
    backend: str,
    attacked: torch.Tensor,
    idx: torch.Tensor,
    pred: torch.Tensor,
    loss: torch.Tensor,
    norms: torch.Tensor,
    last: torch.Tensor | None,
) -> pd.DataFrame:
    """Records for every example at (entry, mode, eps); values only where ``attacked``."""
    n = len(run.labels)
    pred_full = np.full(n, None, dtype=object)
    norm_full = np.full(n, np.nan)
    loss_full = np.full(n, np.nan)
    last_full = np.full(n, None, dtype=object)
    correct_full = np.zeros(n, dtype=bool)
    sel = attacked[idx].numpy()  # which of the points in idx count for this mode
    rows = idx.numpy()[sel]
    pred_full[rows] = pred.numpy()[sel].astype(object)
    correct_full[rows] = (pred == run.labels[idx]).numpy()[sel]
    norm_full[rows] = norms.numpy()[sel]
    loss_full[rows] = loss.numpy()[sel]
    if last is not None:
        last_full[rows] = last.numpy()[sel].astype(object)
    return rec.make_frame(
        {
            **run.base,
            "grad_mode": mode,
            "attack": entry.name,
            "family": entry.family,
            "kind": entry.kind,
            "threat": entry.threat,
            "eps": float(eps),
            "backend": backend,
            "example_id": run.ids.numpy(),
            "label": run.labels.numpy(),
            "pred": pred_full,
            "correct": correct_full,
            "norm": norm_full,
            "attacked": attacked.numpy(),
            "correct_last": last_full,
            "loss_final": loss_full,
        },
        n,
    )


def _progress(run: _Run, label: str, eps: float) -> Callable[[int, int], None] | None:
    if run.pbar is None or run.pbar.disable:
        return None
    return lambda i, n: run.pbar.set_postfix_str(f"{label} eps={tables.format_eps(eps)} batch {i + 1}/{n}")


def _attack_points(
    run: _Run, spec: RunnerSpec, entry: AttackEntry, eps: float, idx: torch.Tensor, run_mode: str, label: str
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """Attack run.images[idx] and return (pred, loss, norms, correct_last) after the budget audit."""
    x = run.images[idx]
    progress = _progress(run, f"{label} [{run_mode}]", eps)
    with grad_mode(run.model, run_mode):
        x_adv, last = _execute(
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
        )
    norms = audit(x, x_adv, eps, entry.threat, label).float()
    pred, loss = _predict(run.model, x_adv, run.labels[idx], run.batch_size, run.device)
    return pred, loss, norms, last


def _run_chunk(
    run: _Run,
    entry: AttackEntry,
    mode: str,
    backend: str,
    eps_list: Sequence[float],
    cross_backends: Sequence[str],
    pbar: Any,
) -> tuple[pd.DataFrame, pd.DataFrame | None, list]:
    spec = get_runner(entry.family, backend)
    rec_modes = run.modes if mode == SHARED else [mode]
    run_mode = "exact" if mode == SHARED else mode
    frames, xframes, timing = [], [], []
    note = None
    if mode != SHARED and "steps" in entry.params and len(run.images):
        with grad_mode(run.model, mode):
            if input_gradient_blocked(run.model.model, run.images[:2].to(run.device)):
                # no gradient reaches the input anywhere: every iterate equals the start, so 1 step == N steps
                entry = dataclasses.replace(entry, params={**entry.params, "steps": 1})
                note = "input gradient structurally zero: ran 1 step (identical to all steps)"
    for eps in eps_list:
        t0 = time.perf_counter()
        eligible = {
            m: (run.state.robust(m, entry.threat, eps) if run.skip_broken else run.clean_correct.clone())
            for m in rec_modes
        }
        target = torch.stack(list(eligible.values())).any(0)
        idx = target.nonzero().flatten()
        pbar.set_postfix_str(f"{entry.name} {mode} eps={tables.format_eps(eps)} n={len(idx)}")
        pred, loss, norms, last = _attack_points(
            run, spec, entry, eps, idx, run_mode, f"{entry.name} ({backend})"
        )
        for m in rec_modes:
            frame = _frame(run, entry, m, eps, backend, eligible[m] & target, idx, pred, loss, norms, last)
            frames.append(frame)
            broken = torch.from_numpy(np.array(frame["attacked"] & ~frame["correct"], dtype=bool))
            run.state.mark_broken(m, entry.threat, eps, broken)
        seconds = time.perf_counter() - t0
        timing.append(
            {
                "attack": entry.name,
                "grad_mode": mode,
                "eps": float(eps),
                "backend": backend,
                "n_attacked": len(idx),
                "seconds": round(seconds, 3),
                **({"note": note} if note else {}),
            }
        )
        for other in cross_backends:
            t1 = time.perf_counter()
            ospec = get_runner(entry.family, other)
            opred, oloss, onorms, olast = _attack_points(
                run, ospec, entry, eps, idx, run_mode, f"{entry.name} ({other})"
            )
            attacked = torch.zeros(len(run.labels), dtype=torch.bool)
            attacked[idx] = True
            xframes.append(_frame(run, entry, mode, eps, other, attacked, idx, opred, oloss, onorms, olast))
            timing.append(
                {
                    "attack": entry.name,
                    "grad_mode": mode,
                    "eps": float(eps),
                    "backend": other,
                    "n_attacked": len(idx),
                    "seconds": round(time.perf_counter() - t1, 3),
                    "crosscheck": True,
                }
            )
        pbar.update(1)
    return rec.concat(frames), (rec.concat(xframes) if cross_backends else None), timing


def _clean_frames(
    run: _Run, entry: AttackEntry, pred: torch.Tensor, loss: torch.Tensor
) -> list[pd.DataFrame]:
    idx = torch.arange(len(run.labels))
    every = torch.ones(len(run.labels), dtype=torch.bool)
    zeros = torch.zeros(len(run.labels))
    return [_frame(run, entry, m, 0.0, "builtin", every, idx, pred, loss, zeros, None) for m in run.modes]


# ---------------------------------------------------------------------------------------------------- API


def evaluate(
    model: nn.Module,
    images: torch.Tensor,
    labels: torch.Tensor,
    suite: str | Path | Suite = "default",
    *,
    dataset: Any = None,
    grad_modes: Sequence[str] | None = None,
    backend: str = "auto",
    seed: int = 0,
    batch_size: int = 128,
    skip_broken: bool = True,
    surrogate: nn.Module | None = None,
    surrogate_name: str | None = None,
    model_name: str = "model",
    progress: bool = True,
    cross_check: bool = False,
    cache_dir: str | Path | None = None,
    example_ids: Sequence[int] | torch.Tensor | None = None,
    device: str | torch.device | None = None,
    extra_meta: dict[str, Any] | None = None,
) -> EvaluationResult:
    """Attack ``model`` (logits from [0,1] images) with every entry of ``suite`` and keep per-example records.

    ``dataset`` (a DatasetInfo or its name) picks the suite's eps block; ``backend`` ('auto', 'builtin',
    'torchattacks', 'foolbox') overrides the family defaults where the family supports it (PGD defaults to
    'builtin', FGSM/APGD/Square to 'torchattacks'); ``cross_check`` runs every other backend of each
    gradient attack on the same points (results in ``crosscheck_records``, never in the worst case).
    """
    t_start = time.perf_counter()
    suite = load_suite(suite)
    if backend != "auto" and backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}; choose auto or one of {list(BACKENDS)}")
    if batch_size < 1:
        raise ValueError("batch_size must be >= 1")
    images, labels, ids = _check_inputs(images, labels, example_ids)
    modes = resolve_grad_modes(model, grad_modes)
    dev = model_device(model)
    want = torch.device(device) if device is not None else dev
    if want.type != dev.type or want.index not in (None, dev.index):
        raise ValueError(f"the model lives on {dev} but device={device!r}; move it first (model.to(device))")
    ds_name = str(getattr(dataset, "name", dataset) if dataset is not None else "custom")
    entry_eps = {e.name: suite.entry_eps(e, dataset) for e in suite.attacks}
    threat_eps = suite.resolved_eps(dataset)
    max_l2 = math.sqrt(images[0].numel())
    if any(e > max_l2 for e in threat_eps.get("L2", [])):
        raise ValueError(
            f"L2 budgets {threat_eps['L2']} exceed the largest possible distance sqrt(C*H*W) = {max_l2:.3g}"
        )
    skipped: dict[str, str] = {}
    entries = []
    for e in suite.attacks[1:]:
        if e.family == "transfer" and surrogate is None:
            skipped[e.name] = "no surrogate model given"
            log.warning(
                "skipping %s: transfer attacks need a surrogate model (surrogate=... / --surrogate)", e.name
            )
            continue
        entries.append(e)
    backends = {e.name: e.resolve_backend(backend) for e in suite.attacks}
    fingerprint = hashlib.sha256(
        json.dumps(
            {
                "suite": {k: v for k, v in suite.to_dict().items() if k not in ("description", "source")},
                "eps": threat_eps,
                "data": _tensor_sha256(images, labels, ids),
                "weights": state_sha256(model),
                "surrogate": state_sha256(surrogate) if surrogate is not None else None,
                "seed": seed,
                "skip_broken": skip_broken,
                "backends": backends,
                "modes": modes,
                "dataset": ds_name,
            },
            sort_keys=True,
        ).encode()
    ).hexdigest()
    cache = ChunkCache(cache_dir, fingerprint) if cache_dir is not None else None
    frames: list[pd.DataFrame] = []
    xframes: list[pd.DataFrame] = []
    timing: list[dict[str, Any]] = []
    resumed = 0
    with ExitStack() as stack:
        stack.enter_context(attack_mode(model))
        if surrogate is not None:
            stack.enter_context(attack_mode(surrogate))
            stack.enter_context(grad_mode(surrogate, "exact"))
        wrapped = GradSafe(model)
        ctx = RunContext(seed=seed, surrogate=GradSafe(surrogate) if surrogate is not None else None)
        t0 = time.perf_counter()
        pred, loss = _predict(wrapped, images, labels, batch_size, dev)
        clean_correct = pred == labels
        run = _Run(
            wrapped,
            images,
            labels,
            ids,
            clean_correct,
            modes,
            RobustState(clean_correct, modes, threat_eps),
            ctx,
            {"model": model_name, "dataset": ds_name},
            skip_broken,
            batch_size,
            suite.rng_block,
            dev,
        )
        frames += _clean_frames(run, suite.attacks[0], pred, loss)
        timing.append(
            {
                "attack": suite.attacks[0].name,
                "grad_mode": SHARED,
                "eps": 0.0,
                "backend": "builtin",
                "n_attacked": len(labels),
                "seconds": round(time.perf_counter() - t0, 3),
            }
        )
        total = sum(len(entry_eps[e.name]) * (len(modes) if e.spec.grad_dependent else 1) for e in entries)
        with tqdm(
            total=total, desc=f"attack {model_name}", unit="step", disable=not progress, leave=False
        ) as pbar:
            run.pbar = pbar
            for entry in entries:
                chosen = backends[entry.name]
                xb = (
                    [b for b in entry.spec.backends if b != chosen]
                    if cross_check and entry.spec.grad_dependent
                    else []
                )
                for mode in modes if entry.spec.grad_dependent else [SHARED]:
                    cached = cache.load(model_name, entry.name, mode, bool(xb)) if cache else None
                    if cached is not None:
                        chunk, xchunk, ctiming = cached
                        run.state.apply_records(chunk, ids.tolist())
                        resumed += 1
                        pbar.update(len(entry_eps[entry.name]))
                    else:
                        chunk, xchunk, ctiming = _run_chunk(
                            run, entry, mode, chosen, entry_eps[entry.name], xb, pbar
                        )
                        if cache:
                            cache.save(model_name, entry.name, mode, chunk, xchunk, ctiming, bool(xb))
                    frames.append(chunk)
                    if xchunk is not None:
                        xframes.append(xchunk)
                    timing += ctiming
                    log.info(
                        "%s %s [%s]: %.1f s", model_name, entry.name, mode, sum(t["seconds"] for t in ctiming)
                    )
    records = rec.concat(frames)
    cross = rec.concat(xframes) if xframes else None
    meta = _meta(
        suite=suite,
        dataset=dataset,
        ds_name=ds_name,
        threat_eps=threat_eps,
        entry_eps=entry_eps,
        backends=backends,
        skipped=skipped,
        images=images,
        labels=labels,
        ids=ids,
        seed=seed,
        batch_size=batch_size,
        skip_broken=skip_broken,
        backend=backend,
        cross_check=cross_check,
        device=dev,
        fingerprint=fingerprint,
        model=model,
        model_name=model_name,
        modes=modes,
        clean_correct=clean_correct,
        surrogate=surrogate,
        surrogate_name=surrogate_name,
        timing=timing,
        resumed=resumed,
        seconds=time.perf_counter() - t_start,
        extra_meta=extra_meta,
    )
    return EvaluationResult(records, meta, cross)


def _meta(**kw: Any) -> dict[str, Any]:
    suite: Suite = kw["suite"]
    info = kw["dataset"]
    info_dict = (
        dataclasses.asdict(info) if dataclasses.is_dataclass(info) and not isinstance(info, type) else None
    )
    attacks = {}
    for e in suite.attacks:
        attacks[e.name] = {
            "family": e.family,
            "kind": e.kind,
            "threat": e.threat,
            "backend": kw["backends"][e.name],
            "eps": list(kw["entry_eps"][e.name]),
            "params": dict(e.params),
            "grad_modes": "each" if e.spec.grad_dependent else "shared (run once, replicated to every mode)",
            "skipped": kw["skipped"].get(e.name),
        }
    model: nn.Module = kw["model"]
    surrogate = kw["surrogate"]
    model_meta = {
        "grad_modes": kw["modes"],
        "has_fixed_front_end": has_fixed_front_end(model),
        "param_sha256": state_sha256(model),
        "n_parameters": sum(p.numel() for p in model.parameters()),
        "clean_accuracy": float(kw["clean_correct"].float().mean()) if len(kw["clean_correct"]) else math.nan,
        "surrogate": None
        if surrogate is None
        else {"name": kw["surrogate_name"], "param_sha256": state_sha256(surrogate)},
        "timing": kw["timing"],
        "seconds_total": round(kw["seconds"], 3),  # this call (short when chunks were resumed)
        "seconds_attacks": round(sum(t["seconds"] for t in kw["timing"]), 3),  # when they were computed
        "resumed_chunks": kw["resumed"],
        **(kw["extra_meta"] or {}),
    }
    return {
        "schema_version": rec.SCHEMA_VERSION,
        "created_utc": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "provenance": provenance(),
        "suite": suite.to_dict(),
        "dataset": {
            "name": kw["ds_name"],
            "eps_key": suite.eps_key(info),
            "eps": kw["threat_eps"],
            "info": info_dict,
        },
        "n_examples": len(kw["labels"]),
        "example_ids": {
            "first": int(kw["ids"][0]) if len(kw["ids"]) else None,
            "last": int(kw["ids"][-1]) if len(kw["ids"]) else None,
        },
        "data_sha256": _tensor_sha256(kw["images"], kw["labels"], kw["ids"]),
        "seeds": {"attack_seed": kw["seed"]},
        "settings": {
            "batch_size": kw["batch_size"],
            "skip_broken": kw["skip_broken"],
            "backend": kw["backend"],
            "cross_check": kw["cross_check"],
            "rng_block": suite.rng_block,
            "device": str(kw["device"]),
            "torch_num_threads": torch.get_num_threads(),
            "fingerprint": kw["fingerprint"],
        },
        "attacks": attacks,
        "models": {kw["model_name"]: model_meta},
    }
