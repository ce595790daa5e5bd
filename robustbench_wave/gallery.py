"""Command line: the gallery of defences known to be broken -- train, attack naively and adaptively, tabulate.

    python -m robustbench_wave.gallery all --results-dir results/gallery --n-examples 200     # make defenses
    python -m robustbench_wave.gallery train --results-dir results/gallery                    # the two CNNs
    python -m robustbench_wave.gallery attack --results-dir results/gallery --defence jpeg    # one defence
    python -m robustbench_wave.gallery table --results-dir results/gallery                    # gallery.{txt,csv,tex}

The defences are factories in :mod:`robustbench_wave.models.gallery`; :mod:`robustbench_wave.defenses` trains
them with the shared recipe, attacks each with ``python -m robustbench_wave.attack`` under a naive protocol
and the adaptive one, and builds the table from the run folders. Every step reuses what is finished.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from dataclasses import replace
from pathlib import Path

from robustbench_wave import defenses
from robustbench_wave.cli import (
    ListAction,
    Parser,
    add_verbosity,
    count_or_all,
    non_negative_int,
    one_of,
    positive_float,
    positive_int,
    setup_logging,
)
from robustbench_wave.data import dataset_info, describe_datasets
from robustbench_wave.defenses.runs import ADAPTIVE, NAIVE, SURROGATE_CNN
from robustbench_wave.defenses.table import load_gallery_runs, title
from robustbench_wave.models.gallery import GALLERY

STEPS = ("train", "attack", "table", "all")


def echo(msg: str = "") -> None:
    """Terminal output of the command (results, not log messages)."""
    sys.stdout.write(msg + "\n")
    sys.stdout.flush()


def get_args_parser() -> Parser:
    p = Parser(
        prog="python -m robustbench_wave.gallery",
        description="Train, attack and tabulate the gallery of defences known to be broken (Athalye, Carlini "
        "& Wagner 2018): bit-depth reduction, JPEG-style DCT quantisation, thermometer encoding, random "
        "resize-and-pad and stochastic activation pruning in front of one small CNN, and the CNN undefended.",
    )
    p.add_argument(
        "step", choices=STEPS, help="train the CNNs, attack the defences, build the table, or all three"
    )
    p.add_alias(
        "--out",
        p.add_argument(
            "--results-dir",
            type=Path,
            default=Path("results/gallery"),
            help="gallery root: weights/, attack/, gallery.*",
        ),
    )
    p.add_argument("--dataset", default="fashion-mnist", help=f"a gray data set: {describe_datasets()}")
    p.add_argument(
        "--defence", action=ListAction, item=one_of(list(GALLERY), "a gallery defence"), default=None,
        metavar="NAME", help=f"attack / tabulate only this defence ({', '.join(GALLERY)}); repeat the flag (or "
        "A,B) for several (the table needs 'cnn'); default: all",
    )  # fmt: skip
    train = p.add_argument_group("train")
    train.add_argument(
        "--epochs",
        type=positive_int,
        default=defenses.GALLERY_RECIPE.epochs,
        help="epochs of the shared recipe",
    )
    train.add_argument("--train-seed", type=non_negative_int, default=0, help="training seed")
    train.add_argument("--train-subset", type=count_or_all, default=None, help="train on N images ('all')")
    train.add_argument("--test-subset", type=count_or_all, default=None, help="test on N images ('all')")
    p.add_alias(
        "--fresh",
        train.add_argument(
            "--overwrite", action="store_true", help="retrain weights trained with another configuration"
        ),
    )
    attack = p.add_argument_group("attack and table")
    attack.add_argument(
        "--suite", default="headline", help="attack suite of every run (a name or a TOML path)"
    )
    attack.add_argument("--n-examples", type=positive_int, default=200, help="test images per run")
    attack.add_argument("--seed", type=non_negative_int, default=0, help="attack seed")
    attack.add_argument(
        "--surrogate", default=SURROGATE_CNN,
        help="transfer attacks' surrogate: 'cnn' = the undefended gallery CNN, or any attack --surrogate value",
    )  # fmt: skip
    for protocol, flags in defenses.PROTOCOLS.items():
        attack.add_argument(
            f"--{protocol}-args", default=shlex.join(flags), metavar="FLAGS",
            help=f"attack flags of the {protocol} protocol (one string)",
        )  # fmt: skip
    attack.add_argument(
        "--attack-args", default="", metavar="FLAGS",
        help="more flags for every attack command, e.g. '--attacks clean,pgd_linf --device cuda'",
    )  # fmt: skip
    attack.add_argument("--threat", default="Linf", help="the table's threat")
    attack.add_argument(
        "--eps", type=positive_float, default=None, help="the table's budget (default: the reference)"
    )
    p.add_argument("--no-progress", dest="progress", action="store_false", help="hide progress bars")
    add_verbosity(p)
    return p


def _options(args: argparse.Namespace) -> tuple[defenses.TrainOptions, defenses.AttackOptions]:
    """The library's options from the flags; one-line SystemExit for bad input."""
    try:
        if dataset_info(args.dataset).in_chans != 1:
            raise ValueError(f"--dataset {args.dataset} is not gray; the gallery's CNN takes one channel")
        protocols = {name: tuple(shlex.split(getattr(args, f"{name}_args"))) for name in (NAIVE, ADAPTIVE)}
        recipe = replace(defenses.GALLERY_RECIPE, epochs=args.epochs)
        train = defenses.TrainOptions(
            args.results_dir, args.dataset, recipe, args.train_seed, args.train_subset, args.test_subset,
            fresh=args.overwrite, progress=args.progress,
        )  # fmt: skip
        attack = defenses.AttackOptions(
            args.results_dir, args.dataset, args.suite, args.n_examples, args.seed,
            tuple(dict.fromkeys(args.defence or GALLERY)), protocols, args.surrogate,
            tuple(shlex.split(args.attack_args)),
        )  # fmt: skip
    except ValueError as err:
        raise SystemExit(str(err)) from None
    return train, attack


def main(argv: list[str] | None = None) -> int:
    """Entry point; bad input ends with one clear line before anything is written."""
    args = get_args_parser().parse_args(argv)
    setup_logging(args, "%(levelname)s %(name)s: %(message)s")
    train, attack = _options(args)
    try:
        if args.step in ("train", "all"):
            for name, record in defenses.train_gallery(train).items():
                echo(
                    f"{name}: test accuracy {100 * record['test_accuracy']:.2f}% ({defenses.weights_path(args.results_dir, name)})"
                )
        if args.step in ("attack", "all"):
            for run in defenses.attack_gallery(attack):
                echo(f"{run['defence']} ({run['protocol']}): {run['run']} in {run['seconds']:.0f} s")
        if args.step in ("table", "all"):
            table = defenses.build_table(load_gallery_runs(attack), args.threat, args.eps)
            heading = title(table, dataset_info(args.dataset).name, args.suite)
            echo(defenses.write_table(table, args.results_dir, heading))
    except (ValueError, RuntimeError) as err:
        raise SystemExit(str(err)) from None
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
