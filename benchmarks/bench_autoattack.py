"""The autoattack suite vs ART's AutoAttack (and the authors' code when installed): time and robust sets.

Same model, same images, same thread, one threat at a time at its reference budget (Fashion-MNIST: L∞ 0.1,
L2 1.0), the test labels (as AutoAttack, every variant attacks the clean-correct points only). Variants:

* ``art_autoattack`` (baseline): ART's AutoAttack runner (``art.attacks.evasion.auto_attack.run_attack``, the
  loop ``AutoAttack.generate`` runs; ``generate`` itself needs the ``multiprocess`` package) over ART's pieces
  in AutoAttack's standard order and budgets: APGD-CE (100 iterations, one start, first step 2 eps), targeted
  APGD-DLR against each other class (ART's targeted loop), Square (5,000 queries). ART has no FAB.
* ``harness``: :func:`robustbench_wave.evaluation.evaluate` with the autoattack suite's entries of that threat
  (APGD-CE, APGD-T, FAB-T, Square, PGD-DLR), exact gradients, no cross-check.
* ``harness+art``: the same with ``cross_check="all"``: ART's APGD-CE and APGD-T and the builtin FAB-T
  (``attacks/fab_builtin.py``) beside torchattacks', their breaks counted (what ``--cross-check`` adds at the
  reference budget by default).
* ``reference`` (only when the authors' package imports, as ``autoattack`` or ``pyautoattack``; never a
  dependency of the project): ``AutoAttack(version='standard', seed=0).run_standard_evaluation``.

Each row's note gives its robust count and the difference of robust sets against the baseline (points it
breaks that the baseline leaves, and the other way), and against the reference when it ran. ``--quick``
shrinks iterations and queries on every side alike (the reference's checkpoints stay those of 100 steps).

Run alone: ``python -m benchmarks.bench_autoattack [--quick] [--trained-dir DIR]``.
"""

from __future__ import annotations

import argparse
import importlib
import logging
from collections.abc import Callable
from types import ModuleType
from typing import Any

import numpy as np
import tomllib
import torch
from torch import nn

from benchmarks.harness import (
    REPO,
    Row,
    bench_dataset,
    bench_images,
    bench_model,
    interleaved,
    median,
    ratio_rows,
    run_script,
)
from robustbench_wave.attacks import Suite, load_suite, parse_suite, within_budget
from robustbench_wave.evaluation import EvalSettings, evaluate
from robustbench_wave.evaluation.metrics import middle_budget, robust_flags

STEPS, TARGETS, QUERIES = 100, 9, 5000
QUICK_STEPS, QUICK_QUERIES = 10, 100
BASELINE = "art_autoattack"


def reference_package() -> ModuleType | None:
    """The authors' AutoAttack package when installed (``autoattack`` from GitHub, ``pyautoattack`` from PyPI)."""
    for name in ("autoattack", "pyautoattack"):
        try:
            return importlib.import_module(name)
        except ImportError:
            continue
    return None


def threat_suite(threat: str, eps: float, quick: bool) -> Suite:
    """The autoattack suite's entries of one threat at one budget (fewer steps and queries if ``quick``)."""
    with open(REPO / "attacks" / "autoattack.toml", "rb") as fh:
        data = tomllib.load(fh)
    short = {"steps": QUICK_STEPS, "n_queries": QUICK_QUERIES} if quick else {}
    data["name"], data["eps"] = f"bench-autoattack-{threat}", {"default": {threat: [eps]}}
    data.pop("reference", None)  # one budget: it is the reference
    data["attack"] = [
        {**a, **{k: v for k, v in short.items() if k in a}}
        for a in data["attack"]
        if a["family"] == "clean" or a.get("threat") == threat
    ]
    return parse_suite(data)


def robust_of(
    model: nn.Module, x: torch.Tensor, y: torch.Tensor, adv: torch.Tensor, eps: float, threat: str
) -> torch.Tensor:
    """Robust = still classified right, or the returned point left the budget (it cannot count as a break)."""
    with torch.no_grad():
        correct = model(adv).argmax(1) == y
    return correct | ~within_budget(x, adv, eps, threat)


def art_autoattack(
    model: nn.Module, x: torch.Tensor, y: torch.Tensor, eps: float, threat: str, quick: bool
) -> torch.Tensor:
    """ART's AutoAttack loop over its APGD-CE, targeted APGD-DLR (every other class) and Square; robust flags."""
    from art.attacks.evasion import AutoProjectedGradientDescent, SquareAttack
    from art.attacks.evasion.auto_attack import run_attack
    from art.estimators.classification import PyTorchClassifier

    classes = int(model(x[:1]).shape[1])
    est = PyTorchClassifier(
        model, nn.CrossEntropyLoss(), tuple(x.shape[1:]), classes, clip_values=(0.0, 1.0), device_type="cpu"
    )
    norm = np.inf if threat == "Linf" else 2
    steps, queries = (QUICK_STEPS, QUICK_QUERIES) if quick else (STEPS, QUERIES)
    common = {"norm": norm, "eps": eps, "eps_step": 2 * eps, "max_iter": steps, "nb_random_init": 1}
    common |= {"batch_size": len(x), "verbose": False}
    ce = AutoProjectedGradientDescent(est, loss_type="cross_entropy", **common)
    dlr = AutoProjectedGradientDescent(est, loss_type="difference_logits_ratio", targeted=True, **common)
    square = SquareAttack(est, norm=norm, max_iter=queries, eps=eps, p_init=0.8, nb_restarts=1, verbose=False)
    xn, yn = x.numpy(), np.eye(classes)[y.numpy()]
    with torch.no_grad():
        robust = (model(x).argmax(1) == y).numpy()  # AutoAttack attacks the clean-correct points only
    np.random.seed(0)  # noqa: NPY002  (ART's random starts draw from the legacy global RNG)
    runs = [(ce, yn)]
    for k in range(min(TARGETS, classes - 1)):  # ART's targeted loop: per point the k-th class other than y
        target = np.array([[c for c in range(classes) if c != t][k] for t in y.tolist()])
        runs.append((dlr, np.eye(classes)[target]))
    runs.append((square, yn))
    for attack, labels in runs:
        if robust.any():  # as AutoAttack.generate: stop once every point is broken
            xn, robust = run_attack(xn, labels, robust, attack, est, norm, eps)
    return robust_of(model, x, y, torch.from_numpy(xn), eps, threat)


def harness_autoattack(
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    suite: Suite,
    dataset: str,
    cross_check: str,
    seconds: dict[str, float] | None = None,
) -> torch.Tensor:
    """The suite through :func:`evaluate` (exact gradients); robust flags at the suite's one budget.
    ``seconds`` (when given) receives each attack's seconds from the run's timing, where the time went."""
    settings = EvalSettings(dataset=dataset, grad_modes=("exact",), cross_check=cross_check)
    result = evaluate(model, x, y, suite, settings, progress=False)
    records = result.records
    if seconds is not None:
        seconds.clear()
        for t in result.meta["models"][settings.model_name]["timing"]:
            seconds[t["attack"]] = seconds.get(t["attack"], 0.0) + t["seconds"]
    [(threat, grid)] = suite.resolved_eps(dataset).items()
    eps = grid[0]
    flags = robust_flags(records, threat, eps)
    return torch.tensor(flags.sort_index().to_numpy(), dtype=torch.bool)


def reference_autoattack(
    package: ModuleType,
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    eps: float,
    threat: str,
    quick: bool,
) -> torch.Tensor:
    """The authors' AutoAttack, standard version, seed 0, one batch; robust flags."""
    aa = package.AutoAttack(model, norm=threat, eps=eps, version="standard", seed=0, device="cpu")
    aa.verbose = False
    if quick:
        aa.apgd.n_iter = aa.apgd_targeted.n_iter = aa.fab.n_iter = QUICK_STEPS
        aa.square.n_queries = QUICK_QUERIES
    out = aa.run_standard_evaluation(x, y, batch_size=len(x))
    adv = out[0] if isinstance(out, tuple) else out  # pyautoattack returns (x_adv, y_adv), the original x_adv
    return robust_of(model, x, y, adv.detach(), eps, threat)


def set_difference(a: torch.Tensor, b: torch.Tensor) -> str:
    """'breaks P it leaves, leaves Q it breaks' of variant a against variant b (robust flags)."""
    return f"breaks {int((~a & b).sum())} it leaves, leaves {int((a & ~b).sum())} it breaks"


class PassCounter:
    """Forward passes through a model and the rows they carry, with grad on (a backward follows) and off.

    The work each variant makes, which the load of a shared machine does not move, beside its seconds."""

    def __init__(self, model: nn.Module) -> None:
        self.counts = {"grad": [0, 0], "no_grad": [0, 0]}  # [calls, rows]
        self.handle = model.register_forward_pre_hook(self._count)

    def _count(self, _module: nn.Module, inputs: tuple[Any, ...]) -> None:
        key = "grad" if torch.is_grad_enabled() else "no_grad"
        self.counts[key][0] += 1
        self.counts[key][1] += int(inputs[0].shape[0])

    def take(self) -> str:
        """'F forwards (R rows), B with grad (S rows)' since the last call, and reset."""
        (gc, gr), (nc, nr) = self.counts["grad"], self.counts["no_grad"]
        self.counts = {"grad": [0, 0], "no_grad": [0, 0]}
        return f"passes: {nc + gc} forward ({nr + gr} rows), {gc} with grad ({gr} rows)"


def variant_functions(
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    threat: str,
    eps: float,
    args: Any,
    members: dict[str, float],
) -> dict[str, Callable[[], torch.Tensor]]:
    """The variants ``--variant`` selects (all by default; 'reference' only when the authors' code imports);
    ``members`` receives the harness's seconds per attack from its last run."""
    dataset, quick = args.dataset, args.quick
    suite = threat_suite(threat, eps, quick)
    fns: dict[str, Callable[[], torch.Tensor]] = {
        BASELINE: lambda: art_autoattack(model, x, y, eps, threat, quick),
        "harness": lambda: harness_autoattack(model, x, y, suite, dataset, "off", members),
        "harness+art": lambda: harness_autoattack(model, x, y, suite, dataset, "all"),
    }
    package = reference_package()
    if package is not None:
        fns["reference"] = lambda: reference_autoattack(package, model, x, y, eps, threat, quick)
    wanted = args.variant or list(fns)
    missing = [v for v in wanted if v not in fns]
    if missing:
        raise SystemExit(
            f"--variant {', '.join(missing)}: not available (choose from {', '.join(fns)}; 'reference' needs "
            "the authors' package importable, e.g. PYTHONPATH=.:/tmp/aa after pip install --target /tmp/aa pyautoattack)"
        )
    return {name: fns[name] for name in wanted}


def case_rows(
    case: str, model: nn.Module, x: torch.Tensor, y: torch.Tensor, threat: str, eps: float, args: Any
) -> list[Row]:
    """Every variant on one (model, threat, eps), interleaved; notes compare robust sets, CPU time and passes."""
    robust: dict[str, torch.Tensor] = {}
    passes: dict[str, str] = {}
    counter = PassCounter(model)
    members: dict[str, float] = {}

    def keep(name: str, fn: Callable[[], torch.Tensor]) -> Callable[[], None]:
        def call() -> None:
            counter.take()
            robust[name] = fn()
            passes[name] = counter.take()

        return call

    fns = {
        name: keep(name, fn)
        for name, fn in variant_functions(model, x, y, threat, eps, args, members).items()
    }
    cpu: dict[str, list[float]] = {}
    times = interleaved(fns, args.reps or 1, warmup=0, cpu=cpu)  # each call runs for tens of seconds
    counter.handle.remove()
    base = BASELINE if BASELINE in times else next(iter(times))
    ref = "reference" if "reference" in times else base
    notes = {}
    for name, flags in robust.items():
        parts = [f"robust {int(flags.sum())}/{len(x)}"]
        if name != base:
            parts.append(f"vs {base}: {set_difference(flags, robust[base])}")
        if ref != base and name != ref:
            parts.append(f"vs {ref}: {set_difference(flags, robust[ref])}")
        if name != ref:
            parts.append(f"CPU time / {ref}'s {median(cpu[name]) / median(cpu[ref]):.2f}")
        parts.append(passes[name])
        if name == "harness" and members:
            parts.append(
                "s per member: " + ", ".join(f"{k} {v:.1f}" for k, v in members.items() if v >= 0.05)
            )
        notes[name] = "; ".join(parts)
    return ratio_rows("autoattack", case, times, base, per=len(x), unit="image", notes=notes)


def add_flags(p: argparse.ArgumentParser) -> None:
    """This script's own flags: which variants, how many images."""
    p.add_argument(
        "--variant",
        action="append",
        choices=[BASELINE, "harness", "harness+art", "reference"],
        help="time only these variants (repeat the flag; default: all; the first one given is the ratios' "
        "baseline when art_autoattack is left out). ART's side alone takes about 20 min per repetition",
    )
    p.add_argument("--n-examples", type=int, default=None, help="first N test images (default 64, quick 16)")
    p.add_argument(
        "--threat", action="append", choices=["Linf", "L2"], help="only these threats (repeat; default both)"
    )
    p.add_argument(
        "--model", action="append", help="zoo models to attack (repeat; default wavelet), from --trained-dir"
    )


def bench(args: argparse.Namespace) -> list[Row]:
    """Each model (default wavelet), the first n = 64 test images (16 quick), L∞ and L2 at the suite's
    reference budgets."""
    n = args.n_examples or (16 if args.quick else 64)
    logging.getLogger("art").setLevel(logging.WARNING)  # one INFO line per estimator built
    args.dataset = bench_dataset()
    x, y = bench_images(n, args.dataset)
    grid = load_suite("autoattack").resolved_eps(args.dataset)
    rows: list[Row] = []
    for name in args.model or ["wavelet"]:
        model, kind = bench_model(name, args.dataset, args)
        for p in model.parameters():
            p.requires_grad_(False)
        for threat in args.threat or ("Linf", "L2"):
            eps = middle_budget(grid[threat])
            rows += case_rows(f"{name} ({kind}), {threat} {eps:g}, n={n}", model, x, y, threat, eps, args)
    return rows


if __name__ == "__main__":
    run_script("autoattack", __doc__.splitlines()[0], bench, add_flags)
