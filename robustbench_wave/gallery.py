"""Command line: the gallery of defences known to be broken -- train, attack naively and adaptively, tabulate.

    python -m robustbench_wave.gallery all --results-dir results/gallery --n-examples 200     # make defenses
    python -m robustbench_wave.gallery train --results-dir results/gallery                    # the two CNNs
    python -m robustbench_wave.gallery attack --results-dir results/gallery --defence jpeg    # one defence
    python -m robustbench_wave.gallery table --results-dir results/gallery                    # gallery.{txt,csv,tex}
    python -m robustbench_wave.gallery all --defence my.py:defended --weights d.safetensors \
        --baseline my.py:undefended --baseline-weights u.safetensors                          # your own defence

The defences are factories in :mod:`robustbench_wave.models.gallery`; :mod:`robustbench_wave.defenses` trains
them with the shared recipe, attacks each with ``python -m robustbench_wave.attack`` under a naive protocol
and the adaptive one, and builds the table from the run folders. Every step reuses what is finished.
``--defence`` also takes a defence of the user's (``FILE.py:FACTORY``, ``MODULE:FACTORY``, ``timm:ARCH``
with ``--weights``), attacked the same way in the same runs as its undefended twin (``--baseline``).
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from dataclasses import replace
from pathlib import Path

from robustbench_wave import defenses
from robustbench_wave.attackrun import OwnedByModel
from robustbench_wave.core.cli import (
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
from robustbench_wave.defenses.protocols import ADAPTIVE, NAIVE
from robustbench_wave.defenses.table import load_gallery_runs, title
from robustbench_wave.models.external import ExternalSpec, is_external
from robustbench_wave.models.gallery import GALLERY

STEPS = ("train", "attack", "table", "all")


def echo(msg: str = "") -> None:
    """Terminal output of the command (results, not log messages)."""
    sys.stdout.write(msg + "\n")
    sys.stdout.flush()


def defence_item(text: str) -> str:
    """A ``--defence`` value: a gallery name, or a reference of the user's (it has a ':')."""
    if is_external(text):
        return text
    return one_of(list(GALLERY), "a gallery defence or FILE.py:FACTORY / MODULE:FACTORY / timm:ARCH")(text)


def get_args_parser() -> Parser:
    p = Parser(
        prog="python -m robustbench_wave.gallery",
        description="Train, attack and tabulate the gallery of defences known to be broken (Athalye, Carlini "
        "& Wagner 2018): bit-depth reduction, JPEG-style DCT quantisation, thermometer encoding, random "
        "resize-and-pad and stochastic activation pruning in front of one small CNN, and the CNN undefended. "
        "--defence FILE.py:FACTORY --weights W --baseline FILE.py:FACTORY --baseline-weights W puts a defence "
        "of yours in the same table, judged against your undefended model on the same images.",
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
    p.add_argument(
        "--dataset", default=defenses.AttackOptions.dataset,
        help=f"a gray data set for the gallery's defences (any for yours): {describe_datasets()}",
    )  # fmt: skip
    p.add_argument(
        "--defence", action=ListAction, item=defence_item, default=None,
        metavar="NAME", help=f"attack / tabulate only this defence ({', '.join(GALLERY)}); repeat the flag (or "
        "A,B) for several (the gallery's need 'cnn' in the table); default: all. Also a defence of yours, as "
        "the attack command's --model takes it: path/to/file.py:FACTORY, MODULE:FACTORY or timm:ARCH, "
        "followed by its --weights; it is attacked under both protocols like the gallery's (record name "
        "ext-FACTORY-<hash>) and judged against --baseline",
    )  # fmt: skip
    p.add_argument(
        "--weights", action=OwnedByModel, owner="defence", kinds="FILE.py:FACTORY", default=None, metavar="FILE",
        help="safetensors weights of the FILE.py:FACTORY (MODULE:FACTORY, timm:ARCH) --defence just before it (loaded strictly, never "
        "pickle); needed unless that model has no parameters or buffers",
    )  # fmt: skip
    p.add_argument(
        "--baseline", default=None, metavar="FILE.py:FACTORY",
        help="your undefended model (the network behind your --defence, without the defence; same classes "
        "and image size), attacked in the same runs as each defence of yours: the table compares the two on "
        "the same images (exact McNemar test: broken = yes / no / inconclusive, or unverified / unchecked "
        "where the defence has no trusted gradient mode) and it is the transfer attacks' surrogate. Without it the transfer attacks are skipped and nothing judges the defence "
        "('no baseline'); the gallery's CNN is never used in its place",
    )  # fmt: skip
    p.add_argument(
        "--baseline-weights", default=None, metavar="FILE",
        help="safetensors weights of --baseline (as --weights)",
    )  # fmt: skip
    train = p.add_argument_group("train")
    train.add_argument(
        "--epochs",
        type=positive_int,
        default=defenses.GALLERY_RECIPE.epochs,
        help="epochs of the shared recipe",
    )
    train.add_argument(
        "--train-seed", type=non_negative_int, default=defenses.TrainOptions.seed, help="training seed"
    )
    train.add_argument("--train-subset", type=count_or_all, default=None, help="train on N images ('all')")
    p.add_alias(
        "--test-subset",
        train.add_argument(
            "--train-n-examples",
            dest="test_subset",
            type=count_or_all,
            default=None,
            help="the CNNs' test accuracy on the first N test images ('all', the default): the train "
            "command's --n-examples (this command's --n-examples is the attacked images)",
        ),
    )
    p.add_alias(
        "--fresh",
        train.add_argument(
            "--overwrite", action="store_true", help="retrain weights trained with another configuration"
        ),
    )
    attack = p.add_argument_group("attack and table")
    attack.add_argument(
        "--suite",
        default=defenses.AttackOptions.suite,
        help="attack suite of every run (a name or a TOML path)",
    )
    attack.add_argument(
        "--n-examples",
        type=positive_int,
        default=defenses.AttackOptions.n_examples,
        help="test images per run",
    )
    attack.add_argument(
        "--seed", type=non_negative_int, default=defenses.AttackOptions.seed, help="attack seed"
    )
    attack.add_argument(
        "--surrogate", default=defenses.AttackOptions.surrogate,
        help="transfer attacks' surrogate: 'cnn' = each defence's undefended model (the gallery CNN for the "
        "gallery's, --baseline for yours, none without one), or any attack --surrogate value for every run",
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
        chosen = list(dict.fromkeys(args.defence or GALLERY))
        gallery_used = args.step == "train" or any(not is_external(d) for d in chosen)
        if gallery_used and dataset_info(args.dataset).in_chans != 1:
            raise ValueError(f"--dataset {args.dataset} is not gray; the gallery's CNN takes one channel")
        protocols = {name: tuple(shlex.split(getattr(args, f"{name}_args"))) for name in (NAIVE, ADAPTIVE)}
        recipe = replace(defenses.GALLERY_RECIPE, epochs=args.epochs)
        train = defenses.TrainOptions(
            args.results_dir, args.dataset, recipe, args.train_seed, args.train_subset, args.test_subset,
            fresh=args.overwrite, progress=args.progress,
        )  # fmt: skip
        own, baseline = _own_models(args, [d for d in chosen if is_external(d)])
        attack = defenses.AttackOptions(
            args.results_dir, args.dataset, args.suite, args.n_examples, args.seed,
            tuple(d for d in chosen if not is_external(d)), protocols, args.surrogate,
            tuple(shlex.split(args.attack_args)), own=own, baseline=baseline,
        )  # fmt: skip
    except ValueError as err:
        raise SystemExit(str(err)) from None
    return train, attack


def _own_models(
    args: argparse.Namespace, refs: list[str]
) -> tuple[tuple[ExternalSpec, ...], ExternalSpec | None]:
    """The user's defences and baseline as the attack command's external models (weights made absolute)."""
    weights = args.weights or {}
    own = tuple(ExternalSpec(ref, _absolute(weights.get(ref))) for ref in refs)
    if args.baseline is None:
        if args.baseline_weights is not None:
            raise ValueError("--baseline-weights without --baseline; give the baseline's FILE.py:FACTORY")
        return own, None
    if not is_external(args.baseline):
        raise ValueError(
            f"--baseline {args.baseline} is not FILE.py:FACTORY, MODULE:FACTORY or timm:ARCH: it is your "
            "undefended model (for the gallery's own CNN: robustbench_wave.models.gallery:cnn "
            "with --baseline-weights RESULTS_DIR/weights/cnn/model.safetensors)"
        )
    return own, ExternalSpec(args.baseline, _absolute(args.baseline_weights))


def _absolute(path: str | None) -> str | None:
    return None if path is None else os.path.abspath(path)


def main(argv: list[str] | None = None) -> int:
    """Entry point; bad input ends with one clear line before anything is written."""
    args = get_args_parser().parse_args(argv)
    setup_logging(args, "%(levelname)s %(name)s: %(message)s")
    train, attack = _options(args)
    try:
        if args.step in ("attack", "all"):
            defenses.check_own_models(attack)
        if args.step == "train" or (args.step == "all" and attack.defences):  # own defences bring weights
            for name, record in defenses.train_gallery(train).items():
                echo(
                    f"{name}: test accuracy {100 * record['test_accuracy']:.2f}% ({defenses.weights_path(args.results_dir, name)})"
                )
        if args.step in ("attack", "all"):
            for run in defenses.attack_gallery(attack, checked=True):
                echo(f"{run['defence']} ({run['protocol']}): {run['run']} in {run['seconds']:.0f} s")
        if args.step in ("table", "all"):
            runs = load_gallery_runs(attack)
            table = defenses.build_table(runs, args.threat, args.eps, own=attack.baselines)
            heading = title(table, dataset_info(args.dataset).name, args.suite)
            echo(defenses.write_table(table, args.results_dir, heading))
    except (ValueError, RuntimeError) as err:
        raise SystemExit(str(err)) from None
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
