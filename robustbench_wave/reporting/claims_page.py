"""``claims.md``: every claim of the source papers with its numbers, test, command and verdict, from saved
results alone (nothing is trained or attacked again).

Inputs (any subset, at least one): training data-set folders ``results/train/<slug>/`` (each finished
``<model>/seed-<s>/config.json``, read with :func:`robustbench_wave.training.checkpoint.read_config` and
checked against the spec hash recorded at training), attack run folders (:func:`runs.load_run`, which
refuses partial or edited records) and the cost-model CSV of ``benchmarks/bench_cost_model.py``. A claim
whose input is missing is "inconclusive at this scale: not measured", with the command that measures it.
The verdicts come from :mod:`robustbench_wave.analysis.claim_rules`; this module reads, groups and renders.
Each claim is one :class:`Claim` record in :data:`CLAIMS` (title, short name, source, measuring command,
rule, input, finder); everything here iterates over that registry. The text depends only on the inputs (no clock, no absolute path added), so the same inputs rebuild the
same bytes.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from robustbench_wave.analysis import claim_rules as cl
from robustbench_wave.analysis import formatting as fmt
from robustbench_wave.analysis import verdict as vd
from robustbench_wave.core.io import atomic_write_text
from robustbench_wave.data import DatasetInfo
from robustbench_wave.evaluation.metrics import declared_reference
from robustbench_wave.models.frontend import grad_switches
from robustbench_wave.models.tokenpool import TokenPooling
from robustbench_wave.models.vit import build_model
from robustbench_wave.reporting.markdown import diagnostics_failures, self_transfer
from robustbench_wave.reporting.plots import plot_pareto
from robustbench_wave.reporting.runs import RunFolder, class_count, load_run, run_trust
from robustbench_wave.reporting.tables import markdown_table
from robustbench_wave.reporting.verdict_text import render as render_verdict
from robustbench_wave.training import checkpoint as ckpt

log = logging.getLogger(__name__)

NOT_MEASURED = "not measured"
COST_COLUMNS = ("T", "H", "predicted_macs", "seconds_per_step")
COST_BENCH = "python -m benchmarks.bench_cost_model"
COST_CSV = "benchmarks/results/cost_model_grid.csv"
SPEED_COLUMNS = ("dataset", "candidate", "baseline", "speedup")
SPEED_BENCH = "python -m benchmarks.bench_tokenizer_speed"
SPEED_CSV = "benchmarks/results/tokenizer_speed_pairs.csv"
#: What a claim is measured from: the field of :class:`ClaimInputs` that must hold something.
TRAIN, COST, RUNS = "train", "cost", "runs"


@dataclass
class ClaimInputs:
    """What the claims report is built from (all validated on construction by :func:`load_inputs`)."""

    runs: list[RunFolder] = field(default_factory=list)
    train: pd.DataFrame = field(default_factory=pd.DataFrame)
    train_dirs: list[Path] = field(default_factory=list)
    cost: pd.DataFrame | None = None
    cost_path: Path | None = None
    speedups: pd.DataFrame | None = None
    speedups_path: Path | None = None
    command: str = ""

    def has(self, need: str) -> bool:
        """Whether the inputs hold ``need`` (:data:`TRAIN`, :data:`COST` or :data:`RUNS`)."""
        given = {TRAIN: not self.train.empty, COST: self.cost is not None, RUNS: bool(self.runs)}
        if need not in given:
            raise ValueError(f"unknown claim input {need!r}; one of {sorted(given)}")
        return given[need]


@dataclass(frozen=True)
class Claim:
    """One claim of the source papers and everything ``claims.md`` says about it: its number, title, short
    name (the summary table's), source, the command that measures it and what to pass to this report
    afterwards, its rule, the input it is measured from, and its finder (reads that input from
    :class:`ClaimInputs` and calls the claim's function of :mod:`robustbench_wave.analysis.claim_rules`)."""

    number: int
    title: str
    short: str
    source: str
    command: str
    then: str
    rule: str  # a template: {names} of rule_values(), filled when rendered, so no threshold is copied
    needs: str  # TRAIN, COST or RUNS
    finder: Callable[[ClaimInputs], list[cl.Finding]]

    def rule_text(self) -> str:
        """The rule with the analysis' current thresholds."""
        return self.rule.format(**rule_values())


def rule_values() -> dict[str, Any]:
    """The thresholds the analysis decides with, under the names the rules' templates use (read at each
    call: a rule always states the constant its finder applies)."""
    return {
        "min_seeds": cl.MIN_SEEDS,
        "alpha": cl.ALPHA,
        "rank_rho": cl.RANK_RHO,
        "ratio_tol": cl.RATIO_TOL,
        "min_budgets": cl.MIN_BUDGETS,
        "margin": fmt.number(vd.EQUIVALENCE_MARGIN, scale=100.0, digits=0, unit=" points"),
        "tost_level": f"{100 * (1 - 2 * cl.ALPHA):.0f}%",
    }


# ------------------------------------------------------------------------------------------------ reading
def read_train_folder(folder: Path) -> list[dict[str, Any]]:
    """One row per finished training run in ``folder`` (``<model>/seed-<s>/config.json``); unfinished runs
    are skipped with a log line; an edited config.json (spec hash) is refused (ValueError, one line)."""
    if not folder.is_dir():
        raise ValueError(f"--train {folder}: not a folder; give results/train/<data set slug>")
    rows = []
    for config_path in sorted(folder.glob("*/seed-*/" + ckpt.CONFIG)):
        config = ckpt.read_config(config_path.parent)
        if "final" not in config:
            log.info("%s: training not finished; left out", config_path.parent)
            continue
        ckpt.verify_spec(config, config_path)
        rows.append(_train_row(config, config_path))
    return rows


def _train_row(config: dict[str, Any], path: Path) -> dict[str, Any]:
    final, spec = config["final"], config.get("model_spec") or {}
    pool = spec.get("tokenpool") or {}
    keep = pool.get("keep")
    info = config.get("dataset_info") or {}
    try:
        return {
            "dataset": str(info.get("slug") or path.parents[2].name),
            "dataset_spec": str(config.get("dataset", "")),
            "model": str(config["model"]),
            "seed": int(config["seed"]),
            "tokenizer": str(spec.get("tokenizer", "")),
            "pool_method": pool.get("method"),
            "pool_keep": "-".join(str(k) for k in keep) if isinstance(keep, list) else keep,
            "recipe": training_recipe(config),
            "tokens": final.get("tokens"),
            "params": final.get("params"),
            "gmacs": float(final.get("gmacs", math.nan)),
            "test_accuracy": float(final["test_accuracy"]),
            "train_images_per_s": float(final["train_images_per_s"]),
            "train_seconds": float(final.get("train_seconds", math.nan)),
            "command": train_command(config),
        }
    except (KeyError, TypeError, ValueError) as err:
        raise ValueError(f"{path}: field {err} is missing or malformed; re-train with --overwrite") from None


def training_recipe(config: dict[str, Any]) -> str:
    """How a model was trained, in words: claim 4 compares pooling methods trained the same way only (a
    pooled model trained from scratch is not a point of the fine-tuned grid)."""
    recipe = config.get("recipe") or {}
    start = config.get("init_from") or {}
    origin = f"fine-tuned from {start['model']}" if start.get("model") else "from scratch"
    subset = f" on {config['train_subset']} images" if config.get("train_subset") is not None else ""
    return f"{origin}, {recipe.get('epochs')} epochs at lr {recipe.get('lr')}{subset}"


def train_command(config: dict[str, Any]) -> str:
    """The training command that produced a run (reconstructed from its recorded recipe and subsets)."""
    recipe = config.get("recipe") or {}
    parts = [
        "python -m robustbench_wave.train", f"--model {config['model']}", f"--dataset {config.get('dataset')}",
        f"--train-seed {config['seed']}", f"--epochs {recipe.get('epochs')}",
    ]  # fmt: skip
    for key, flag in (("train_subset", "--train-subset"), ("test_subset", "--n-examples")):
        if config.get(key) is not None:
            parts.append(f"{flag} {config[key]}")
    if recipe.get("augmentation"):
        parts.append("--augmentation")
    return " ".join(parts)


def _read_bench_csv(path: Path, flag: str, columns: Sequence[str], measure: str) -> pd.DataFrame:
    """A benchmark CSV with ``columns``; a one-line ValueError naming ``flag`` and ``measure`` else."""
    if not path.is_file():
        raise ValueError(f"{flag} {path}: no such file; run {measure}")
    try:
        df = pd.read_csv(path)
    except (OSError, UnicodeDecodeError, ValueError) as err:
        raise ValueError(f"{flag} {path}: cannot be read ({' '.join(str(err).split())})") from None
    missing = [c for c in columns if c not in df.columns]
    if missing or df.empty:
        raise ValueError(f"{flag} {path}: missing column(s) {missing} or no rows; need {list(columns)}")
    return df


def _positive(df: pd.DataFrame, columns: Sequence[str], flag: str, path: Path) -> pd.DataFrame:
    values = df[list(columns)].apply(pd.to_numeric, errors="coerce")
    if values.isna().any().any() or (values <= 0).any().any():
        raise ValueError(f"{flag} {path}: every {list(columns)} value must be a positive number")
    return values


def read_cost_model(path: Path) -> pd.DataFrame:
    """The cost-model CSV (columns :data:`COST_COLUMNS`, positive numbers); one-line ValueError else."""
    df = _read_bench_csv(path, "--cost-model", COST_COLUMNS, COST_BENCH)
    return _positive(df, COST_COLUMNS, "--cost-model", path).astype({"T": int, "H": int})


def read_speedups(path: Path) -> pd.DataFrame:
    """The side-by-side training-speed benchmark's paired repeats (columns :data:`SPEED_COLUMNS`, positive
    speed-ups); one-line ValueError else."""
    df = _read_bench_csv(path, "--throughput", SPEED_COLUMNS, SPEED_BENCH)
    speedup = _positive(df, ["speedup"], "--throughput", path)["speedup"]
    return df[["dataset", "candidate", "baseline"]].astype(str).assign(speedup=speedup.astype(float))


def load_inputs(
    runs: Sequence[Path],
    train: Sequence[Path],
    cost: Path | None,
    command: str = "",
    throughput: Path | None = None,
) -> ClaimInputs:
    """Read and check every input (ValueError, one line, naming it) before anything is written."""
    if not runs and not train and cost is None:
        raise ValueError("give at least one of --runs, --train, --cost-model")
    if throughput is not None and not train:
        raise ValueError("--throughput decides claim 1's speed half, which also needs --train")
    folders = [load_run(r) for r in runs]
    rows = [row for d in train for row in read_train_folder(Path(d))]
    return ClaimInputs(
        runs=folders,
        train=pd.DataFrame(rows),
        train_dirs=[Path(d) for d in train],
        cost=read_cost_model(cost) if cost is not None else None,
        cost_path=cost,
        speedups=read_speedups(throughput) if throughput is not None else None,
        speedups_path=throughput,
        command=command,
    )


# ------------------------------------------------------------------------------------------------ grouping
def run_groups(runs: Sequence[RunFolder]) -> list[tuple[str, list[RunFolder]]]:
    """Runs of one data set, suite and model set with distinct training seeds form one group (combined over
    seeds); any other run is a group of its own. Named by data set, suite and run folder names."""
    groups: dict[tuple, list[RunFolder]] = {}
    for run in runs:
        key = (_dataset(run), run.suite.name, tuple(sorted(run.models)))
        group = groups.setdefault(key, [])
        if run.train_seed is None or any(r.train_seed == run.train_seed for r in group):
            groups[(*key, str(run.path))] = [run]
        else:
            group.append(run)
    out = []
    for key, members in groups.items():
        if members:
            names = ", ".join(r.path.name for r in members)
            out.append((" · ".join(str(k) for k in (key[0], key[1], names) if k), members))
    return out


def _dataset(run: RunFolder) -> str:
    return str(run.dataset.slug or run.path.parent.name)


def _seeds(runs: Sequence[RunFolder]) -> list[int]:
    return [i if r.train_seed is None else int(r.train_seed) for i, r in enumerate(runs)]


# ------------------------------------------------------------------------------------------------ findings
def not_measured(claim: int, what: str = "") -> cl.Finding:
    """The finding of a claim without its input."""
    c = CLAIMS[claim]
    reason = f"not measured{(' (' + what + ')') if what else ''} — run `{c.command}`{c.then}"
    return cl.Finding(claim, "—", NOT_MEASURED, cl.INCONCLUSIVE, reason)


def all_findings(inputs: ClaimInputs) -> dict[int, list[cl.Finding]]:
    """Every claim's findings from whatever the inputs hold, each with the commands that produced them."""
    out = {}
    for number, claim in CLAIMS.items():
        found = claim.finder(inputs)
        what = "its inputs hold no such measurement" if inputs.has(claim.needs) else ""
        out[number] = found or [not_measured(number, what)]
    return out


def _tokenizer_findings(inputs: ClaimInputs) -> list[cl.Finding]:
    """Claim 1 from the unpooled training runs (and the side-by-side speed benchmark when given)."""
    train = inputs.train
    if train.empty:
        return []
    unpooled = train[train["pool_method"].isna()]
    found = _with_train_commands(cl.tokenizer_claim(unpooled, speedups=inputs.speedups), train)
    if inputs.speedups is not None:
        for f in found:
            f.commands.append(f"{SPEED_BENCH}  # wrote {inputs.speedups_path}")
    return found


def _cost_findings(inputs: ClaimInputs) -> list[cl.Finding]:
    """Claim 2 from the cost-model grid."""
    if inputs.cost is None:
        return []
    found = cl.cost_model_claim(inputs.cost)
    for f in found:
        f.commands = [f"{COST_BENCH}  # wrote {inputs.cost_path}"]
    return found


def _tokenpool_findings(inputs: ClaimInputs) -> list[cl.Finding]:
    """Claim 4 from the pooled training runs."""
    if inputs.train.empty:
        return []
    return _with_train_commands(cl.tokenpool_claim(inputs.train), inputs.train)


def _per_group(
    inputs: ClaimInputs, find: Callable[[str, Sequence[RunFolder]], list[cl.Finding]]
) -> list[cl.Finding]:
    """``find`` on every group of attack runs, each finding with the commands of its group's runs."""
    out = []
    for scope, group in run_groups(inputs.runs):
        found = find(scope, group)
        commands = [str(r.invocation.command or f"(no command recorded in {r.path})") for r in group]
        for f in found:
            f.commands = commands
        out += found
    return out


def _robustness_findings(inputs: ClaimInputs) -> list[cl.Finding]:
    """Claim 3 on every group of attack runs: the verdict (its words beside the first finding) and the
    attribution along the ablation chain per threat."""

    def find(scope: str, group: Sequence[RunFolder]) -> list[cl.Finding]:
        records, seeds, k = [r.records for r in group], _seeds(group), class_count(group)
        fails = diagnostics_failures(group)
        found = cl.robustness_claim(
            records,
            seeds,
            scope=scope,
            num_classes=k,
            diagnostics_failures=fails,
            self_transfer=self_transfer(group),
            reference=declared_reference(group[0].meta),
            trust=run_trust(group),
        )
        for f in found:
            if f.judgement is not None:
                f.notes.insert(0, render_verdict(f.judgement).text)
        for threat in ("Linf", "L2"):
            step = cl.attribution(
                records,
                seeds,
                scope=scope,
                num_classes=k,
                threat=threat,
                reference=declared_reference(group[0].meta),
                trust=run_trust(group),
            )
            found += [step] if step else []
        return found

    return _per_group(inputs, find)


def _masking_findings(inputs: ClaimInputs) -> list[cl.Finding]:
    """Claim 5 on every group of attack runs: exact vs BPDA gradients through the assignment alone of its
    Token Pooling models (``bpda-assignment`` rows, or ``bpda`` where pooling is the only fixed front-end),
    the BPDA side judged by the runs' trust (:func:`run_trust`: the checklist and the scan)."""

    def find(scope: str, group: Sequence[RunFolder]) -> list[cl.Finding]:
        records = [r.records for r in group]
        fails = diagnostics_failures(group)
        return cl.assignment_masking_claim(
            records,
            scope=scope,
            diagnostics_failures=fails,
            pooled=pooled_models(group),
            assignment_only=assignment_only_models(group),
            num_classes=class_count(group),
            reference=declared_reference(group[0].meta),
            trust=run_trust(group),
        )

    return _per_group(inputs, find)


def assignment_only_models(group: Sequence[RunFolder]) -> set[str]:
    """The pooled models (:func:`pooled_models`) whose only gradient-mode switches are Token Pooling layers,
    on which ``bpda`` switches the assignment alone (claim 5's fallback for runs without ``bpda-assignment``
    rows): built from the spec recorded in meta.json for the run's data set (no weights needed). A model that
    cannot be built from what meta.json records is left out (not known to switch the assignment alone)."""
    out = set()
    for run in group:
        for entry in run.models.values():
            name = entry.name
            if name in out or not entry.pools_tokens:
                continue
            try:
                info = DatasetInfo.from_dict(dict(run.dataset.info or {}))
                switches = grad_switches(build_model(dict(entry.model_spec or {}), info))
            except (KeyError, TypeError, ValueError) as err:
                log.info("%s: not built from meta.json (%s); claim 5 leaves it undecided", name, err)
                continue
            if switches and all(isinstance(s, TokenPooling) for s in switches):
                out.add(name)
    return out


def pooled_models(group: Sequence[RunFolder]) -> set[str]:
    """The models of these runs whose recorded spec pools tokens (a ``[tokenpool]`` table in meta.json)."""
    return {m.name for r in group for m in r.models.values() if m.pools_tokens}


def _with_train_commands(found: list[cl.Finding], train: pd.DataFrame) -> list[cl.Finding]:
    for f in found:
        f.commands = sorted(set(train.loc[train["dataset"] == f.scope.split(" · ")[0], "command"]))
    return found


# ------------------------------------------------------------------------------------------------ the claims
#: Every claim, in the order of claims.md. A new claim is one record here (and its function in
#: :mod:`robustbench_wave.analysis.claim_rules`).
CLAIMS: dict[int, Claim] = {
    c.number: c
    for c in (
        Claim(
            number=1,
            title="The wavelet tokenizer trains faster and reaches better top-1 than the patch tokenizer at the same token count",
            short="wavelet trains faster, better top-1",
            source="Zhu & Soricut 2024 (wavelet tokenizer)",
            command="python -m robustbench_wave.train --model patch --model wavelet --dataset fashion-mnist --train-seed 0,1,2",
            then=" (and with --dataset imagefolder:../shared/data/cifar10-jpeg.zip), then pass --train results/train/<slug>"
            f" (and {SPEED_BENCH}, then --throughput {SPEED_CSV}, for the speed half)",
            rule="Accuracy paired by training seed: more accurate in every one of at least {min_seeds} seeds (with 3 "
            "seeds an exact sign test cannot go below p = 1/8, so unanimity is the rule). Speed: with --throughput, "
            "a one-sided exact sign test (p < {alpha}) over the repeats of training steps timed side by side "
            "(benchmarks/bench_tokenizer_speed.py), else faster in every seed's training run. Supported only if both "
            "hold; not supported if the wavelet model is more accurate in no seed, or slower (in no seed faster, or "
            "significantly slower side by side); otherwise inconclusive.",
            needs=TRAIN,
            finder=_tokenizer_findings,
        ),
        Claim(
            number=2,
            title="The cost model: shrinking the token width H pays more than shrinking the token count T when T < H",
            short="cost model: H pays more than T",
            source="Zhu & Soricut 2024, §5.3; MACs as in Marin et al. 2023, Table 1",
            command=COST_BENCH,
            then=f", then pass --cost-model {COST_CSV}",
            rule="(a) Spearman ρ of predicted MACs and measured step time ≥ {rank_rho}. (b) At every grid point with "
            "T < H whose halvings were measured, the measured time ratio of halving H is below that of halving T by "
            "more than {ratio_tol} (ratios are medians of interleaved repeats, measured side by side).",
            needs=COST,
            finder=_cost_findings,
        ),
        Claim(
            number=3,
            title='"Naturally resistant to adversarial attacks", and where the robustness that survives comes from',
            short="naturally resistant",
            source="Zhu & Soricut 2024; judged as in Carlini et al. 2019 and Croce & Hein 2020",
            command="make headline",
            then=" (Fashion-MNIST; or make cifar10), then pass --runs results/attack/<slug>/<run>",
            rule="The verdict module's categories (robust under all attacks / partly masking, still more robust → "
            "supported; gradient masking / no natural robustness → not supported; inconclusive / no baseline → "
            "inconclusive), at each threat's reference budget, from the per-example worst case over every attack and "
            "gradient mode, against the patch baseline with the exact McNemar test and Newcombe's interval; "
            "training seeds pooled with the image as the unit (every seed attacks the same images: the exact "
            "sign-flip test stratified by image, Newcombe's interval on the seed-averaged table of N images). "
            "'No more robust' needs an equivalence test: two one-sided tests that the difference is within "
            "±{margin} (the {tost_level} interval inside the margin). Attribution: each ablation step's paired "
            "difference (to − from), Holm-adjusted, seeds pooled the same way; supported when the sparsification "
            "step's 95% interval clears the minimum effect of {margin}, the training seeds' t interval does too "
            "(one seed: inconclusive) and neither model of the step is unverified; not supported when it is "
            "significantly negative or within ±{margin} by TOST; the chain's steps add up to wavelet − patch.",
            needs=RUNS,
            finder=_robustness_findings,
        ),
        Claim(
            number=4,
            title="Token Pooling gives a better accuracy–compute trade-off than the selection and pruning baselines",
            short="Token Pooling trade-off",
            source="Marin et al., WACV 2023 (Token Pooling)",
            command="make tokenpool-pareto",
            then=" (every Token Pooling method at 3 keep schedules, models/tokenpool-pareto/, fine-tuned from the "
            "trained patch model), then pass --train results/train/<slug>",
            rule="Every method (K-Means, weighted K-Means, K-Medoids, weighted K-Medoids; random, importance, top-K, "
            "grid) at ≥ {min_budgets} budgets, each trained with ≥ {min_seeds} seeds (else inconclusive). A point "
            "dominates another when it needs no more MACs and its mean accuracy is higher by more than the two "
            "points' 95% t intervals over the seeds added. Supported when every baseline point is dominated by a "
            "clustering point; not supported when a baseline point dominates a clustering point; else "
            "inconclusive.",
            needs=TRAIN,
            finder=_tokenpool_findings,
        ),
        Claim(
            number=5,
            title="Token Pooling's discrete cluster assignment as a place where gradients can be masked",
            short="assignment masks gradients",
            source="Marin et al., WACV 2023; masking as in Athalye et al. 2018",
            command="make tokenpool",
            then=" (pooled models under exact, blocked, BPDA and assignment-only BPDA gradients: "
            "--grad-modes MODEL=exact,blocked,bpda,bpda-assignment per pooled model), then pass --runs <its run>",
            rule="Per pooled model with clean accuracy at or above the verdict's floor (chance plus a third of the way "
            "to 100%): robust under the white-box gradient attacks with exact gradients vs with BPDA "
            "(straight-through) gradients through the cluster assignment alone (mode bpda-assignment: every other "
            "fixed front-end, e.g. a wavelet tokenizer's mask, exact; or mode bpda where the Token Pooling layer is "
            "the model's only fixed front-end; a model with neither is inconclusive), paired on the same images, "
            "seeds pooled with the image as the unit. Gradient-free, transfer, noise, low-frequency and escalation "
            "attacks are left out: they are the same under both gradients. The BPDA side must be a real attack: "
            "a BPDA mode that failed a gradient-masking check, lost its gradient at the scan or was judged by no "
            "checklist leaves the finding inconclusive. Each test is Holm-adjusted across the models and threats "
            "of the run group. Supported when exact − BPDA's 95% interval clears the minimum effect of {margin} "
            "(the verdict's rule for masking); not supported when exact is significantly below (α = {alpha}), or "
            "within ±{margin} by two one-sided tests (the {tost_level} interval inside the margin), a significant gap "
            "inside it included; else inconclusive.",
            needs=RUNS,
            finder=_masking_findings,
        ),
    )
}


# ------------------------------------------------------------------------------------------------ rendering
def claims_table(findings: dict[int, list[cl.Finding]]) -> pd.DataFrame:
    """The short table the README quotes: claim, scope, measured, verdict."""
    rows = [
        {
            "claim": f"{c}. {CLAIMS[c].short}",
            "scope": f.scope,
            "measured": f.measured,
            "verdict": f"**{f.verdict}**",
        }
        for c, found in findings.items()
        for f in found
        if f.headline
    ]
    return pd.DataFrame(rows)


HIDDEN_COLUMNS = ("modes", "lowfreq_alone", "cumulative", "self_transfer")


def _formatted(table: pd.DataFrame) -> pd.DataFrame:
    """Fractions as percentages where the column holds accuracies or differences; columns without any
    value (an attack not in the suite) and bookkeeping columns left out."""
    df = table.drop(columns=[c for c in HIDDEN_COLUMNS if c in table]).dropna(axis=1, how="all")
    if "seed" in df and df["seed"].nunique() <= 1:
        df = df.drop(columns="seed")
    pct = [c for c in df.columns if c in ("clean", "worst_case", "gradient_free", "transfer", "lowfreq", "noise",
                                          "diff", "ci_low", "ci_high", "a", "b", "accuracy", "acc_sd", "acc_hw", "seed sd")
           or str(c).startswith("wb_")]  # fmt: skip
    for c in pct:
        df[c] = [fmt.percent(v, missing=fmt.DASH) for v in df[c]]
    for c in [
        c
        for c in df.columns
        if str(c).startswith("p") and c not in pct and c not in ("params", "pareto", "predicted_macs")
    ]:
        df[c] = [f"{float(v):.3g}" if pd.notna(v) else "" for v in df[c]]
    return df


def finding_markdown(f: cl.Finding, inputs: ClaimInputs, figures: dict[str, str]) -> str:
    parts = [f"### {f.scope}", f"**Verdict: {f.verdict}** — {f.reason}."]
    if f.measured != NOT_MEASURED:
        parts.append(f"Measured: {f.measured}.")
    if not f.table.empty:
        parts.append(markdown_table(_formatted(f.table)))
    parts += list(dict.fromkeys(f.notes))
    if f.scope in figures:
        parts.append(f"![Pareto front: {f.scope}]({figures[f.scope]})")
    if f.commands:
        parts.append("Produced by:\n\n```\n" + "\n".join(f.commands) + "\n```")
    return "\n\n".join(parts)


def render_claims(inputs: ClaimInputs, findings: dict[int, list[cl.Finding]], figures: dict[str, str]) -> str:
    """The whole claims.md (deterministic in its inputs)."""
    head = [
        "# Claims of the source papers, tested",
        "Built from saved results alone (no attack or training re-run). Rebuild with:",
        f"```\n{inputs.command}\n```" if inputs.command else "",
        markdown_table(claims_table(findings)),
    ]
    body = []
    for claim, found in findings.items():
        c = CLAIMS[claim]
        body.append(f"## {claim}. {c.title}\n\n_Source: {c.source}._ Rule: {c.rule_text()}")
        body += [finding_markdown(f, inputs, figures) for f in found]
    return "\n\n".join(p for p in [*head, *body] if p) + "\n"


def pareto_figures(findings: Sequence[cl.Finding], out_dir: Path) -> dict[str, str]:
    """One Pareto PNG per claim-4 finding with points, next to claims.md: scope -> relative file name. The
    circled front is :func:`claims.pareto_front`'s (the verdict's dominance rule), as the title says."""
    out = {}
    for f in findings:
        if f.table.empty or "gmacs" not in f.table:
            continue
        name = "claims-pareto-" + "".join(ch if ch.isalnum() else "-" for ch in f.scope).strip("-") + ".png"
        title = (
            f"Token Pooling — {f.scope}\nfront: dominance beyond the seeds' 95% intervals (claim 4's rule)"
        )
        if plot_pareto(f.table, out_dir / name, title=title) is not None:
            out[f.scope] = name
    return out


def write_claims(inputs: ClaimInputs, out: Path, *, figures: bool = True) -> list[Path]:
    """Compute every finding, draw the Pareto figures next to ``out``, write ``out`` atomically."""
    findings = all_findings(inputs)
    figs = pareto_figures(findings[4], out.parent) if figures else {}
    text = render_claims(inputs, findings, figs)
    return [atomic_write_text(out, text), *(out.parent / n for n in figs.values())]
