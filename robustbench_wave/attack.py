"""Command line: attack trained zoo models with a suite and write records + comparison tables.

This module owns the ``python -m robustbench_wave.attack`` command: it parses the flags, loads the trained
models and the test images, chooses the run folder and hands the work to
:func:`robustbench_wave.evaluation.evaluate`; the attacks, records and reports live in the library.

    python -m robustbench_wave.attack --model patch --model wavelet --dataset fashion-mnist --n-examples 1000

loads ``results/train/<dataset>/<model>/seed-<train-seed>/`` for every ``--model``, attacks the first
``--n-examples`` test images under every gradient mode (models with a fixed front-end) and writes
``<out>/attack/<dataset-slug>/<run-name>/`` with records.csv.gz, meta.json, summary.csv, table.csv,
table.tex and table.txt. Finished (model, attack, grad mode) chunks are saved in ``chunks/`` as they complete,
so re-running a killed command with the same arguments resumes where it stopped.
"""

from __future__ import annotations

import argparse
import logging
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from robustbench_wave.attacks import BACKENDS, Suite, list_suites, load_suite
from robustbench_wave.data import DatasetInfo, describe_datasets, load_split, to_float
from robustbench_wave.evaluation import ALL_MODES, EvaluationResult, evaluate
from robustbench_wave.evaluation.records import read_meta
from robustbench_wave.io import atomic_write_json
from robustbench_wave.reporting import tables
from robustbench_wave.reporting.finalize import finalize_run
from robustbench_wave.reporting.runs import VERDICT_JSON
from robustbench_wave.training import checkpoint

#: A trained model and the metadata of its training run (checkpoint hash, run folder, clean accuracy).
Loaded = tuple[nn.Module, dict[str, Any]]

#: ``--surrogate`` value that skips the transfer attack.
NO_SURROGATE = "none"

#: What this module writes into a run folder (records, tables and report are written by the library).
CONFIG_JSON = "config.json"
CHUNKS_DIR = "chunks"

#: Columns of the cross-check table printed on the terminal.
CROSSCHECK_COLUMNS = [
    "model", "grad_mode", "attack", "eps", "primary_backend", "backend", "n_points", "difference",
    "n_disagree",
]  # fmt: skip

log = logging.getLogger("robustbench_wave.attack")


def echo(msg: str = "") -> None:
    """Terminal output of the command (results, not log messages)."""
    sys.stdout.write(msg + "\n")
    sys.stdout.flush()


def get_args_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m robustbench_wave.attack",
        description="Attack trained zoo models with an attack suite; write per-example records and tables.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument(
        "--model",
        action="append",
        required=True,
        metavar="NAME",
        help="zoo model to attack (its trained checkpoint is loaded); repeat for several models",
    )
    p.add_argument(
        "--suite",
        default="default",
        help=f"attack suite: a name in attacks/ ({', '.join(list_suites())}) or a TOML path",
    )
    p.add_argument(
        "--attacks",
        default=None,
        metavar="A,B",
        help="run only these suite entries (comma separated; clean is always kept)",
    )
    p.add_argument(
        "--dataset",
        default="fashion-mnist",
        help=f"data set spec the models were trained on: {describe_datasets()}",
    )
    p.add_argument("--n-examples", type=int, default=1000, help="attack the first N test images")
    p.add_argument(
        "--batch-size",
        type=int,
        default=128,
        help="examples per forward/backward pass (memory only: results do not depend on it)",
    )
    p.add_argument(
        "--seed", type=int, default=0, help="attack seed (random starts, noise, library attack blocks)"
    )
    p.add_argument("--train-seed", type=int, default=0, help="which training run (seed-<s>) to load")
    p.add_argument(
        "--backend",
        default="auto",
        choices=["auto", *BACKENDS],
        help="implementation for attacks that several backends provide; auto = builtin PGD, "
        "torchattacks FGSM/APGD/Square. The backend of every record is saved with it",
    )
    p.add_argument(
        "--cross-check",
        action="store_true",
        help="also run every other backend of each gradient attack on the same points and report "
        "the difference in robust accuracy (crosscheck.csv)",
    )
    p.add_argument(
        "--grad-modes",
        default=",".join(ALL_MODES),
        help="gradient rules through fixed front-ends (exact, blocked, bpda); models without a fixed "
        "front-end always run exact only",
    )
    p.add_argument(
        "--surrogate",
        default="patch",
        help="zoo model whose exact gradients craft the transfer attack ('none' skips transfer)",
    )
    p.add_argument(
        "--no-skip-broken",
        dest="skip_broken",
        action="store_false",
        help="run every attack on every clean-correct point instead of only on still-robust ones "
        "(slower; gives each attack's own robust accuracy)",
    )
    p.add_argument("--results-dir", default="results", type=Path, help="where trained runs live (train/...)")
    p.add_argument(
        "--out",
        default="results",
        type=Path,
        help="results root; the run goes to OUT/attack/<dataset>/<run-name>",
    )
    p.add_argument("--run-name", default=None, help="run folder name (default: models, suite, n and seeds)")
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="reuse a run folder that holds a different configuration (its old chunks are discarded)",
    )
    p.add_argument("--device", default="cpu", help="torch device")
    p.add_argument(
        "--threads",
        type=int,
        default=0,
        help="CPU threads for torch (0 = torch's default); on a busy shared machine 1 is often fastest",
    )
    p.add_argument(
        "--no-diagnostics",
        dest="diagnostics",
        action="store_false",
        help="skip the gradient-masking checklist, energy measurement, figures, verdict and report.md",
    )
    p.add_argument(
        "--n-diagnostics",
        type=int,
        default=32,
        help="examples per model on which the diagnostics run their extra attacks (steps/restarts sweeps, "
        "large eps, gradient health)",
    )
    p.add_argument(
        "--diagnostics-steps",
        type=int,
        default=10,
        help="PGD steps of the diagnostics' extra attacks (x4 sweep)",
    )
    p.add_argument("--no-progress", dest="progress", action="store_false", help="hide progress bars")
    p.add_argument("-v", "--verbose", action="store_true", help="log every chunk")
    return p


@dataclass(frozen=True)
class RunSettings:
    """The choices that make two invocations the same run.

    Batch size, device, threads and progress bars only change how fast a run goes, so they are not part
    of it; a run folder whose ``config.json`` holds other settings is refused unless overwritten.
    """

    models: list[str]
    dataset: str
    n_examples: int
    seed: int
    train_seed: int
    backend: str
    grad_modes: str
    surrogate: str
    skip_broken: bool
    cross_check: bool

    @property
    def has_surrogate(self) -> bool:
        return self.surrogate.lower() != NO_SURROGATE

    def to_config(self, suite: Suite, hashes: dict[str, str]) -> dict[str, Any]:
        """The ``config.json`` of the run: these settings, the suite and the checkpoint hashes."""
        return {
            "models": self.models,
            "suite": {k: v for k, v in suite.to_dict().items() if k not in ("description", "source")},
            "dataset": self.dataset,
            "n_examples": self.n_examples,
            "seed": self.seed,
            "train_seed": self.train_seed,
            "backend": self.backend,
            "grad_modes": self.grad_modes,
            "surrogate": self.surrogate,
            "skip_broken": self.skip_broken,
            "cross_check": self.cross_check,
            "checkpoints": hashes,
        }


def select_suite(suite: str, attacks: str | None) -> Suite:
    """Load a suite by name or path and keep only the comma-separated ``attacks`` (clean always stays)."""
    loaded = load_suite(suite)
    if attacks:
        loaded = loaded.select([a.strip() for a in attacks.split(",") if a.strip()])
    return loaded


def parse_grad_modes(text: str) -> list[str]:
    """The comma-separated gradient modes, each one of ``ALL_MODES``."""
    modes = [m.strip() for m in text.split(",") if m.strip()]
    bad = sorted(set(modes) - set(ALL_MODES))
    if bad:
        raise ValueError(f"unknown --grad-modes {bad}; choose from {ALL_MODES}")
    return modes


def load_test_images(dataset: str, n_examples: int) -> tuple[torch.Tensor, torch.Tensor, DatasetInfo]:
    """The first ``n_examples`` test images as floats in [0, 1], their labels and the data set info."""
    images_u8, labels, info = load_split(dataset, "test")
    n = min(n_examples, len(labels))
    if n < n_examples:
        log.warning("the test split has only %d images; attacking all of them", n)
    return to_float(images_u8[:n]), labels[:n], info


def load_models(names: list[str], dataset: str, results_dir: Path, train_seed: int) -> dict[str, Loaded]:
    """Load the trained checkpoint of every name once (a repeated name is loaded once), in order."""
    return {name: load_model(name, dataset, results_dir, train_seed) for name in dict.fromkeys(names)}


def load_model(name: str, dataset: str, results_dir: Path, train_seed: int) -> Loaded:
    """One trained zoo model; a missing or corrupt checkpoint ends the command with one clear line."""
    try:
        return checkpoint.load_trained(name, dataset, results_dir, train_seed)
    except ValueError as err:
        raise SystemExit(f"cannot load model {name!r}: {err}") from None


def checkpoint_hashes(
    models: dict[str, Loaded], surrogate_name: str, surrogate: Loaded | None
) -> dict[str, str]:
    """The sha256 of every checkpoint the run reads, the surrogate's under ``surrogate:<name>``."""
    hashes = {k: v[1].get("checkpoint_sha256", "") for k, v in models.items()}
    if surrogate is not None:
        hashes[f"surrogate:{surrogate_name}"] = surrogate[1].get("checkpoint_sha256", "")
    return hashes


def default_run_name(models: list[str], suite_name: str, n: int, seed: int, train_seed: int) -> str:
    """Folder name of a run: its models, suite, number of examples and seeds."""
    return f"{'+'.join(models)}_{suite_name}_n{n}_seed{seed}_train{train_seed}"


def prepare_run_dir(run_dir: Path, config: dict[str, Any], overwrite: bool) -> None:
    """Write ``config.json``; a folder holding another configuration is refused unless ``overwrite``.

    Overwriting discards the old chunks, so nothing computed under the old configuration is resumed.
    """
    config_path = run_dir / CONFIG_JSON
    old = read_meta(config_path)
    if old and old != config:
        if not overwrite:
            raise SystemExit(
                f"{run_dir} holds a run with a different configuration; pass --run-name NAME for a new folder "
                "or --overwrite to replace it"
            )
        shutil.rmtree(run_dir / CHUNKS_DIR, ignore_errors=True)
    atomic_write_json(config_path, config)


def _check_dataset(name: str, train_meta: dict[str, Any], info: DatasetInfo) -> None:
    trained_on = train_meta.get("dataset_info")
    if trained_on is not None and getattr(trained_on, "in_chans", info.in_chans) != info.in_chans:
        raise SystemExit(f"model {name!r} was trained on {trained_on.name}, not on {info.name}")


def _summary_line(name: str, result: EvaluationResult) -> str:
    m = result.meta["models"][name]
    return (
        f"{name}: clean accuracy {m['clean_accuracy']:.4f}, {m['seconds_total']:.0f} s "
        f"(attacks took {m['seconds_attacks']:.0f} s when computed; {m['resumed_chunks']} chunks resumed)"
    )


def _configure_process(threads: int, verbose: bool) -> None:
    if threads > 0:
        torch.set_num_threads(threads)  # explicit user request for this process only
    logging.basicConfig(
        level=logging.INFO if verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s"
    )


def _settings(args: argparse.Namespace) -> RunSettings:
    return RunSettings(
        models=args.model,
        dataset=args.dataset,
        n_examples=args.n_examples,
        seed=args.seed,
        train_seed=args.train_seed,
        backend=args.backend,
        grad_modes=args.grad_modes,
        surrogate=args.surrogate,
        skip_broken=args.skip_broken,
        cross_check=args.cross_check,
    )


def attack_models(
    settings: RunSettings,
    suite: Suite,
    data: tuple[torch.Tensor, torch.Tensor, DatasetInfo],
    modes: list[str],
    models: dict[str, Loaded],
    surrogate: Loaded | None,
    run_dir: Path,
    *,
    device: str,
    batch_size: int,
    progress: bool,
) -> list[EvaluationResult]:
    """Run the suite on every model in turn; finished chunks are cached in ``run_dir/chunks``.

    ``device``, ``batch_size`` and ``progress`` change only speed and memory, never the records.
    """
    images, labels, info = data
    results = []
    for name, (model, tmeta) in models.items():
        _check_dataset(name, tmeta, info)
        model.to(device)
        sur = surrogate[0].to(device) if surrogate is not None else None
        if sur is model:
            log.info("%s is its own surrogate: the transfer attack is a white-box attack here", name)
        extra = {
            "checkpoint_sha256": tmeta.get("checkpoint_sha256"),
            "checkpoint_dir": tmeta.get("run_dir"),
            "train_seed": settings.train_seed,
            "train_test_accuracy": tmeta.get("clean_accuracy"),
        }
        result = evaluate(
            model,
            images,
            labels,
            suite,
            dataset=info,
            grad_modes=modes,
            backend=settings.backend,
            seed=settings.seed,
            batch_size=batch_size,
            skip_broken=settings.skip_broken,
            surrogate=sur,
            surrogate_name=settings.surrogate if sur is not None else None,
            model_name=name,
            progress=progress,
            cross_check=settings.cross_check,
            cache_dir=run_dir / CHUNKS_DIR,
            extra_meta=extra,
        )
        results.append(result)
        echo(_summary_line(name, result))
    return results


def _print_results(merged: EvaluationResult, run_dir: Path, paths: dict[str, Path]) -> None:
    echo()
    echo(paths["text"].read_text(encoding="utf-8"))  # the table rendered by reporting.tables
    xc = merged.crosscheck()
    if xc is not None:
        echo("cross-check (robust accuracy of the other backend minus the primary one, on the same points):")
        echo(xc[CROSSCHECK_COLUMNS].to_string(index=False))
    echo(f"\nwrote {run_dir}: " + ", ".join(sorted(p.name for p in paths.values())))


def _diagnose(
    args: argparse.Namespace,
    run_dir: Path,
    models: dict[str, Loaded],
    data: tuple[torch.Tensor, torch.Tensor, DatasetInfo],
) -> None:
    """Gradient-masking checklist, figures, verdict and report.md of the finished run."""
    images, labels, info = data
    report = finalize_run(
        run_dir,
        {name: model for name, (model, _) in models.items()},
        images,
        labels,
        info,
        n_diagnostics=args.n_diagnostics,
        diagnostics_steps=args.diagnostics_steps,
        seed=args.seed,
        batch_size=args.batch_size,
    )
    verdict = read_meta(run_dir / VERDICT_JSON) or {}
    if verdict.get("text"):
        echo(f"\nverdict: {verdict['text']}")
    echo(f"report: {report}")


def main(argv: list[str] | None = None) -> int:
    """Entry point; bad input (unknown suite, model or grad mode ...) ends with one clear line."""
    args = get_args_parser().parse_args(argv)
    _configure_process(args.threads, args.verbose)
    settings = _settings(args)
    try:
        suite = select_suite(args.suite, args.attacks)
        if args.n_examples < 1 or args.batch_size < 1:
            raise ValueError("--n-examples and --batch-size must be >= 1")
        modes = parse_grad_modes(settings.grad_modes)
    except ValueError as err:
        raise SystemExit(str(err)) from None
    try:
        data = load_test_images(settings.dataset, settings.n_examples)
    except ValueError as err:
        raise SystemExit(f"cannot load {settings.dataset!r} test data: {err}") from None
    n, info = len(data[1]), data[2]

    models = load_models(settings.models, settings.dataset, args.results_dir, settings.train_seed)
    surrogate = None
    if settings.has_surrogate:
        surrogate = models.get(settings.surrogate) or load_model(
            settings.surrogate, settings.dataset, args.results_dir, settings.train_seed
        )
    config = settings.to_config(suite, checkpoint_hashes(models, settings.surrogate, surrogate))
    run_name = args.run_name or default_run_name(
        list(models), suite.name, n, settings.seed, settings.train_seed
    )
    run_dir = Path(args.out) / "attack" / info.slug / run_name
    prepare_run_dir(run_dir, config, args.overwrite)

    results = attack_models(
        settings, suite, data, modes, models, surrogate, run_dir,
        device=args.device, batch_size=args.batch_size, progress=args.progress,
    )  # fmt: skip
    merged = EvaluationResult.merge(results)
    merged.meta["run"] = {"run_dir": str(run_dir), "command": " ".join(sys.argv), "config": config}
    paths = merged.save(run_dir)
    paths |= tables.write_tables(merged.records, run_dir, meta=merged.meta, cross=merged.crosscheck_records)
    _print_results(merged, run_dir, paths)
    if args.diagnostics:
        _diagnose(args, run_dir, models, data)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
