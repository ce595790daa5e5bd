"""``robustbench_wave.benchmark``: evaluate one model in one call, in RobustBench's shape
(``benchmark(model, n_examples=..., dataset=..., threat_model=..., eps=..., device=..., batch_size=...)``), and
get back what the attack command writes: the tables, the gradient-masking checklist and the verdict.

It is the attack command's run from Python, not a second implementation: the keywords build the same
:class:`~robustbench_wave.attackrun.RunSettings` and :class:`~robustbench_wave.attackrun.RunOptions` the
command builds from its flags, and a keyword left at None takes the field's default -- the command's flag
default, read from the same field -- (the suite, ``cross_check``, the gradient modes, EOT, the surrogate); bad
input is refused with the same checks (ValueError). The model is a zoo name, an external reference
(``timm:ARCH``, ``MODULE:FACTORY``, with ``weights``) or an ``nn.Module`` already in memory taking [0, 1] images
to logits; the run folder goes to ``out`` (kept, resumable) or to a temporary folder that is removed once its
files are read back.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import math
import shutil
import sys
import tempfile
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
from torch import nn

from robustbench_wave import attackrun
from robustbench_wave.attacks import DEFAULT_SUITE, Suite, parse_eps, parse_threat
from robustbench_wave.attacks.suite import NO_THREAT, THREATS
from robustbench_wave.core.distributed import DistContext, resolve_device
from robustbench_wave.evaluation.chunks import tensor_sha256
from robustbench_wave.evaluation.eot import EotSettings
from robustbench_wave.evaluation.metrics import (
    check_on_grid,
    clean_correct,
    declared_reference,
    reference_eps,
    robust_accuracy,
)
from robustbench_wave.evaluation.records import read_meta, read_run
from robustbench_wave.evaluation.sharding import Shard
from robustbench_wave.evaluation.trust import Standing, Trust
from robustbench_wave.reporting.runs import DIAGNOSTICS_JSON

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
    mode; empty with ``diagnostics=False``), ``verdict`` (verdict.json; empty without diagnostics).

    ``standing`` says what ``robust_accuracy`` is, by the harness's one rule
    (:class:`~robustbench_wave.evaluation.trust.Trust`): ``verified`` (a gradient mode judged by the checklist
    and passed), else ``unverified`` or ``unchecked`` -- an upper bound, never robustness; ``why`` names each
    untrusted mode's reason. Unpacking or printing an upper bound says so (a warning; ``†`` in the repr)."""

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
    standing: str = Standing.UNCHECKED.value
    why: dict[str, str] = field(default_factory=dict)

    @property
    def upper_bound(self) -> bool:
        """Whether ``robust_accuracy`` is only an upper bound (the model is not verified)."""
        return self.standing != Standing.VERIFIED.value

    def __iter__(self) -> Iterator[float]:
        """``clean_acc, robust_acc = benchmark(...)``, as with RobustBench (a warning when the second number is
        an upper bound)."""
        if self.upper_bound:
            warnings.warn(self._bound_words(), UserWarning, stacklevel=2)
        return iter((self.clean_accuracy, self.robust_accuracy))

    def __repr__(self) -> str:
        mark = "†" if self.upper_bound else ""
        return (
            f"BenchmarkResult(model={self.model!r}, threat_model={self.threat_model!r}, eps={self.eps:g}, "
            f"clean_accuracy={self.clean_accuracy:.4f}, robust_accuracy={self.robust_accuracy:.4f}{mark}, "
            f"standing={self.standing!r})"
        )

    def _bound_words(self) -> str:
        why = "; ".join(f"{m}: {w}" for m, w in self.why.items()) or "no gradient mode was verified"
        return (
            f"{self.model}'s robust accuracy {self.robust_accuracy:.4f} is {self.standing}: an upper bound, not "
            f"robustness ({why})"
        )

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
    attacks: Sequence[str] | None = None,
    model_name: str | None = None,
    weights: str | Path | None = None,
    device: str | None = None,
    batch_size: int | None = None,
    seed: int | None = None,
    train_seed: int | None = None,
    cross_check: str | None = None,
    grad_modes: Sequence[str] | None = None,
    eot: str | None = None,
    surrogate: str | None = None,
    diagnostics: bool = True,
    progress: bool | None = None,
    results_dir: str | Path | None = None,
    out: str | Path | None = None,
    overwrite: bool = False,
) -> BenchmarkResult:
    """Attack ``model`` with a suite on the first ``n_examples`` test images of ``dataset``, run the checklist
    and the verdict, and return the tables (:class:`BenchmarkResult`). A keyword left at None takes the attack
    command's default (``python -m robustbench_wave.attack --help``: the defaults of
    :class:`~robustbench_wave.attackrun.RunSettings` and :class:`~robustbench_wave.attackrun.RunOptions`).
    ``eps`` (a number, a fraction such as ``"8/255"``, or several) is the grid: the suite's attacks of
    ``threat_model`` run at exactly these budgets (``--eps``), the other threats not at all, and
    ``robust_accuracy`` is at the largest; without it, the suite's grid and its reference budget (declared,
    else the middle of the grid). ``attacks`` keeps only these suite entries (``--attacks``). An in-memory
    model is put in eval mode, checked and scanned as a loaded one is (``models.intake.prepare``) and attacked
    under the record name ``model_name`` (default ``model``); a ``timm:ARCH`` / ``MODULE:FACTORY`` reference
    loads ``weights`` (safetensors); ``results_dir`` is where trained zoo models (and the default transfer
    surrogate) are found; ``overwrite`` replaces a run of another configuration in ``out``. ``progress`` shows
    the attack's progress bars (default: when run interactively, :func:`interactive`). ValueError on bad input
    (``threat_model`` is read case-insensitively), before any attack; a run that fails later keeps its folder."""
    name = model if isinstance(model, str) else (model_name or DEFAULT_MODEL_NAME)
    request = attackrun.parse_grad_modes(grad_modes) if grad_modes else attackrun.GradModeRequest()
    settings = _run_settings(
        name, weights, request, n_examples, dataset, seed, train_seed, cross_check, eot, surrogate
    )
    threat_model = _threat(threat_model)
    chosen_suite = _check_attacked(_suite(suite, attacks, threat_model, eps), threat_model, settings.dataset)
    with contextlib.ExitStack() as stack:
        folder = Path(out) if out is not None else stack.enter_context(_kept_on_failure())
        options = _run_options(folder, results_dir, overwrite, batch_size, progress, diagnostics)
        attackrun.check_run(settings, options)
        loaded = None if isinstance(model, str) else {name: (model.eval(), _meta(model))}
        command = f"robustbench_wave.benchmark({name!r}, threat_model={threat_model!r}, eps={eps!r})"
        job = attackrun.prepare_job(settings, options, chosen_suite, command, _echo, loaded=loaded)
        attackrun.run_job(job, Shard(), DistContext(device=resolve_device(device or "auto")))
        return _read_back(job.run_dir, settings.key(name), threat_model, kept=out is not None)


def _run_options(
    folder: Path,
    results_dir: str | Path | None,
    overwrite: bool,
    batch_size: int | None,
    progress: bool | None,
    diagnostics: bool,
) -> attackrun.RunOptions:
    """The run's options: each keyword given replaces its field's default (None keeps it)."""
    return attackrun.RunOptions(
        results_dir=Path(_given(results_dir, attackrun.RunOptions.results_dir)),
        out=Path(folder),
        overwrite=overwrite,
        batch_size=_given(batch_size, attackrun.RunOptions.batch_size),
        progress=interactive() if progress is None else progress,
        finalize=attackrun.FinalizeOptions(diagnostics=diagnostics),
    )


def _threat(threat_model: str) -> str:
    """``threat_model`` as the suites spell it (``linf`` -> ``Linf``), refused before any attack when unknown."""
    threat = parse_threat(threat_model, "threat_model")
    if threat == NO_THREAT:
        raise ValueError(f"threat_model {threat_model!r} names no threat; choose one of {', '.join(THREATS)}")
    return threat


def _check_attacked(suite: Suite, threat: str, dataset: str) -> Suite:
    """``suite``, which attacks ``threat`` on ``dataset`` (else refused: no robust accuracy could be read back
    after the run)."""
    attacked = sorted(t for t, budgets in suite.resolved_eps(dataset).items() if budgets)
    if threat not in attacked:
        raise ValueError(
            f"threat_model {threat!r}: suite {suite.name!r} attacks {attacked} on {dataset}; choose one of "
            "them or a suite that attacks it (suite=...)"
        )
    return suite


@contextlib.contextmanager
def _kept_on_failure() -> Iterator[Path]:
    """A temporary run folder: removed once read back, kept (and named, with how to resume) when the run
    fails, so no finished attack is lost."""
    folder = Path(tempfile.mkdtemp(prefix="rbw-benchmark-"))
    try:
        yield folder
    except BaseException as err:
        if any(folder.iterdir()):
            note = f"the run folder {folder} is kept: benchmark(..., out={str(folder)!r}) resumes it"
            log.error("%s", note)
            err.add_note(note)
        else:
            shutil.rmtree(folder, ignore_errors=True)
        raise
    shutil.rmtree(folder, ignore_errors=True)


def _run_settings(
    name: str,
    weights: str | Path | None,
    grad_modes: attackrun.GradModeRequest,
    n_examples: int | None,
    dataset: str | None,
    seed: int | None,
    train_seed: int | None,
    cross_check: str | None,
    eot: str | None,
    surrogate: str | None,
) -> attackrun.RunSettings:
    """The run's settings: each keyword given replaces its field's default (None keeps it)."""
    defaults = attackrun.RunSettings.evaluation
    evaluation = dataclasses.replace(
        defaults,
        dataset=_given(dataset, defaults.dataset),
        seed=_given(seed, defaults.seed),
        cross_check=_given(cross_check, defaults.cross_check),
        eot=defaults.eot if eot is None else EotSettings(eot),
    )
    surrogate = _given(surrogate, attackrun.RunSettings.surrogate)
    flags = attackrun.ExternalFlags([name], surrogate, {name: str(weights)} if weights is not None else None)
    return attackrun.RunSettings(
        [name],
        evaluation,
        n_examples=_given(n_examples, attackrun.RunSettings.n_examples),
        train_seed=_given(train_seed, attackrun.RunSettings.train_seed),
        grad_modes=grad_modes,
        surrogate=surrogate,
        external=attackrun.external_specs(flags),
    )


def _suite(
    suite: str | None,
    attacks: Sequence[str] | None,
    threat: str,
    eps: float | str | Sequence[float | str] | None,
) -> Suite:
    """The suite (only the ``attacks`` named, clean kept) at the budgets ``eps`` of ``threat``, if given."""
    chosen = attackrun.select_suite(suite or DEFAULT_SUITE, None if attacks is None else ",".join(attacks))
    if eps is None:
        return chosen
    values = [eps] if isinstance(eps, str | int | float) else list(eps)
    if not values:
        raise ValueError("eps names no budget; give a number, a fraction string or several")
    budgets = tuple(parse_eps(e, where=f"eps {threat}") for e in values)
    return chosen.with_budgets({threat: budgets})


def _given(value: Any, default: Any) -> Any:
    """A keyword's value, or its field's default when it was left at None."""
    return default if value is None else value


def interactive() -> bool:
    """A person is watching: a terminal on stderr (where the bars go) or a Jupyter kernel (tqdm.auto's
    widgets)."""
    return "ipykernel" in sys.modules or bool(getattr(sys.stderr, "isatty", lambda: False)())


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
    trust = Trust.from_run(meta, read_meta(run_dir / DIAGNOSTICS_JSON).get("models", []))
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
        standing=trust.standing(key).value,
        why=trust.why(key),
    )


__all__ = ["BenchmarkResult", "benchmark"]
