"""``python -m robustbench_wave.train``: train zoo models with one shared recipe and write a summary table.

Per model and seed it writes safetensors weights, the resolved config (JSON) and per-epoch metrics to
``<out>/train/<dataset>/<model>/seed-<s>/``, and resumes from the last completed epoch when re-run after a
kill.  The summary (CSV + terminal table) reports clean test accuracy, parameters, tokens, token width,
FLOPs and throughput.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import sys
import time
from pathlib import Path
from typing import Any

import pandas as pd
import torch

from robustbench_wave.data import DatasetInfo, load_split, train_val_split
from robustbench_wave.io import append_jsonl, atomic_write, atomic_write_json, provenance, read_jsonl
from robustbench_wave.models.flops import flops_summary, vit_flops
from robustbench_wave.models.vit import build_model, describe
from robustbench_wave.models.zoo import list_zoo, load_spec
from robustbench_wave.training import checkpoint as ckpt
from robustbench_wave.training.engine import (
    Recipe,
    build_optimizer,
    build_scheduler,
    evaluate,
    train_one_epoch,
)

log = logging.getLogger("robustbench_wave.train")

SUMMARY_COLUMNS = [
    "model", "seed", "test_accuracy", "val_accuracy", "params", "tokens", "token_width", "gmacs", "macs_saved",
    "train_images_per_s", "eval_images_per_s", "epochs", "train_seconds",
]  # fmt: skip


def get_args_parser() -> argparse.ArgumentParser:
    defaults = Recipe()
    p = argparse.ArgumentParser(
        prog="python -m robustbench_wave.train",
        description="Train zoo ViTs (patch, wavelet, Token Pooling) on one shared recipe; write checkpoints "
        "(safetensors), per-epoch metrics and a summary table. Re-running a killed command resumes it.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument(
        "--model",
        action="append",
        metavar="NAME",
        help="zoo model (models/NAME.toml) or a TOML path; repeat for several; default: the whole zoo "
        f"({', '.join(list_zoo())})",
    )
    p.add_argument(
        "--dataset",
        default="fashion-mnist",
        help="fashion-mnist | cifar10 | imagefolder:PATH (directory or .zip with train/ and test/) | "
        "synthetic | synthetic-rgb",
    )
    p.add_argument(
        "--data-dir",
        default=None,
        help="cache/download folder for data sets (default $RBW_DATA_DIR or ~/.cache/robustbench_wave/data)",
    )
    p.add_argument(
        "--epochs", type=int, default=defaults.epochs, help="training epochs (same for every model)"
    )
    p.add_argument("--batch-size", type=int, default=defaults.batch_size, help="training batch size")
    p.add_argument("--lr", type=float, default=defaults.lr, help="peak AdamW learning rate (cosine schedule)")
    p.add_argument("--weight-decay", type=float, default=defaults.weight_decay, help="AdamW weight decay")
    p.add_argument(
        "--augmentation",
        action="store_true",
        help="random crop (4 px padding) + horizontal flip for colour images; off by default because "
        "it slows the few-epoch CPU schedules down (see README)",
    )
    p.add_argument(
        "--seed",
        type=int,
        nargs="+",
        default=[0],
        help="training seed(s); several seeds train several runs per model (mean ± spread later)",
    )
    p.add_argument(
        "--train-subset",
        type=int,
        default=None,
        metavar="N",
        help="train on a random N-image subset of the training split (smoke runs)",
    )
    p.add_argument(
        "--test-subset",
        type=int,
        default=None,
        metavar="N",
        help="evaluate on the first N test images only (smoke runs)",
    )
    p.add_argument(
        "--val-fraction",
        type=float,
        default=defaults.val_fraction,
        help="share of the training split held out for validation (seeded split)",
    )
    p.add_argument(
        "--out", default="results", help="results folder; runs go to OUT/train/<dataset>/<model>/seed-S"
    )
    p.add_argument("--device", default="auto", help="auto | cpu | cuda | cuda:N")
    p.add_argument(
        "--fresh", action="store_true", help="discard an existing run instead of resuming or reusing it"
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bars (e.g. in CI logs)")
    p.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    return p


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise SystemExit(f"--device {name}: CUDA is not available here; use --device cpu")
    return torch.device(name)


def _fingerprint(spec: dict, recipe: Recipe, info: DatasetInfo, seed: int, subsets: dict) -> str:
    blob = json.dumps(
        {"spec": spec, "recipe": recipe.to_dict(), "data": info.name, "seed": seed, **subsets}, sort_keys=True
    )
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _compute_cost(model: torch.nn.Module, info: DatasetInfo) -> dict[str, float]:
    """Analytic giga-MACs per image and the share saved by token pooling (seed's per-layer formulas)."""
    summary = flops_summary(vit_flops(model, info.img_size))
    return {"gmacs": summary["gmacs"], "macs_saved": summary["saved_fraction"]}


def train_model(
    name: str,
    data: dict[str, Any],
    recipe: Recipe,
    seed: int,
    args: argparse.Namespace,
    device: torch.device,
) -> dict[str, Any]:
    """Train (or resume, or reuse) one model for one seed; returns its summary row."""
    info: DatasetInfo = data["info"]
    spec = load_spec(name)
    name = spec["name"]
    directory = ckpt.run_dir(args.out, info.slug, name, seed)
    subsets = {"train_subset": args.train_subset, "test_subset": args.test_subset}
    fingerprint = _fingerprint(spec, recipe, info, seed, subsets)
    if args.fresh and directory.exists():
        for child in directory.iterdir():
            child.unlink()
    existing = _finished_run(directory, fingerprint)
    if existing is not None:
        log.info("%s seed %d: already trained (%s); pass --fresh to retrain", name, seed, directory)
        return existing

    torch.manual_seed(seed)
    model = build_model(spec, info).to(device)
    optimizer = build_optimizer(model, recipe)
    steps_per_epoch = len(data["train_labels"]) // recipe.batch_size
    scheduler = build_scheduler(optimizer, recipe, steps_per_epoch)
    directory.mkdir(parents=True, exist_ok=True)
    done = ckpt.load_resume_state(directory, model, optimizer, scheduler, fingerprint)
    history = read_jsonl(directory / ckpt.METRICS)[:done]
    if done:
        log.info("%s seed %d: resuming after epoch %d/%d", name, seed, done, recipe.epochs)
    config = {
        "model": name, "model_spec": spec, "dataset": info.name, "dataset_info": info.to_dict(),
        "recipe": recipe.to_dict(), "seed": seed, "fingerprint": fingerprint, **subsets,
        "description": describe(model), "provenance": provenance(),
    }  # fmt: skip
    atomic_write_json(directory / ckpt.CONFIG, config)
    if not done:
        (directory / ckpt.METRICS).unlink(missing_ok=True)
    for epoch in range(done, recipe.epochs):
        generator = torch.Generator().manual_seed(seed * 100_003 + epoch)  # order/augmentation per epoch
        start = time.perf_counter()
        stats = train_one_epoch(
            model, data["train_images"], data["train_labels"], optimizer, scheduler, recipe, generator,
            device=device, desc=f"{name} s{seed} epoch {epoch + 1}/{recipe.epochs}", progress=not args.no_progress,
        )  # fmt: skip
        val = evaluate(model, data["val_images"], data["val_labels"], device=device)
        row = {
            "epoch": epoch + 1,
            **stats,
            "val_loss": val["loss"],
            "val_accuracy": val["accuracy"],
            "lr": scheduler.get_last_lr()[0],
            "epoch_seconds": time.perf_counter() - start,
        }
        history.append(row)
        append_jsonl(directory / ckpt.METRICS, [row])
        ckpt.save_resume_state(directory, model, optimizer, scheduler, epoch + 1, fingerprint)
        log.info(
            "%s seed %d epoch %d: loss %.3f train acc %.3f val acc %.3f (%.0f img/s)",
            name,
            seed,
            epoch + 1,
            stats["train_loss"],
            stats["train_accuracy"],
            val["accuracy"],
            stats["train_images_per_s"],
        )
    test = evaluate(model, data["test_images"], data["test_labels"], device=device)
    sha = ckpt.save_weights(directory / ckpt.WEIGHTS, model)
    desc = describe(model)
    final = {
        "test_accuracy": test["accuracy"], "test_loss": test["loss"], "eval_images_per_s": test["images_per_s"],
        "val_accuracy": history[-1]["val_accuracy"] if history else None,
        "train_images_per_s": sum(h["train_images_per_s"] for h in history) / max(1, len(history)),
        "train_seconds": sum(h["epoch_seconds"] for h in history), "checkpoint_sha256": sha,
        **_compute_cost(model, info), **desc,
    }  # fmt: skip
    config["final"] = final
    atomic_write_json(directory / ckpt.CONFIG, config)
    ckpt.clear_resume_state(directory)
    return _summary_row(name, seed, recipe.epochs, final)


def _summary_row(name: str, seed: int, epochs: int, final: dict[str, Any]) -> dict[str, Any]:
    row = {"model": name, "seed": seed, "epochs": epochs}
    row.update({k: final.get(k) for k in SUMMARY_COLUMNS if k not in row})
    return row


def _finished_run(directory: Path, fingerprint: str) -> dict[str, Any] | None:
    path = directory / ckpt.CONFIG
    if not path.exists():
        return None
    config = ckpt.read_config(directory)
    if config.get("fingerprint") != fingerprint:
        if "final" in config:
            raise SystemExit(
                f"{directory} holds a finished run with a different configuration; pass --fresh to overwrite it "
                f"or choose another --out folder"
            )
        return None  # an unfinished run of another config: load_resume_state will refuse it clearly
    if "final" not in config or not (directory / ckpt.WEIGHTS).exists():
        return None
    return _summary_row(config["model"], config["seed"], config["recipe"]["epochs"], config["final"])


def load_training_data(args: argparse.Namespace, seed: int) -> dict[str, Any]:
    images, labels, info = load_split(args.dataset, "train", root=args.data_dir)
    test_images, test_labels, _ = load_split(args.dataset, "test", root=args.data_dir)
    if args.train_subset:
        keep = torch.randperm(len(labels), generator=torch.Generator().manual_seed(seed))[: args.train_subset]
        images, labels = images[keep.sort().values], labels[keep.sort().values]
    if args.test_subset:
        test_images, test_labels = test_images[: args.test_subset], test_labels[: args.test_subset]
    train_idx, val_idx = train_val_split(len(labels), args.val_fraction, seed)
    return {
        "info": info,
        "train_images": images[train_idx], "train_labels": labels[train_idx],
        "val_images": images[val_idx], "val_labels": labels[val_idx],
        "test_images": test_images, "test_labels": test_labels,
    }  # fmt: skip


def write_summary(
    out: str | Path, info: DatasetInfo, rows: list[dict[str, Any]]
) -> tuple[Path, pd.DataFrame]:
    """Merge rows into ``<out>/train/<dataset>/summary.csv`` (one row per model and seed)."""
    path = Path(out) / "train" / info.slug / "summary.csv"
    table = pd.DataFrame(rows, columns=SUMMARY_COLUMNS)
    if path.exists():
        old = pd.read_csv(path)
        table = pd.concat([old, table]).drop_duplicates(["model", "seed"], keep="last")
    table = table.sort_values(["model", "seed"]).reset_index(drop=True)
    atomic_write(path, lambda tmp: table.to_csv(tmp, index=False, float_format="%.6g"))
    return path, table


def format_summary(table: pd.DataFrame) -> str:
    """A terminal table: accuracy in %, throughput rounded, one row per model (mean over seeds, ± std)."""
    grouped = table.groupby("model", sort=False)
    view = pd.DataFrame({
        "seeds": grouped["seed"].count(),
        "test acc %": grouped["test_accuracy"].agg(lambda s: _mean_std(100 * s)),
        "params": grouped["params"].first().map("{:,}".format),
        "tokens": grouped["tokens"].first(),
        "H": grouped["token_width"].first(),
        "GMACs": grouped["gmacs"].first().map("{:.4f}".format),
        "MACs saved %": grouped["macs_saved"].first().map(lambda v: f"{100 * v:.1f}"),
        "train img/s": grouped["train_images_per_s"].mean().round(0).astype(int),
        "eval img/s": grouped["eval_images_per_s"].mean().round(0).astype(int),
    })  # fmt: skip
    return view.to_string()


def _mean_std(values: pd.Series) -> str:
    if len(values) < 2:
        return f"{values.iloc[0]:.2f}"
    return f"{values.mean():.2f} ± {values.std(ddof=1):.2f}"


def main(argv: list[str] | None = None) -> int:
    """Entry point; bad input (unknown model or data set, corrupt checkpoint ...) ends with one clear line."""
    try:
        return run(argv)
    except ValueError as err:
        raise SystemExit(f"error: {err}") from None


def run(argv: list[str] | None = None) -> int:
    args = get_args_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        datefmt="%H:%M:%S",
    )
    if args.epochs < 1 or args.batch_size < 1:
        raise SystemExit("--epochs and --batch-size must be positive")
    names = args.model or list_zoo()
    for name in names:
        load_spec(name)  # fail early on unknown names, before any data is loaded
    recipe = Recipe(
        epochs=args.epochs,
        batch_size=args.batch_size,
        lr=args.lr,
        weight_decay=args.weight_decay,
        augmentation=args.augmentation,
        val_fraction=args.val_fraction,
    )
    device = resolve_device(args.device)
    rows = []
    for seed in args.seed:
        data = load_training_data(args, seed)
        for name in names:
            rows.append(train_model(name, data, recipe, seed, args, device))
    path, table = write_summary(args.out, data["info"], rows)
    shown = table[table["model"].isin([r["model"] for r in rows])]
    sys.stdout.write(f"\nTraining summary ({data['info'].name}; {path}):\n{format_summary(shown)}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
