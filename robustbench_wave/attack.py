"""Command line: attack trained zoo models with a suite and write records + comparison tables.

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
from pathlib import Path
from typing import Any

from robustbench_wave.attacks.suite import BACKENDS, list_suites, load_suite
from robustbench_wave.evaluation.evaluate import ALL_MODES, EvaluationResult, evaluate
from robustbench_wave.evaluation.records import read_meta
from robustbench_wave.io import atomic_write_json
from robustbench_wave.reporting.markdown import VERDICT_JSON, finalize_run

log = logging.getLogger("robustbench_wave.attack")


def echo(msg: str = "") -> None:
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
        help="data set spec the models were trained on (fashion-mnist, cifar10, imagefolder:PATH, synthetic)",
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
        help="skip the gradient-masking checklist, adaptive attacks, figures, verdict and report.md",
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
    p.add_argument(
        "--lowfreq-steps",
        type=int,
        default=10,
        help="PGD steps of the low-frequency (LL-band) adaptive attack",
    )
    p.add_argument("--no-progress", dest="progress", action="store_false", help="hide progress bars")
    p.add_argument("-v", "--verbose", action="store_true", help="log every chunk")
    return p


def _load_model(name: str, args: argparse.Namespace) -> tuple[Any, dict[str, Any]]:
    from robustbench_wave.training.checkpoint import load_trained

    try:
        return load_trained(name, args.dataset, args.results_dir, args.train_seed)
    except ValueError as err:
        raise SystemExit(f"cannot load model {name!r}: {err}") from None


def _run_config(
    args: argparse.Namespace, suite_dict: dict[str, Any], hashes: dict[str, str]
) -> dict[str, Any]:
    """What makes two invocations the same run (batch size and progress do not change results)."""
    return {
        "models": args.model,
        "suite": {k: v for k, v in suite_dict.items() if k not in ("description", "source")},
        "dataset": args.dataset,
        "n_examples": args.n_examples,
        "seed": args.seed,
        "train_seed": args.train_seed,
        "backend": args.backend,
        "grad_modes": args.grad_modes,
        "surrogate": args.surrogate,
        "skip_broken": args.skip_broken,
        "cross_check": args.cross_check,
        "checkpoints": hashes,
    }


def main(argv: list[str] | None = None) -> int:
    args = get_args_parser().parse_args(argv)
    if args.threads > 0:
        import torch

        torch.set_num_threads(args.threads)  # explicit user request for this process only
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s"
    )
    try:
        suite = load_suite(args.suite)
        if args.attacks:
            suite = suite.select([a.strip() for a in args.attacks.split(",") if a.strip()])
    except ValueError as err:
        raise SystemExit(str(err)) from None
    if args.n_examples < 1 or args.batch_size < 1:
        raise SystemExit("--n-examples and --batch-size must be >= 1")
    modes = [m.strip() for m in args.grad_modes.split(",") if m.strip()]
    bad = sorted(set(modes) - set(ALL_MODES))
    if bad:
        raise SystemExit(f"unknown --grad-modes {bad}; choose from {ALL_MODES}")

    from robustbench_wave.data import load_split, to_float

    try:
        images_u8, labels, info = load_split(args.dataset, "test")
    except ValueError as err:
        raise SystemExit(f"cannot load {args.dataset!r} test data: {err}") from None
    n = min(args.n_examples, len(labels))
    if n < args.n_examples:
        log.warning("the test split has only %d images; attacking all of them", n)
    images, labels = to_float(images_u8[:n]), labels[:n]

    models = {name: _load_model(name, args) for name in dict.fromkeys(args.model)}
    surrogate = None
    if args.surrogate.lower() != "none":
        surrogate = models[args.surrogate] if args.surrogate in models else _load_model(args.surrogate, args)
    hashes = {k: v[1].get("checkpoint_sha256", "") for k, v in models.items()}
    if surrogate is not None:
        hashes[f"surrogate:{args.surrogate}"] = surrogate[1].get("checkpoint_sha256", "")

    run_name = args.run_name or f"{'+'.join(models)}_{suite.name}_n{n}_seed{args.seed}_train{args.train_seed}"
    run_dir = Path(args.out) / "attack" / info.slug / run_name
    config = _run_config(args, suite.to_dict(), hashes)
    config_path = run_dir / "config.json"
    old = read_meta(config_path)
    if old and old != config:
        if not args.overwrite:
            raise SystemExit(
                f"{run_dir} holds a run with a different configuration; pass --run-name NAME for a new folder "
                "or --overwrite to replace it"
            )
        shutil.rmtree(run_dir / "chunks", ignore_errors=True)
    atomic_write_json(config_path, config)

    results = []
    for name, (model, tmeta) in models.items():
        if (
            tmeta.get("dataset_info") is not None
            and getattr(tmeta["dataset_info"], "in_chans", info.in_chans) != info.in_chans
        ):
            raise SystemExit(
                f"model {name!r} was trained on {tmeta['dataset_info'].name}, not on {info.name}"
            )
        model.to(args.device)
        sur = surrogate[0].to(args.device) if surrogate is not None else None
        if sur is model:
            log.info("%s is its own surrogate: the transfer attack is a white-box attack here", name)
        extra = {
            "checkpoint_sha256": tmeta.get("checkpoint_sha256"),
            "checkpoint_dir": tmeta.get("run_dir"),
            "train_seed": args.train_seed,
            "train_test_accuracy": tmeta.get("clean_accuracy"),
        }
        result = evaluate(
            model,
            images,
            labels,
            suite,
            dataset=info,
            grad_modes=modes,
            backend=args.backend,
            seed=args.seed,
            batch_size=args.batch_size,
            skip_broken=args.skip_broken,
            surrogate=sur,
            surrogate_name=args.surrogate if sur is not None else None,
            model_name=name,
            progress=args.progress,
            cross_check=args.cross_check,
            cache_dir=run_dir / "chunks",
            extra_meta=extra,
        )
        results.append(result)
        echo(
            f"{name}: clean accuracy {result.meta['models'][name]['clean_accuracy']:.4f}, "
            f"{result.meta['models'][name]['seconds_total']:.0f} s "
            f"(attacks took {result.meta['models'][name]['seconds_attacks']:.0f} s when computed; "
            f"{result.meta['models'][name]['resumed_chunks']} chunks resumed)"
        )
    merged = EvaluationResult.merge(results)
    merged.meta["run"] = {"run_dir": str(run_dir), "command": " ".join(sys.argv), "config": config}
    paths = merged.save(run_dir)
    echo()
    echo(str(merged))
    xc = merged.crosscheck()
    if xc is not None:
        cols = [
            "model",
            "grad_mode",
            "attack",
            "eps",
            "primary_backend",
            "backend",
            "n_points",
            "difference",
            "n_disagree",
        ]
        echo("cross-check (robust accuracy of the other backend minus the primary one, on the same points):")
        echo(xc[cols].to_string(index=False))
    echo(f"\nwrote {run_dir}: " + ", ".join(sorted(p.name for p in paths.values())))
    if args.diagnostics:
        report = finalize_run(
            run_dir,
            {name: model for name, (model, _) in models.items()},
            images,
            labels,
            info,
            n_diagnostics=args.n_diagnostics,
            diagnostics_steps=args.diagnostics_steps,
            lowfreq_steps=args.lowfreq_steps,
            seed=args.seed,
            batch_size=args.batch_size,
        )
        verdict = read_meta(run_dir / VERDICT_JSON) or {}
        if verdict.get("text"):
            echo(f"\nverdict: {verdict['text']}")
        echo(f"report: {report}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
