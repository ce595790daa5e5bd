"""Is every threat of the headline suite attacked as hard as it can be? The suite against an independent PGD.

A suite's worst case is an upper bound on robust accuracy; it is only as good as its attacks. This benchmark
puts the suite's worst case (``evaluate(..., escalation=False)``, every gradient mode the model offers, no
cross-check unless ``--cross-check``) beside a strong attack written here in plain torch, independent of the
harness's PGD engine: projected gradient ascent with 100 steps from 3 random starts (uniform in the L∞ cube,
uniform in the L2 ball), once on the cross-entropy and once on the Carlini-Wagner margin
``max_{j != y} z_j - z_y``, a cosine-decayed step (eps / 4 down to 0; L2 steps along the normalised
gradient), every iterate checked, so a point counts as broken if any iterate of any start and loss is
misclassified. As in the harness's worst case, a point broken at a smaller budget is broken at the larger
ones (the same point lies in the larger ball). Every counted point is checked again in the end: inside [0, 1],
within the budget, misclassified by a fresh forward.

Models, all undefended: the small CNN of the gallery (``models.gallery.SmallCNN``, trained here with Adam,
cached in ``benchmarks/results/train-cache/``) and the zoo's ``patch`` ViT (``results/``' checkpoint after
`make demo`, else trained here once, 3 epochs on 20,000 images); the first 100 test images of Fashion-MNIST
(``synthetic`` when its files are not here); every budget of the suite's L∞ and L2 grids. Transfer entries need a surrogate and are
left out (on an undefended model the white-box members decide the worst case). Writes
``benchmarks/results/strength.csv`` and ``strength.txt``: per model, threat and eps the clean count, the
suite's and the strong attack's robust accuracy, their difference in points (suite minus strong: above 0 the
suite misses breaks) and the points only one of them breaks. The goal is a difference of at most 1 point.

Run alone (not in ``make bench``: it measures strength, not speed; about 2 minutes on one core with the models
cached, 5 on a fresh clone):
``python -m benchmarks.bench_strength [--quick] [--suite headline] [--model cnn --model patch]``.
"""

from __future__ import annotations

import argparse
import csv
import logging
import math
import os
import subprocess
import sys
import time
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from benchmarks.harness import (
    REPO,
    TRAIN_CACHE,
    TRAINED,
    bench_dataset,
    bench_images,
    bench_model,
    machine_facts,
    parser,
)
from robustbench_wave.attacks import Suite, load_suite
from robustbench_wave.data import dataset_info, load_split
from robustbench_wave.evaluation import EvalSettings, evaluate
from robustbench_wave.evaluation.metrics import robust_flags
from robustbench_wave.models.gallery import SmallCNN
from robustbench_wave.training.checkpoint import load_trained, run_dir

log = logging.getLogger("benchmarks.strength")

THREATS = ("Linf", "L2")
STEPS, STARTS, N_EXAMPLES = 100, 3, 100
QUICK_STEPS, QUICK_STARTS, QUICK_N = 25, 1, 32
FIRST_STEP = 0.25  # the first step in units of eps; cosine-decayed to 0 over the steps
CNN_EPOCHS, CNN_TRAIN = 2, 60000  # a few epochs of Adam on the train split (quick: 1 on 8,192)
QUICK_CNN_EPOCHS, QUICK_CNN_TRAIN = 1, 8192
ZOO_EPOCHS, ZOO_TRAIN = (
    3,
    20000,
)  # a zoo ViT trained here when results/ has none (quick: the harness's tiny one)
GOAL_POINTS = 1.0  # the largest gap the suite may leave against the strong attack
LINF_ATOL, L2_RTOL = 1e-6, 1e-5  # the budget check's float slack (the harness's audit allows the same order)
STEM = "strength"


# ------------------------------------------------------------------------------------- the strong attack
def ce_loss(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Per-example cross-entropy (ascended)."""
    return F.cross_entropy(logits, y, reduction="none")


def margin_loss(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Per-example Carlini-Wagner margin max_{j != y} z_j - z_y (ascended; > 0 = misclassified)."""
    true = logits.gather(1, y[:, None]).squeeze(1)
    other = logits.scatter(1, y[:, None], float("-inf")).amax(1)
    return other - true


LOSSES: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    "ce": ce_loss,
    "margin": margin_loss,
}


def _l2(t: torch.Tensor) -> torch.Tensor:
    """Per-example L2 norm, shaped to broadcast over (B, C, H, W)."""
    return t.flatten(1).norm(dim=1).view(-1, *([1] * (t.dim() - 1)))


def random_start(x: torch.Tensor, eps: float, threat: str, gen: torch.Generator) -> torch.Tensor:
    """A start uniform in the eps-ball (L∞ cube, or L2 ball), clipped to [0, 1]."""
    if threat == "Linf":
        delta = (torch.rand(x.shape, generator=gen) * 2 - 1) * eps
    else:
        direction = torch.randn(x.shape, generator=gen)
        radius = torch.rand(len(x), generator=gen) ** (1.0 / x[0].numel())
        delta = direction / _l2(direction).clamp_min(1e-12) * eps * radius.view(-1, 1, 1, 1)
    return (x + delta.to(x.device)).clamp(0, 1)


def project(x: torch.Tensor, adv: torch.Tensor, eps: float, threat: str) -> torch.Tensor:
    """Into the eps-ball around x, then into [0, 1] (clipping never lengthens a perturbation)."""
    delta = adv - x
    if threat == "Linf":
        delta = delta.clamp(-eps, eps)
    else:
        delta = delta * (eps / _l2(delta).clamp_min(1e-12)).clamp(max=1.0)
    return (x + delta).clamp(0, 1)


def ascend(adv: torch.Tensor, grad: torch.Tensor, step: float, threat: str) -> torch.Tensor:
    """One ascent step: the gradient's sign (L∞) or its normalised direction (L2), of length ``step``."""
    if threat == "Linf":
        return adv + step * grad.sign()
    return adv + step * grad / _l2(grad).clamp_min(1e-12)


def pgd(
    model: nn.Module, x: torch.Tensor, y: torch.Tensor, eps: float, threat: str, loss: str, steps: int,
    gen: torch.Generator,
) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
    """One PGD run from a random start: (a misclassified iterate per point where one was found, found flags).

    Every iterate (the start and each step's result) is classified; the first misclassified one is kept."""
    fn = LOSSES[loss]
    adv = random_start(x, eps, threat, gen)
    found = torch.zeros(len(x), dtype=torch.bool, device=x.device)
    best = x.clone()
    for t in range(steps + 1):
        adv = adv.detach().requires_grad_(True)
        logits = model(adv)
        wrong = (logits.argmax(1) != y) & ~found
        best[wrong] = adv.detach()[wrong]
        found = found | wrong
        if t == steps or bool(found.all()):
            break
        (grad,) = torch.autograd.grad(fn(logits, y).sum(), adv)
        step = FIRST_STEP * eps * 0.5 * (1 + math.cos(math.pi * t / steps))
        adv = project(x, ascend(adv.detach(), grad, step, threat), eps, threat)
    return best, found


def in_budget(x: torch.Tensor, adv: torch.Tensor, eps: float, threat: str) -> torch.Tensor:
    """Per point: finite, inside [0, 1] and within the budget (with float slack)."""
    delta = (adv - x).flatten(1)
    norm = delta.abs().amax(1) if threat == "Linf" else delta.norm(dim=1)
    limit = eps + LINF_ATOL + (L2_RTOL * eps if threat == "L2" else 0.0)
    finite = torch.isfinite(adv).flatten(1).all(1)
    box = (adv >= 0).flatten(1).all(1) & (adv <= 1).flatten(1).all(1)
    return finite & box & (norm <= limit)


@dataclass(frozen=True)
class StrongSettings:
    """The independent attack's budget of work: steps per run, random starts per loss, the losses, the seed."""

    steps: int = STEPS
    starts: int = STARTS
    losses: tuple[str, ...] = tuple(LOSSES)
    seed: int = 0


def _generator(settings: StrongSettings, *parts: Any) -> torch.Generator:
    """A CPU generator seeded by the settings' seed and ``parts`` only (stable across runs)."""
    key = "/".join(map(str, (settings.seed, *parts))).encode()
    return torch.Generator().manual_seed(zlib.crc32(key))


def strong_robust(
    model: nn.Module, x: torch.Tensor, y: torch.Tensor, threat: str, grid: Sequence[float],
    settings: StrongSettings,
) -> dict[float, torch.Tensor]:  # fmt: skip
    """Per budget (ascending), robust flags under the strong attack: clean-correct and no verified break at
    this eps or a smaller one. Each run attacks only the points still robust."""
    with torch.no_grad():
        robust = model(x).argmax(1) == y
    out: dict[float, torch.Tensor] = {}
    for eps in sorted(grid):
        for loss in settings.losses:
            for start in range(settings.starts):
                idx = robust.nonzero().flatten()
                if len(idx) == 0:
                    break
                gen = _generator(settings, threat, eps, loss, start)
                adv, found = pgd(model, x[idx], y[idx], eps, threat, loss, settings.steps, gen)
                inside = in_budget(x[idx], adv, eps, threat)
                if bool((found & ~inside).any()):
                    log.warning(
                        "%s %g: %d points left the budget and do not count",
                        threat,
                        eps,
                        int((found & ~inside).sum()),
                    )
                with torch.no_grad():
                    broken = found & inside & (model(adv).argmax(1) != y[idx])
                robust[idx[broken]] = False
        out[eps] = robust.clone()
    return out


# ------------------------------------------------------------------------------------------- the suite
def suite_robust(
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    suite: Suite,
    dataset: str,
    cross_check: str,
    name: str,
) -> dict[tuple[str, float], torch.Tensor]:
    """Robust flags per (threat, eps) of the suite's L∞ and L2 grids: its per-example worst case over every
    attack and gradient mode (``evaluate`` without escalation, no surrogate: transfer entries are skipped)."""
    info = dataset_info(dataset)
    settings = EvalSettings(model_name=name, dataset=info, cross_check=cross_check)
    records = evaluate(model, x, y, suite, settings, escalation=False, progress=False).records
    flags: dict[tuple[str, float], torch.Tensor] = {}
    for threat, grid in suite_grid(suite, dataset).items():
        for eps in grid:
            robust = robust_flags(records, threat, eps).sort_index().to_numpy()
            flags[(threat, eps)] = torch.tensor(robust, dtype=torch.bool)
    return flags


def suite_grid(suite: Suite, dataset: str) -> dict[str, list[float]]:
    """The suite's budgets per threat for ``dataset``, L∞ and L2 only, ascending."""
    resolved = suite.resolved_eps(dataset)
    return {t: sorted(resolved[t]) for t in THREATS if resolved.get(t)}


# ------------------------------------------------------------------------------------------- the models
def trained_cnn(dataset: str, quick: bool, seed: int = 0) -> nn.Module:
    """The gallery's small CNN trained with Adam (lr 1e-3, batch 128) on the train split; cached by settings."""
    epochs, n_train = (QUICK_CNN_EPOCHS, QUICK_CNN_TRAIN) if quick else (CNN_EPOCHS, CNN_TRAIN)
    info = dataset_info(dataset)
    torch.manual_seed(seed)
    net = SmallCNN(info.num_classes, info.in_chans)
    path = TRAIN_CACHE / f"small-cnn_{dataset.replace(':', '_')}_e{epochs}_n{n_train}_seed{seed}.pt"
    if path.exists():
        net.load_state_dict(torch.load(path, weights_only=True))
        return net.eval()
    images, labels, _ = load_split(dataset, "train", download=False)
    images, labels = images[:n_train], labels[:n_train]
    log.info(
        "training the small CNN on %d %s images for %d epochs (once; cached in %s)",
        len(labels),
        dataset,
        epochs,
        path,
    )
    gen = torch.Generator().manual_seed(seed)
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)
    net.train()
    for _ in range(epochs):
        order = torch.randperm(len(labels), generator=gen)
        for i in range(0, len(order), 128):
            batch = order[i : i + 128]
            loss = F.cross_entropy(net(images[batch].float() / 255.0), labels[batch])
            opt.zero_grad()
            loss.backward()
            opt.step()
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(net.state_dict(), path)
    return net.eval()


def zoo_root(name: str, dataset: str, args: argparse.Namespace) -> Path:
    """A results folder holding ``train/<dataset>/<name>/seed-0``: ``--trained-dir``, `make demo`'s, else one
    trained here once (ZOO_EPOCHS on ZOO_TRAIN images: the harness's tiny model stays near chance on a ViT)."""
    for root in (args.trained_dir, TRAINED):
        if root is not None and (run_dir(root, dataset, name, 0) / "model.safetensors").exists():
            return root
    root = TRAIN_CACHE / "strength"
    if not (run_dir(root, dataset, name, 0) / "model.safetensors").exists():
        log.info("training %s on %s for this benchmark (once; cached in %s)", name, dataset, root)
        flags = ["--epochs", str(ZOO_EPOCHS), "--train-subset", str(ZOO_TRAIN), "--n-examples", "1000"]
        cmd = [sys.executable, "-m", "robustbench_wave.train", "--model", name, "--dataset", dataset, *flags]
        cmd += ["--device", "cpu", "--no-progress", "--results-dir", str(root)]
        subprocess.run(cmd, cwd=REPO, check=True, env={**os.environ, "OMP_NUM_THREADS": str(args.threads)})
    return root


def load_model(name: str, dataset: str, args: argparse.Namespace) -> tuple[nn.Module, str]:
    """``cnn`` (the gallery's small CNN, trained here) or a zoo model (``--untrained``: as built), in eval mode
    with frozen weights, and words saying how it was trained."""
    if name == "cnn":
        epochs, n_train = (QUICK_CNN_EPOCHS, QUICK_CNN_TRAIN) if args.quick else (CNN_EPOCHS, CNN_TRAIN)
        model, kind = trained_cnn(dataset, args.quick), f"Adam, {epochs} epochs on {n_train} images"
    elif args.untrained or args.quick:
        model, kind = bench_model(name, dataset, args)  # quick: the harness's tiny model
    else:
        root = zoo_root(name, dataset, args)
        model, _ = load_trained(name, dataset, root, 0)
        kind = f"trained, {root.relative_to(REPO) if root.is_relative_to(REPO) else root}"
    for p in model.parameters():
        p.requires_grad_(False)
    return model.eval(), kind


# ------------------------------------------------------------------------------------------- the table
@dataclass(frozen=True)
class Comparison:
    """One (model, threat, eps): robust counts of the suite and the strong attack on the same n points."""

    model: str
    threat: str
    eps: float
    n: int
    clean: int
    suite: int
    strong: int
    only_strong: int  # points the strong attack breaks and the suite leaves standing
    only_suite: int  # points the suite breaks and the strong attack leaves standing
    suite_s: float  # seconds of the model's whole suite run / strong attack (every threat and budget)
    strong_s: float

    @property
    def gap(self) -> float:
        """Suite minus strong robust accuracy, in points: above 0 the suite misses breaks."""
        return 100.0 * (self.suite - self.strong) / self.n


def compare_model(
    name: str, model: nn.Module, x: torch.Tensor, y: torch.Tensor, suite: Suite, args: argparse.Namespace,
    settings: StrongSettings,
) -> list[Comparison]:  # fmt: skip
    """The suite and the strong attack on one model, at every L∞ and L2 budget of the suite's grid."""
    t0 = time.perf_counter()
    ours = suite_robust(model, x, y, suite, args.dataset, args.cross_check, name)
    suite_s, t0 = time.perf_counter() - t0, time.perf_counter()
    grid = suite_grid(suite, args.dataset)
    strong = {
        (t, e): f for t, g in grid.items() for e, f in strong_robust(model, x, y, t, g, settings).items()
    }
    strong_s = time.perf_counter() - t0
    with torch.no_grad():
        clean = int((model(x).argmax(1) == y).sum())
    rows = []
    for (threat, eps), a in ours.items():
        b = strong[(threat, eps)]
        rows.append(
            Comparison(
                name,
                threat,
                eps,
                len(x),
                clean,
                int(a.sum()),
                int(b.sum()),
                int((a & ~b).sum()),
                int((b & ~a).sum()),
                suite_s,
                strong_s,
            )
        )
    log.info("%s: suite %.0f s, strong attack %.0f s", name, suite_s, strong_s)
    return rows


FIELDS = ("model", "threat", "eps", "n", "clean_pct", "suite_pct", "strong_pct", "diff_points")
FIELDS += ("only_strong", "only_suite", "suite_s", "strong_s")


def row_values(c: Comparison) -> dict[str, Any]:
    """One CSV row: percentages of n, the gap in points, the one-sided counts, the seconds."""
    pct = 100.0 / c.n
    return {
        "model": c.model, "threat": c.threat, "eps": c.eps, "n": c.n,
        "clean_pct": round(c.clean * pct, 2), "suite_pct": round(c.suite * pct, 2),
        "strong_pct": round(c.strong * pct, 2), "diff_points": round(c.gap, 2),
        "only_strong": c.only_strong, "only_suite": c.only_suite,
        "suite_s": round(c.suite_s, 1), "strong_s": round(c.strong_s, 1),
    }  # fmt: skip


def table_text(rows: Sequence[Comparison], header: Sequence[str]) -> str:
    """The readable table: the header lines, one line per row, then whether the goal holds everywhere."""
    names = (
        "model",
        "threat",
        "eps",
        "clean %",
        "suite %",
        "strong %",
        "diff (points)",
        "only strong",
        "only suite",
    )
    lines = [*header, "", "  ".join(f"{n:>13}" for n in names)]
    for c in rows:
        v = row_values(c)
        cells = (
            c.model,
            c.threat,
            f"{c.eps:g}",
            v["clean_pct"],
            v["suite_pct"],
            v["strong_pct"],
            f"{c.gap:+.1f}",
        )
        lines.append("  ".join(f"{s:>13}" for s in (*cells, c.only_strong, c.only_suite)))
    worst = max(rows, key=lambda c: c.gap)
    verdict = "yes" if worst.gap <= GOAL_POINTS else "no"
    lines += [
        "",
        f"suite within {GOAL_POINTS:g} point of the strong attack at every budget: {verdict} (largest gap "
        f"{worst.gap:+.1f} points: {worst.model} {worst.threat} {worst.eps:g})",
    ]
    lines += [
        f"seconds, {m}: suite {c.suite_s:.0f}, strong attack {c.strong_s:.0f}"
        for m, c in _first_per_model(rows)
    ]
    return "\n".join(lines) + "\n"


def _first_per_model(rows: Sequence[Comparison]) -> list[tuple[str, Comparison]]:
    seen: dict[str, Comparison] = {}
    for c in rows:
        seen.setdefault(c.model, c)
    return list(seen.items())


def write_table(rows: Sequence[Comparison], header: Sequence[str], out: Path) -> str:
    """``OUT/strength.csv`` (one row per model, threat, eps) and ``OUT/strength.txt``; returns the text."""
    out.mkdir(parents=True, exist_ok=True)
    with open(out / f"{STEM}.csv", "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(FIELDS))
        writer.writeheader()
        writer.writerows(row_values(c) for c in rows)
    text = table_text(rows, header)
    (out / f"{STEM}.txt").write_text(text)
    return text


# ------------------------------------------------------------------------------------------- command line
def add_flags(p: argparse.ArgumentParser) -> None:
    """This script's own flags: the suite, the models, the images, the cross-check, the strong attack's work."""
    p.add_argument("--suite", default="headline", help="suite name or TOML file (default headline)")
    p.add_argument("--model", action="append", help="'cnn' or a zoo model (repeat; default cnn and patch)")
    p.add_argument(
        "--n-examples",
        type=int,
        default=None,
        help=f"first N test images (default {N_EXAMPLES}, quick {QUICK_N})",
    )
    p.add_argument(
        "--cross-check", default="off", choices=["off", "headline", "all"],
        help="the suite's cross-check back-ends (default off: the suite's own attacks alone)",
    )  # fmt: skip
    p.add_argument(
        "--steps", type=int, default=None, help=f"strong attack steps (default {STEPS}, quick {QUICK_STEPS})"
    )
    p.add_argument(
        "--starts",
        type=int,
        default=None,
        help=f"random starts per loss (default {STARTS}, quick {QUICK_STARTS})",
    )


def run(args: argparse.Namespace) -> tuple[list[Comparison], list[str]]:
    """Every model against the suite and the strong attack; the rows and the table's header lines."""
    args.dataset = bench_dataset()
    n = args.n_examples or (QUICK_N if args.quick else N_EXAMPLES)
    settings = StrongSettings(
        steps=args.steps or (QUICK_STEPS if args.quick else STEPS),
        starts=args.starts or (QUICK_STARTS if args.quick else STARTS),
    )
    suite = load_suite(args.suite)
    x, y = bench_images(n, args.dataset)
    rows: list[Comparison] = []
    kinds = []
    for name in args.model or ["cnn", "patch"]:
        model, kind = load_model(name, args.dataset, args)
        kinds.append(f"{name} ({kind})")
        rows += compare_model(name, model, x, y, suite, args, settings)
    facts = machine_facts()
    header = [
        f"Suite {suite.name!r} (cross-check {args.cross_check}, no escalation, no surrogate) against an independent "
        f"PGD ({settings.steps} steps, {settings.starts} random starts per loss, losses {'+'.join(settings.losses)}), "
        f"first {n} {args.dataset} test images; models {', '.join(kinds)}",
        "Robust accuracy %; diff = suite - strong in points (above 0: the suite misses breaks)",
        "Machine: " + ", ".join(f"{k} {v}" for k, v in facts.items()),
    ]
    return rows, header


def main() -> None:
    p = parser(__doc__.splitlines()[0])
    add_flags(p)
    args = p.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    logging.getLogger("robustbench_wave").setLevel(logging.WARNING)  # per-attack timings would flood the log
    torch.set_num_threads(args.threads)
    rows, header = run(args)
    sys.stdout.write(write_table(rows, header, args.out))


if __name__ == "__main__":
    main()
