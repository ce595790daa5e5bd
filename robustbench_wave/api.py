"""``robustbench_wave.benchmark``: evaluate one model in one call, in RobustBench's shape
(``benchmark(model, n_examples=..., dataset=..., threat_model=..., eps=..., device=..., batch_size=...)``), and
get back what the attack command writes: the tables, the gradient-masking checklist and the verdict.

It is the attack command run from Python, not a second implementation: the keywords become the command's
flags and are parsed by its parser (:func:`robustbench_wave.attack.resolve`), so every default -- the suite,
``cross_check``, the gradient modes, EOT, the surrogate -- is the command line's, and bad input is refused the
same way (here as ValueError). The model is a zoo name, an external reference (``timm:ARCH``,
``MODULE:FACTORY``) or an ``nn.Module`` already in memory taking [0, 1] images to logits; the run folder goes
to ``out`` (kept, resumable) or to a temporary folder that is removed once its files are read back.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import math
import sys
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
from torch import nn

from robustbench_wave import attack, attackrun
from robustbench_wave.attacks import parse_eps
from robustbench_wave.distributed import DistContext, resolve_device
from robustbench_wave.evaluation.chunks import tensor_sha256
from robustbench_wave.evaluation.metrics import (
    check_on_grid,
    clean_correct,
    declared_reference,
    reference_eps,
    robust_accuracy,
)
from robustbench_wave.evaluation.records import read_run
from robustbench_wave.evaluation.sharding import Shard

log = logging.getLogger(__name__)

#: The record name of an in-memory model when no ``model_name`` is given.
DEFAULT_MODEL_NAME = "model"


@dataclass(frozen=True)
class BenchmarkResult:
    """What one :func:`benchmark` call measured. ``clean_accuracy`` and ``robust_accuracy`` are RobustBench's
    two numbers (the model's per-example worst case over every attack and gradient mode at ``threat_model``
    and ``eps``, a budget that was attacked); :meth:`robust_accuracy_at` gives it at any other attacked
    budget and refuses one that was not; the rest is the run folder's content: ``summary`` (summary.csv), ``table`` (table.txt, as
    printed by the attack command), ``checklist`` (diagnostics.csv: one row per check, model and gradient
    mode; empty with ``diagnostics=False``), ``verdict`` (verdict.json; empty without diagnostics)."""

    model: str
    threat_model: str
    eps: float
    clean_accuracy: float
    robust_accuracy: float
    records: pd.DataFrame
    summary: pd.DataFrame
    table: str
    checklist: pd.DataFrame
    verdict: dict[str, Any] = field(default_factory=dict)
    run_dir: Path | None = None  # None: the run went to a temporary folder, now removed

    def __iter__(self) -> Iterator[float]:
        """``clean_acc, robust_acc = benchmark(...)``, as with RobustBench."""
        return iter((self.clean_accuracy, self.robust_accuracy))

    def robust_accuracy_at(self, eps: float | str, threat: str | None = None) -> float:
        """The model's worst-case robust accuracy at a budget of ``threat`` (default ``threat_model``) that was
        attacked; ValueError naming the attacked grid for any other (never a neighbouring budget's number)."""
        threat = threat or self.threat_model
        rows = self.records[self.records["model"] == self.model]
        return robust_accuracy(rows, threat, check_on_grid(rows, threat, parse_eps(eps, where="eps")))[0]


def benchmark(
    model: nn.Module | str,
    n_examples: int | None = None,
    dataset: str | None = None,
    threat_model: str = "Linf",
    *,
    eps: float | str | Sequence[float | str] | None = None,
    suite: str | None = None,
    model_name: str | None = None,
    device: str | None = None,
    batch_size: int | None = None,
    seed: int | None = None,
    cross_check: str | None = None,
    grad_modes: Sequence[str] | None = None,
    eot: str | None = None,
    surrogate: str | None = None,
    diagnostics: bool = True,
    progress: bool | None = None,
    results_dir: str | Path | None = None,
    out: str | Path | None = None,
    flags: Sequence[str] = (),
) -> BenchmarkResult:
    """Attack ``model`` with a suite on the first ``n_examples`` test images of ``dataset``, run the checklist
    and the verdict, and return the tables (:class:`BenchmarkResult`). A keyword left at None takes the attack
    command's default (``python -m robustbench_wave.attack --help``); ``flags`` passes any other of its flags
    as written there, e.g. ``["--train-seed", "1"]``. ``eps`` (a number, a fraction such as ``"8/255"``, or
    several) is the grid: the suite's attacks of ``threat_model`` run at exactly these budgets (``--eps``), the
    other threats not at all, and ``robust_accuracy`` is at the largest; without it, the suite's grid and its
    reference budget (declared, else the middle of the grid). An in-memory model is put in
    eval mode and attacked under the record name ``model_name`` (default ``model``); ``results_dir`` is where
    trained zoo models (and the default transfer surrogate) are found. ``progress`` shows the attack's
    progress bars (default: when run interactively, :func:`interactive`). ValueError on bad input."""
    name = model if isinstance(model, str) else (model_name or DEFAULT_MODEL_NAME)
    argv = _argv(name, locals()) + list(flags)  # locals(): the keywords, before any other local exists
    with contextlib.ExitStack() as stack:
        if out is None:
            argv += ["--out", stack.enter_context(tempfile.TemporaryDirectory(prefix="rbw-benchmark-"))]
        settings, options, suite_, modes = _resolve(argv)
        loaded = None if isinstance(model, str) else {name: (model.eval(), _meta(model))}
        command = f"robustbench_wave.benchmark({', '.join(argv)})"
        try:
            job = attackrun.prepare_job(settings, options, suite_, modes, command, _echo, loaded=loaded)
            attackrun.run_job(job, Shard(), DistContext(device=resolve_device(device or "auto")))
        except SystemExit as err:  # the attack command's one-line refusals
            raise ValueError(str(err.code)) from None
        return _read_back(job.run_dir, settings.key(name), threat_model, kept=out is not None)


#: Keyword -> attack command flag, for the keywords given as values.
_FLAGS = {
    "n_examples": "--n-examples", "dataset": "--dataset", "suite": "--suite", "device": "--device",
    "batch_size": "--batch-size", "seed": "--seed", "cross_check": "--cross-check", "eot": "--eot",
    "surrogate": "--surrogate", "results_dir": "--results-dir", "out": "--out",
}  # fmt: skip


def _argv(name: str, given: dict[str, Any]) -> list[str]:
    """The attack command's arguments for the keywords that were given (None: the command's default)."""
    progress = given.get("progress")
    argv = ["--model", name] + (
        [] if (interactive() if progress is None else progress) else ["--no-progress"]
    )
    argv += [a for key, flag in _FLAGS.items() if given[key] is not None for a in (flag, str(given[key]))]
    argv += [a for mode in given["grad_modes"] or () for a in ("--grad-modes", mode)]
    argv += [a for e in _budget_list(given["eps"]) for a in ("--eps", f"{given['threat_model']}={e}")]
    return argv + ([] if given["diagnostics"] else ["--no-diagnostics"])


def _budget_list(eps: Any) -> list[str]:
    """``eps`` as the attack command's budget texts (none for None)."""
    if eps is None:
        return []
    values = [eps] if isinstance(eps, str | int | float) else list(eps)
    if not values:
        raise ValueError("eps names no budget; give a number, a fraction string or several")
    return [e if isinstance(e, str) else repr(float(e)) for e in values]


def interactive() -> bool:
    """A person is watching: a terminal on stderr (where the bars go) or a Jupyter kernel (tqdm.auto's
    widgets)."""
    return "ipykernel" in sys.modules or bool(getattr(sys.stderr, "isatty", lambda: False)())


def _resolve(argv: list[str]) -> tuple[attackrun.RunSettings, attackrun.RunOptions, Any, list[str]]:
    """:func:`robustbench_wave.attack.resolve`, its refusals (argparse's line on stderr, or SystemExit's
    message) as ValueError."""
    stderr = io.StringIO()
    try:
        with contextlib.redirect_stderr(stderr):
            return attack.resolve(argv)
    except SystemExit as err:
        message = err.code if isinstance(err.code, str) else stderr.getvalue().strip()
        raise ValueError(message or f"the attack command refused {argv} (exit {err.code})") from None


def _meta(model: nn.Module) -> dict[str, Any]:
    """An in-memory model's metadata: the hash of its weights and buffers stands for a checkpoint's, so a
    run folder (``out``) holding another model's run is refused instead of resumed."""
    state = sorted(model.state_dict().items())
    digest = tensor_sha256(*(t for _, t in state)) if state else ""
    return {"checkpoint_sha256": digest, "run_dir": None}


def _echo(msg: str) -> None:
    if msg.strip():
        log.info("%s", msg)


def _read_back(run_dir: Path, key: str, threat: str, kept: bool) -> BenchmarkResult:
    """The run folder's tables, checklist and verdict, and the model's two headline numbers at the threat's
    reference budget (the largest ``eps`` given, else the suite's declared one or the middle of its grid)."""
    records, meta = read_run(run_dir)
    rows = records[records["model"] == key]
    chosen = reference_eps(rows, threat, declared=declared_reference(meta))
    if chosen is None:
        raise ValueError(
            f"threat_model {threat!r} was not attacked; the run has {sorted(set(rows['threat']))}"
        )
    clean = clean_correct(rows)
    diagnostics = run_dir / "diagnostics.csv"
    verdict = run_dir / "verdict.json"
    return BenchmarkResult(
        model=key,
        threat_model=threat,
        eps=float(chosen),
        clean_accuracy=float(clean.mean()) if len(clean) else math.nan,
        robust_accuracy=robust_accuracy(rows, threat, check_on_grid(rows, threat, chosen))[0],
        records=records,
        summary=pd.read_csv(run_dir / "summary.csv"),
        table=(run_dir / "table.txt").read_text(encoding="utf-8"),
        checklist=pd.read_csv(diagnostics) if diagnostics.exists() else pd.DataFrame(),
        verdict=json.loads(verdict.read_text(encoding="utf-8")) if verdict.exists() else {},
        run_dir=run_dir if kept else None,
    )


__all__ = ["BenchmarkResult", "benchmark"]
