"""The source papers' claims, each turned from measured numbers into a verdict (no I/O: numbers in, findings out).

A claims report must be citable, so every verdict here is one of three words, :data:`SUPPORTED`,
:data:`NOT_SUPPORTED` or :data:`INCONCLUSIVE` (with the reason), decided by a rule stated next to it:

1. :func:`tokenizer_claim` -- the wavelet tokenizer trains faster and reaches better top-1 than the patch
   tokenizer at the same token count (Zhu & Soricut 2024): per data set, over training seeds paired by seed.
2. :func:`cost_model_claim` -- the cost model (attention ``2T²H + 4TH²``, feed-forward ``2mTH²``): predicted
   MACs rank the measured step times, and halving the token width H saves more time than halving the token
   count T where T < H.
3. :func:`robustness_claim` / :func:`attribution` -- "naturally resistant to adversarial attacks": the
   categories of :func:`robustbench_wave.analysis.verdict.judge` (called, not re-implemented), and where
   the gap to the patch baseline comes from, along the chain of ablation models.
4. :func:`tokenpool_claim` -- Token Pooling (Marin et al., WACV 2023) gives a better accuracy-compute
   trade-off than random selection, importance sampling, top-K pruning and grid pooling (a Pareto comparison
   in which a point dominates only beyond the seeds' interval).
5. :func:`assignment_masking_claim` -- Token Pooling's discrete assignment as a place of gradient masking:
   exact vs straight-through (BPDA) gradients through the assignment alone on the same examples (the scoped
   mode ``bpda-assignment``, every other fixed front-end exact; or ``bpda`` where the assignment is the
   model's only fixed front-end), under the white-box gradient attacks alone (the verdict's masking rows),
   the BPDA side trusted by the gradient checklist, Holm-adjusted across the models and threats.

Every paired comparison pools training seeds with the image as the unit (:func:`metrics.paired_over_seeds`)
and says "not supported" of a difference only by an equivalence test (TOST) within
:data:`verdict.EQUIVALENCE_MARGIN`, stated beside the verdict.

Each returns :class:`Finding` rows (one per data set, run or model) with the numbers behind them; the
models they compare are named once, in :data:`ZOO`. Each claim's title, rule and measuring command and the
Markdown are :mod:`robustbench_wave.reporting.claims_page`'s.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from robustbench_wave.analysis import formatting as fmt
from robustbench_wave.analysis import verdict as vd
from robustbench_wave.evaluation.metrics import (
    PairedComparison,
    clean_correct,
    paired_over_seeds,
    reference_eps,
    robust_flags,
    seed_spread,
)
from robustbench_wave.evaluation.trust import Trust
from robustbench_wave.models.frontend import ASSIGNMENT, GradMode, ModeScope

SUPPORTED = "supported"
NOT_SUPPORTED = "not supported"
INCONCLUSIVE = "inconclusive at this scale"
VERDICTS = (SUPPORTED, NOT_SUPPORTED, INCONCLUSIVE)

MIN_SEEDS = 3
"""Training seeds a claim about training needs: with fewer, one lucky seed decides it."""
MIN_BUDGETS = 3
"""Compute budgets per Token Pooling method needed to trace its accuracy-compute curve."""
ALPHA = 0.05
"""Level of every test here (exact McNemar, Holm-adjusted across the steps of one attribution chain)."""
RANK_RHO = 0.9
"""Spearman correlation of predicted MACs and measured step times that counts as "MACs rank the times"."""
RATIO_TOL = 0.05
"""Two measured time ratios closer than this are a tie (the harness's medians move about this much)."""
T975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228}
"""Two-sided 95% quantiles of Student's t by degrees of freedom (more than 10: 2.228, conservative)."""


@dataclass(frozen=True)
class AblationStep:
    """Two zoo models that differ in one thing (``change``); its paired difference is ``end`` minus
    ``start``."""

    start: str
    end: str
    change: str


@dataclass(frozen=True)
class ClaimModels:
    """The zoo models (``models/*.toml``) the claims are about, by name: the one place the finders read
    model names from.

    The source papers' claims compare particular models -- the wavelet tokenizer with the patch baseline,
    the ablation chain between them, the Token Pooling models -- so their finders must know which is which.
    A spec cannot carry that role (its bytes are hashed into the trained checkpoints), so the roles are
    declared here, and a renamed or added zoo model changes this table, not a finder.
    """

    candidate: str  # claim 1's candidate, claim 3's headline candidate
    baseline: str  # the patch baseline of claims 1 and 3 (and the start of the ablation chain)
    family: str  # claim 3's candidates: every model whose name starts with this ...
    pooled_marker: str  # ... except those whose name holds this: Token Pooling models (claim 5)
    chain: tuple[AblationStep, ...]  # baseline -> candidate; the steps' differences add up to the gap
    extra: tuple[AblationStep, ...]  # reported beside the chain when attacked (not part of the sum)
    mechanism: str  # the chain step the source paper's mechanism is (claim 3's attribution tests it)

    def mechanism_step(self) -> AblationStep:
        return next(s for s in self.chain if s.change == self.mechanism)


ZOO = ClaimModels(
    candidate="wavelet",
    baseline="patch",
    family="wavelet",
    pooled_marker="tokenpool",
    chain=(
        AblationStep("patch", "patch-raw", "input normalisation (patch without input standardisation)"),
        AblationStep(
            "patch-raw", "wavelet-denseproj", "rotation / level shift (db1 DWT with a dense projection)"
        ),
        AblationStep("wavelet-denseproj", "wavelet-dense", "block-sparse projection"),
        AblationStep("wavelet-dense", "wavelet", "sparsification"),
    ),
    extra=(
        AblationStep(
            "wavelet-denseproj", "wavelet-denseproj-sparse", "sparsification with a dense projection"
        ),
        AblationStep("wavelet-denseproj-sparse", "wavelet", "block-sparse projection with sparsification"),
        AblationStep("wavelet", "wavelet-coif1", "wavelet family (db1 -> coif1)"),
    ),
    mechanism="sparsification",
)
CLUSTERING = ("kmeans", "weighted-kmeans", "kmedoids", "weighted-kmedoids")
POOL_BASELINES = ("random", "importance", "topk", "grid")


@dataclass
class Finding:
    """One verdict on one claim in one scope (a data set, a run, a model), with the numbers behind it."""

    claim: int
    scope: str
    measured: str
    verdict: str
    reason: str
    table: pd.DataFrame = field(default_factory=pd.DataFrame)
    notes: list[str] = field(default_factory=list)
    headline: bool = True  # shown in the short claims table (False: only in its section)
    commands: list[str] = field(default_factory=list)  # what produced the inputs (set by the reader)
    judgement: vd.Judgement | None = None  # claim 3: the verdict behind it (put into words by reporting)

    def __post_init__(self) -> None:
        if self.verdict not in VERDICTS:
            raise ValueError(f"verdict must be one of {VERDICTS}, got {self.verdict!r}")


def _pts(x: float) -> str:
    """A difference of accuracies in the claims' short unit, 'pts'."""
    return fmt.points(x, unit=" pts")


def mean_sd(values: Sequence[float], scale: float = 1.0, digits: int = 1) -> str:
    """'m ± sd' (sd over seeds, ddof 1; just 'm' for one value)."""
    s = seed_spread(list(values))
    return fmt.number(s.mean, s.sd, scale=scale, digits=digits)


# ------------------------------------------------------------------------------------------------ claim 1
def seed_differences(runs: pd.DataFrame, cand: str, base: str, column: str) -> pd.Series:
    """seed -> cand's minus base's ``column``, on the seeds both models were trained with."""
    pivot = runs[runs["model"].isin([cand, base])].pivot_table(index="seed", columns="model", values=column)
    if cand not in pivot or base not in pivot:
        return pd.Series(dtype=float)
    return (pivot[cand] - pivot[base]).dropna()


def sign_test_p(diffs: Sequence[float]) -> float:
    """One-sided exact sign test that the differences are positive (ties count against): P(all k of n)."""
    n = len(diffs)
    k = sum(1 for d in diffs if d > 0)
    return sum(math.comb(n, j) for j in range(k, n + 1)) / 2**n if n else math.nan


def _direction(diffs: pd.Series) -> str:
    """'all' when every seed's difference is positive, 'none' when none is, 'mixed' else."""
    pos = int((diffs > 0).sum())
    return "all" if pos == len(diffs) else ("none" if pos == 0 else "mixed")


def tokenizer_claim(
    runs: pd.DataFrame,
    cand: str = ZOO.candidate,
    base: str = ZOO.baseline,
    speedups: pd.DataFrame | None = None,
) -> list[Finding]:
    """Claim 1, per data set: ``cand`` vs ``base`` test accuracy and training throughput, paired by seed.

    ``runs``: one row per finished training run (dataset, model, seed, tokens, test_accuracy,
    train_images_per_s, ...). ``speedups`` (optional): the side-by-side benchmark's paired repeats (dataset,
    candidate, baseline, speedup = baseline time / candidate time); where it has the data set and the pair,
    the speed half is decided by it (:func:`benchmark_speed`), since a training run's images/s is only as
    fair as the machine was quiet, else by the runs' own images/s paired by seed. Supported only if the
    candidate is more accurate on every one of at least :data:`MIN_SEEDS` seeds (with 3 seeds the exact
    sign test can reach no lower p than 1/8, so unanimity, not p < 0.05, is the rule) and faster; not
    supported when it is better in neither sense in any seed (or significantly slower in the benchmark);
    otherwise inconclusive.
    """
    out = []
    for dataset, rows in runs.groupby("dataset", sort=True):
        acc = seed_differences(rows, cand, base, "test_accuracy")
        bench = _benchmark_rows(speedups, str(dataset), cand, base)
        if bench is None:
            speed_dir, speed_words = (
                _direction(seed_differences(rows, cand, base, "train_images_per_s")),
                None,
            )
            speed_text = f"train img/s ratio {mean_sd(_ratios(rows, cand, base), 1, 2)}"
        else:
            speed_dir, speed_words, speed_text = benchmark_speed(bench["speedup"])
        measured = f"top-1 {cand} − {base} {mean_sd(acc, 100)} pts over {len(acc)} seed(s), {speed_text}"
        notes = _token_note(rows, cand, base) + _speed_note(bench is not None, speedups is not None)
        verdict, reason = _tokenizer_verdict(acc, (speed_dir, speed_words), rows, cand, base)
        out.append(Finding(1, str(dataset), measured, verdict, reason, model_table(rows), notes))
    return out


def _benchmark_rows(speedups: pd.DataFrame | None, dataset: str, cand: str, base: str) -> pd.DataFrame | None:
    if speedups is None:
        return None
    rows = speedups[
        (speedups["dataset"] == dataset) & (speedups["candidate"] == cand) & (speedups["baseline"] == base)
    ]
    return rows if len(rows) else None


def benchmark_speed(speedup: pd.Series) -> tuple[str, str, str]:
    """Direction ('all' = faster, 'none' = slower, 'mixed' = no detectable difference), the verdict's words
    and the measured text, from the interleaved benchmark's paired speed-ups: one-sided exact sign tests
    over the repeats at :data:`ALPHA`, each way."""
    gain = list(speedup - 1.0)
    p_faster, p_slower = sign_test_p(gain), sign_test_p([-g for g in gain])
    faster = sum(1 for g in gain if g > 0)
    direction = "all" if p_faster < ALPHA else ("none" if p_slower < ALPHA else "mixed")
    words = (
        f"faster in {faster}/{len(gain)} interleaved repeats of the side-by-side benchmark "
        f"(sign test p = {min(p_faster, p_slower):.3g} {'faster' if p_faster <= p_slower else 'slower'})"
    )
    text = (
        f"training-step speed-up {float(np.median(speedup)):.3f} "
        f"(repeats {float(speedup.min()):.3f}–{float(speedup.max()):.3f}, side by side)"
    )
    return direction, words, text


def _speed_note(from_benchmark: bool, benchmark_given: bool) -> list[str]:
    if from_benchmark:
        return [
            "speed: the side-by-side benchmark (python -m benchmarks.bench_tokenizer_speed), not the "
            "training runs' img/s below, which are only as fair as the machine was quiet during each run"
        ]
    if benchmark_given:
        return ["speed: the benchmark has no repeats for this data set; the training runs' img/s decide"]
    return []


def _ratios(rows: pd.DataFrame, cand: str, base: str) -> pd.Series:
    pivot = rows.pivot_table(index="seed", columns="model", values="train_images_per_s")
    return (pivot[cand] / pivot[base]).dropna() if cand in pivot and base in pivot else pd.Series(dtype=float)


def _token_note(rows: pd.DataFrame, cand: str, base: str) -> list[str]:
    tokens = rows.groupby("model")["tokens"].first()
    if cand in tokens and base in tokens and tokens[cand] != tokens[base]:
        return [
            f"token counts differ ({cand} {tokens[cand]}, {base} {tokens[base]}): not the claim's setting"
        ]
    return []


def _tokenizer_verdict(
    acc: pd.Series, speed: tuple[str, str | None], rows: pd.DataFrame, cand: str, base: str
) -> tuple[str, str]:
    """``speed``: its direction and, from the benchmark, its words (None: the seeds' img/s decide)."""
    if acc.empty:
        return INCONCLUSIVE, f"{cand} and {base} were not both trained on this data set with a common seed"
    if len(acc) < MIN_SEEDS:
        return INCONCLUSIVE, (
            f"{len(acc)} training seed(s) of each model, fewer than {MIN_SEEDS}: train more seeds"
        )
    d_acc, (d_speed, speed_words) = _direction(acc), speed
    if speed_words is None:
        seed_speed = seed_differences(rows, cand, base, "train_images_per_s")
        speed_words = f"faster in {int((seed_speed > 0).sum())}/{len(seed_speed)} seeds"
    words = f"{cand} more accurate in {int((acc > 0).sum())}/{len(acc)} seeds, {speed_words}"
    if d_acc == "all" and d_speed == "all":
        return SUPPORTED, f"{words} (accuracy: one-sided sign test p = {sign_test_p(list(acc)):.3g})"
    if "none" in (d_acc, d_speed):
        return NOT_SUPPORTED, words
    return INCONCLUSIVE, f"{words}: not both hold"


def model_table(rows: pd.DataFrame) -> pd.DataFrame:
    """Per model: seeds, test accuracy and train throughput mean ± sd, tokens, params, GMACs."""
    out = []
    for model, g in rows.groupby("model", sort=True):
        out.append(
            {
                "model": model,
                "seeds": ",".join(str(s) for s in sorted(g["seed"])),
                "test top-1 %": mean_sd(g["test_accuracy"], 100),
                "train img/s": mean_sd(g["train_images_per_s"], 1, 0),
                "tokens": int(g["tokens"].iloc[0]) if pd.notna(g["tokens"].iloc[0]) else None,
                "params": int(g["params"].iloc[0]) if pd.notna(g["params"].iloc[0]) else None,
                "GMACs": float(g["gmacs"].iloc[0]),
            }
        )
    return pd.DataFrame(out)


# ------------------------------------------------------------------------------------------------ claim 2
def predicted_body_macs(tokens: int, width: int, mlp_ratio: float = 2.0, depth: int = 1) -> float:
    """The cost model's MACs of ``depth`` blocks: attention 2T²H + 4TH², feed-forward 2mTH²."""
    t, h = tokens, width
    return depth * (2 * t * t * h + 4 * t * h * h + 2 * mlp_ratio * t * h * h)


def spearman(a: Sequence[float], b: Sequence[float]) -> float:
    """Spearman's rank correlation (average ranks for ties)."""
    ra, rb = pd.Series(list(a)).rank().to_numpy(), pd.Series(list(b)).rank().to_numpy()
    if len(ra) < 2 or ra.std() == 0 or rb.std() == 0:
        return math.nan
    return float(np.corrcoef(ra, rb)[0, 1])


def halving_table(grid: pd.DataFrame) -> pd.DataFrame:
    """At every grid point with T < H whose halvings (T, H/2) and (T/2, H) were measured: the measured and
    predicted time ratios of halving H and of halving T (below 1 saves time; smaller saves more)."""
    at = {(int(r.T), int(r.H)): r for r in grid.itertuples(index=False)}
    rows = []
    for (t, h), r in sorted(at.items()):
        if not t < h or (t, h // 2) not in at or (t // 2, h) not in at or h % 2 or t % 2:
            continue
        half_h, half_t = at[(t, h // 2)], at[(t // 2, h)]
        rows.append(
            {
                "T": t,
                "H": h,
                "halve H: time": half_h.seconds_per_step / r.seconds_per_step,
                "halve T: time": half_t.seconds_per_step / r.seconds_per_step,
                "halve H: MACs": half_h.predicted_macs / r.predicted_macs,
                "halve T: MACs": half_t.predicted_macs / r.predicted_macs,
            }
        )
    return pd.DataFrame(rows)


def cost_model_claim(grid: pd.DataFrame) -> list[Finding]:
    """Claim 2 from a (T, H, predicted_macs, seconds_per_step) grid: (a) Spearman rho of predicted MACs
    and measured times >= :data:`RANK_RHO`; (b) at every T < H point, halving H's measured time ratio is
    below halving T's by more than :data:`RATIO_TOL` (supported), above it at some point by more than that
    (not supported), else (ties) inconclusive."""
    grid = grid.sort_values(["T", "H"]).reset_index(drop=True)
    rho = spearman(grid["predicted_macs"], grid["seconds_per_step"])
    table = grid[["T", "H", "predicted_macs", "seconds_per_step"]]
    scope = f"{len(grid)} (T, H) points"
    if len(grid) < 4 or math.isnan(rho):
        rank = Finding(
            2, scope, f"Spearman ρ = {rho:.3f}", INCONCLUSIVE, "fewer than 4 distinct grid points", table
        )
    else:
        ok = rho >= RANK_RHO
        reason = f"Spearman ρ = {rho:.3f} {'≥' if ok else '<'} {RANK_RHO} (the rule for 'ranks')"
        rank = Finding(
            2,
            scope + ": MACs rank step times",
            f"ρ = {rho:.3f}",
            SUPPORTED if ok else NOT_SUPPORTED,
            reason,
            table,
        )
    return [rank, _halving_finding(halving_table(grid))]


def _halving_finding(halves: pd.DataFrame) -> Finding:
    """Supported when halving H saves more at every eligible point; not supported when it saves less at
    most of them; a minority of exceptions (or ties) is inconclusive, naming the points."""
    scope = "halving H vs halving T where T < H"
    if halves.empty:
        why = "no grid point with T < H has both halvings measured: use a grid with T/2 and H/2 on it"
        return Finding(2, scope, "no eligible point", INCONCLUSIVE, why, halves)
    margin = halves["halve T: time"] - halves["halve H: time"]  # > 0: halving H saves more
    wins, losses = int((margin > RATIO_TOL).sum()), int((margin < -RATIO_TOL).sum())
    measured = f"halving H saves more at {wins}/{len(halves)} points, less at {losses}"
    words = f"halving H saves more time at {wins}/{len(halves)} points, less at {losses} (ties within {RATIO_TOL})"
    if wins == len(halves):
        return Finding(2, scope, measured, SUPPORTED, words, halves)
    if 2 * losses > len(halves):
        return Finding(2, scope, measured, NOT_SUPPORTED, words, halves)
    lost = halves[margin <= RATIO_TOL]
    where = ", ".join(f"({int(r['T'])},{int(r['H'])})" for _, r in lost.iterrows())
    return Finding(2, scope, measured, INCONCLUSIVE, f"{words}: not at {where}; measure again", halves)


# ------------------------------------------------------------------------------------------------ claim 3
VERDICT_MAP = {
    vd.ROBUST: SUPPORTED,
    vd.MASKING_BUT_ROBUST: SUPPORTED,
    vd.MASKING: NOT_SUPPORTED,  # masking, and the comparison rules an advantage out (equivalence or less)
    vd.MASKING_INCONCLUSIVE: INCONCLUSIVE,  # masking, but the comparison decides nothing
    vd.NOT_ROBUST: NOT_SUPPORTED,
    vd.SMALL_DIFFERENCE: NOT_SUPPORTED,  # more robust by less than the minimum effect: no large effect
    vd.ROBUST_THESE_NETWORKS: INCONCLUSIVE,  # these networks, not confirmed across training seeds
    vd.INCONCLUSIVE: INCONCLUSIVE,
    vd.NO_BASELINE: INCONCLUSIVE,
    vd.UNVERIFIED: INCONCLUSIVE,  # no trusted mode: upper bounds claim no robustness ...
    vd.UNCHECKED: INCONCLUSIVE,  # ... nor do numbers no checklist judged
}


def claim3_verdict(category: str, details: Mapping[str, Any]) -> str:
    """Claim 3's verdict from the verdict's category (:data:`VERDICT_MAP`); a candidate whose numbers are
    upper bounds is "not supported" where even its upper bound shows no advantage over a verified baseline
    (:data:`verdict.NO_ADVANTAGE`), never "supported"."""
    if details.get("upper_bound") and details.get("outcome") == vd.NO_ADVANTAGE:
        return NOT_SUPPORTED
    return VERDICT_MAP[category]


def claim3_models(models: Sequence[str], zoo: ClaimModels = ZOO) -> tuple[list[str], str | None]:
    """(wavelet-family candidates, baseline) by name (:data:`ZOO`): the candidates are the family's
    models without Token Pooling, the baseline when attacked (None: the verdict's own roles decide)."""
    cands = [m for m in models if m.startswith(zoo.family) and zoo.pooled_marker not in m]
    return cands, (zoo.baseline if zoo.baseline in models else None)


def robustness_claim(
    runs: Sequence[pd.DataFrame],
    seeds: Sequence[int],
    *,
    scope: str,
    num_classes: int,
    diagnostics_failures: Mapping[str, Mapping[str, Sequence[str]]] | None = None,
    self_transfer: Collection[str] = (),
    zoo: ClaimModels = ZOO,
    reference: Mapping[str, float] | None = None,
    trust: Trust | None = None,
) -> list[Finding]:
    """Claim 3 for one group of runs (one per training seed): :func:`verdict.judge` on the wavelet-family
    models and the patch baseline; one finding per (candidate, threat), its category mapped by
    :data:`VERDICT_MAP` (a masking but still more robust model supports the claim only partly: noted). The
    first finding carries the judgement, whose words the report shows beside it. ``reference``: the budgets the
    runs' suite declares (:func:`metrics.declared_reference`; none: the middle of each grid). ``trust``: the
    runs' :class:`~robustbench_wave.evaluation.trust.Trust` (None: no checklist ran), so a candidate with no
    trusted mode is judged as the run's own verdict judges it (upper bounds: never support for the claim)."""
    models = list(dict.fromkeys(m for r in runs for m in r["model"].unique()))
    cands, base = claim3_models(models, zoo)
    if not cands:
        return []
    keep = [*cands, *([base] if base else [])]
    records = [r[r["model"].isin(keep)] for r in runs]
    judgement = vd.judge(
        records,
        num_classes=num_classes,
        eps=reference or None,
        baseline=base,
        seeds=seeds,
        diagnostics_failures={m: f for m, f in (diagnostics_failures or {}).items() if m in keep},
        self_transfer=self_transfer,
        trust=trust,
    )
    main = zoo.candidate if zoo.candidate in cands else cands[0]
    numbers, details = judgement.numbers, judgement.details
    out: list[Finding] = []
    for key, category in judgement.categories.items():
        model, threat = key.split("@")
        rows = numbers[(numbers["threat"] == threat) & numbers["model"].isin([model, base])]
        found = _robustness_finding(scope, model, threat, category, details.get(key, {}), rows)
        found.headline = model == main
        found.judgement = None if out else judgement
        out.append(found)
    return out


def _robustness_finding(
    scope: str, model: str, threat: str, category: str, det: Mapping[str, Any], rows: pd.DataFrame
) -> Finding:
    gap, diff, ci = det.get("gap"), det.get("diff"), det.get("diff_ci")
    measured = f"{model} {threat}: blocked − worst {_pts(fmt.as_float(gap))}"
    if diff is not None:
        measured += (
            f"; worst case − baseline {_pts(diff)} {fmt.interval(ci[0], ci[1])}, p = {det['p_value']:.2g} "
            f"({det.get('unit')})"
        )
        eq = det.get("equivalence") or {}
        if eq:
            measured += f"; TOST ±{_pts(eq['margin']).lstrip('+')}: p = {eq['p_value']:.2g}"
    reason = f"verdict category '{category}'"
    if det.get("inconclusive_reason"):
        reason += f": {det['inconclusive_reason']}"
    if category == vd.MASKING_BUT_ROBUST:
        reason += " (part of the blocked-gradient robustness is masking)"
    if det.get("seed_agreement"):
        reason += f"; decided on the seeds pooled by image, reached by {det['seed_agreement']} on their own"
    return Finding(3, f"{scope} · {model} · {threat}", measured, claim3_verdict(category, det), reason, rows)


def margin_words(p: PairedComparison) -> str:
    """The equivalence test beside a verdict: its margin, level and p-value."""
    eq = p.equivalence(vd.EQUIVALENCE_MARGIN, ALPHA)
    within = "within" if eq.equivalent else "not shown within"
    return (
        f"{within} {_margin()} by two one-sided tests ({100 * (1 - 2 * ALPHA):.0f}% "
        f"interval {fmt.interval(eq.ci_low, eq.ci_high)}, TOST p = {eq.p_value:.2g})"
    )


def _margin() -> str:
    """'±10 points': the equivalence margin as the verdicts state it (read at each call)."""
    return "±" + fmt.number(vd.EQUIVALENCE_MARGIN, scale=100.0, digits=0, unit=" points")


def equivalent(p: PairedComparison) -> bool:
    """The difference is inside ±:data:`verdict.EQUIVALENCE_MARGIN` by TOST at :data:`ALPHA`."""
    return p.equivalence(vd.EQUIVALENCE_MARGIN, ALPHA).equivalent


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm-Bonferroni adjusted p-values (same order), so several steps of one chain keep the level."""
    order = sorted(range(len(p_values)), key=lambda i: p_values[i])
    adj, running = [0.0] * len(p_values), 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (len(p_values) - rank) * p_values[i]))
        adj[i] = running
    return adj


def attribution(
    runs: Sequence[pd.DataFrame],
    seeds: Sequence[int],
    *,
    scope: str,
    num_classes: int,
    threat: str,
    zoo: ClaimModels = ZOO,
    reference: Mapping[str, float] | None = None,
    trust: Trust | None = None,
) -> Finding | None:
    """Where the wavelet model's gap to the patch baseline comes from, at ``threat``'s reference budget:
    each ablation step's paired worst-case difference (to minus from, seeds pooled with the image as the unit;
    seed spread of the per-seed differences), Holm-adjusted tests. The claim tested is the source paper's
    mechanism: the robustness comes from sparsification. By the verdict's rules: supported when that step's
    95% interval clears the minimum effect (Holm-adjusted) and, the claim being about an architecture, the
    training seeds confirm it (:func:`verdict.architecture`: two or more, each clearing it; one seed is a
    claim about these networks alone: inconclusive); not supported when it is significantly negative or within
    the minimum effect by TOST (a small step included); inconclusive otherwise, when a model is under the clean
    floor, or when a model of the step is not verified (``trust``, the runs'
    :class:`~robustbench_wave.evaluation.trust.Trust`: no trusted mode, so its numbers are upper bounds)."""
    models = set.intersection(*(set(r["model"]) for r in runs))
    steps = [s for s in (*zoo.chain, *zoo.extra) if s.start in models and s.end in models]
    eps = reference_eps(runs[0], threat, declared=reference)
    if len(steps) < 1 or eps is None:
        return None
    rows = [_step_row(runs, s, threat, eps) for s in steps]
    for row, p in zip(rows, holm([r["p"] for r in rows])):
        row["p (Holm)"] = p
        row["significant"] = bool(p < ALPHA)
    for row, p in zip(rows, holm([r["p clears"] for r in rows])):
        row["p clears (Holm)"] = p
        row["clears"] = bool(p < ALPHA / 2)  # the 95% interval clears the minimum effect
    for row, p in zip(rows, holm([r["p TOST"] for r in rows])):
        row["p TOST (Holm)"] = p
        row["equivalent"] = bool(p < ALPHA)
    pooled = {r["step"]: r.pop("_pooled") for r in rows}
    seed_diffs = {r["step"]: r.pop("_seed_diffs") for r in rows}
    seed_lows = {r["step"]: r.pop("_seed_lows") for r in rows}
    table = pd.DataFrame(rows)
    step_models = sorted({m for s in steps for m in (s.start, s.end)})
    doubts = _inconclusive_models(runs, step_models, threat, eps, num_classes, trust or Trust(), zoo)
    mechanism = (seed_diffs.get(zoo.mechanism, []), seed_lows.get(zoo.mechanism, []))
    verdict, reason = _attribution_verdict(table, mechanism, doubts, zoo)
    if zoo.mechanism in pooled:
        reason += f" ({pooled[zoo.mechanism].unit})"
    sig = [r["step"] for r in rows if r["significant"]]
    measured = "significant steps: " + (", ".join(sig) if sig else "none")
    return Finding(3, f"{scope} · attribution · {threat} ε = {eps:.4g}", measured, verdict, reason, table)


def _inconclusive_models(
    runs: Sequence[pd.DataFrame],
    models: Sequence[str],
    threat: str,
    eps: float,
    k: int,
    trust: Trust,
    zoo: ClaimModels,
) -> str | None:
    """Why the mechanism step cannot be judged: a model of the chain under the clean floor, or a model of the
    mechanism step with no trusted gradient mode (:meth:`Trust.standing`); None when neither."""
    low = _below_floor(runs, models, threat, eps, k)
    if low:
        return f"clean accuracy under the floor: {', '.join(low)}"
    step = zoo.mechanism_step()
    marked = []
    for model in (step.start, step.end):
        modes = list(
            dict.fromkeys(str(m) for r in runs for m in r.loc[r["model"] == model, "grad_mode"].unique())
        )
        standing = trust.standing(model, modes)
        if modes and not standing.trusted:
            marked.append(f"{model} {standing.value}")
    if marked:
        return (
            f"{', '.join(marked)} (no gradient mode it ran passed a gradient checklist): the {step.change} step "
            "compares upper bounds"
        )
    return None


def _step_row(runs: Sequence[pd.DataFrame], step: AblationStep, threat: str, eps: float) -> dict:
    a, b = step.start, step.end
    pairs = [
        (robust_flags(r[r["model"] == b], threat, eps), robust_flags(r[r["model"] == a], threat, eps))
        for r in runs
    ]
    pooled = paired_over_seeds(pairs)
    per_seed = [paired_over_seeds([p]) for p in pairs]
    seed_diffs = [c.diff for c in per_seed]
    spread = seed_spread(seed_diffs)
    eq = pooled.equivalence(vd.EQUIVALENCE_MARGIN, ALPHA)
    return {
        "step": step.change,
        "from": a,
        "to": b,
        "images": pooled.n,
        "seeds": pooled.n_seeds,
        "diff": pooled.diff,
        "ci_low": pooled.ci_low,
        "ci_high": pooled.ci_high,
        "seed sd": spread.sd,
        "only to": pooled.only_a,
        "only from": pooled.only_b,
        "p": pooled.p_value,
        "p clears": pooled.one_sided_p(vd.EQUIVALENCE_MARGIN, lower=True),
        "p TOST": eq.p_value,
        "_seed_diffs": seed_diffs,
        "_seed_lows": [c.ci_low for c in per_seed],
        "_pooled": pooled,
    }


def _below_floor(
    runs: Sequence[pd.DataFrame], models: Sequence[str], threat: str, eps: float, k: int
) -> list[str]:
    floor = vd.clean_floor(k)
    nums = pd.concat([vd.claim_numbers(r, threat=threat, eps=eps) for r in runs])
    clean = nums.groupby("model")["clean"].mean()
    return [f"{m} ({fmt.percent(clean[m])})" for m in models if m in clean and clean[m] < floor]


def _attribution_verdict(
    table: pd.DataFrame,
    mechanism: tuple[Sequence[float], Sequence[float]],
    doubts: str | None,
    zoo: ClaimModels,
) -> tuple[str, str]:
    """The mechanism step's verdict; ``mechanism``: its per-seed differences and their 95% lower ends."""
    if doubts:
        return INCONCLUSIVE, doubts
    step = table[table["step"] == zoo.mechanism]
    if step.empty:
        s = zoo.mechanism_step()
        return (
            INCONCLUSIVE,
            f"{s.start} and {s.end} were not both attacked: the {s.change} step is unmeasured",
        )
    r = step.iloc[0]
    diff = f"{_pts(r['diff'])} {fmt.interval(r['ci_low'], r['ci_high'])}"
    where = f"{zoo.mechanism} step {diff}, Holm p = {r['p (Holm)']:.2g}"
    margin = _margin()
    if r["clears"]:
        arch = vd.architecture(mechanism[0], vd.VerdictSettings(), mechanism[1])
        if arch["confirmed"]:
            return SUPPORTED, f"{where}: clears the minimum effect, in every seed's own interval too"
        seeds = (
            f"{'one training seed is' if arch['n_seeds'] == 1 else str(arch['n_seeds']) + ' training seeds are'} "
            f"fewer than the {arch['min_seeds']} it needs"
            if arch["confirmed"] is None
            else "not every seed's own interval does"
        )
        return INCONCLUSIVE, (
            f"{where}: clears the minimum effect for these networks, but {seeds} (the claim is about an "
            "architecture): train more seeds"
        )
    if r["significant"] and r["diff"] < 0:
        return NOT_SUPPORTED, where
    if r["equivalent"]:
        return NOT_SUPPORTED, (
            f"{where}: within {margin} by two one-sided tests (Holm TOST p = {r['p TOST (Holm)']:.2g}), "
            "so no large effect"
        )
    return INCONCLUSIVE, (
        f"{where}: neither clears the minimum effect nor shown within {margin} (Holm TOST p = "
        f"{r['p TOST (Holm)']:.2g}): attack more examples"
    )


# ------------------------------------------------------------------------------------------------ claim 4
def pareto_front(points: pd.DataFrame) -> pd.Series:
    """True for the points no other point dominates by :func:`dominates`, the verdict's rule (no more MACs and
    an accuracy gain beyond the two seed intervals), so the figure's front is the one the verdict reads. A
    point within another's noise stays on the front (the data cannot put it behind); without a seed interval
    (``acc_hw`` NaN, fewer than two seeds) no point dominates, and every point is on it."""
    rows = [r for _, r in points.iterrows()]
    dominated = [any(dominates(o, r) for j, o in enumerate(rows) if j != i) for i, r in enumerate(rows)]
    return pd.Series([not d for d in dominated], index=points.index, dtype=bool)


def half_width(sd: float, seeds: int) -> float:
    """Half-width of the 95% t interval of a mean over ``seeds`` training seeds (NaN below two)."""
    if seeds < 2 or math.isnan(sd):
        return math.nan
    return T975.get(seeds - 1, T975[10]) * sd / math.sqrt(seeds)


def tokenpool_points(runs: pd.DataFrame) -> pd.DataFrame:
    """Mean accuracy and GMACs per (dataset, tokenizer, training recipe, method, budget) over seeds, from
    training runs with a pooling method (budget: the keep schedule). Runs trained differently (``recipe``:
    from scratch or fine-tuned, epochs, learning rate, subset) are never seeds of one point."""
    pooled = runs[runs["pool_method"].notna()]
    pooled = (
        pooled.assign(recipe=pooled["recipe"].fillna("")) if "recipe" in pooled else pooled.assign(recipe="")
    )
    if pooled.empty:
        return pd.DataFrame(
            columns=[
                "dataset",
                "tokenizer",
                "recipe",
                "method",
                "keep",
                "gmacs",
                "accuracy",
                "acc_sd",
                "seeds",
                "acc_hw",
            ]
        )
    g = pooled.groupby(["dataset", "tokenizer", "recipe", "pool_method", "pool_keep"], sort=True)
    out = g.agg(
        gmacs=("gmacs", "mean"),
        accuracy=("test_accuracy", "mean"),
        acc_sd=("test_accuracy", "std"),
        seeds=("seed", "count"),
    )
    out = out.reset_index().rename(columns={"pool_method": "method", "pool_keep": "keep"})
    out["acc_hw"] = [half_width(sd, int(k)) for sd, k in zip(out["acc_sd"], out["seeds"])]
    return out


def tokenpool_claim(runs: pd.DataFrame) -> list[Finding]:
    """Claim 4 per (data set, tokenizer): needs every method at >= :data:`MIN_BUDGETS` budgets, each point
    trained with >= :data:`MIN_SEEDS` seeds. A point dominates another only beyond the seeds' interval
    (:func:`dominates`). Supported when every baseline point is dominated by a clustering point; not
    supported when a baseline point dominates a clustering point; otherwise inconclusive (the fronts cross,
    or the differences are within the seeds' noise)."""
    points = tokenpool_points(runs)
    recipes = points.groupby(["dataset", "tokenizer"])["recipe"].nunique()
    out = []
    for (dataset, tok, recipe), pts in points.groupby(["dataset", "tokenizer", "recipe"], sort=True):
        pts = pts.drop(columns="recipe")
        budgets = pts.groupby("method")["keep"].nunique()
        short = {
            m: int(budgets.get(m, 0))
            for m in (*CLUSTERING, *POOL_BASELINES)
            if budgets.get(m, 0) < MIN_BUDGETS
        }
        scope = f"{dataset} · {tok} tokenizer" + (f" · {recipe}" if recipes[(dataset, tok)] > 1 else "")
        measured = f"{len(pts)} (method, budget) points, {len(budgets)} method(s)"
        if short:
            why = "fewer than 3 budgets for " + ", ".join(f"{m} ({n})" for m, n in short.items())
            out.append(Finding(4, scope, measured, INCONCLUSIVE, why + ": train them", pts))
            continue
        few = pts[pts["seeds"] < MIN_SEEDS]
        if not few.empty:
            names = ", ".join(sorted({f"{r.method} {r.keep} ({int(r.seeds)})" for r in few.itertuples()}))
            why = f"fewer than {MIN_SEEDS} training seeds for {names}: no seed interval to decide dominance"
            out.append(Finding(4, scope, measured, INCONCLUSIVE, why + "; train more seeds", pts))
            continue
        out.append(Finding(4, scope, measured, *_pareto_verdict(pts), pts.assign(pareto=pareto_front(pts))))
    return out


def dominates(a: pd.Series, b: pd.Series) -> bool:
    """``a`` dominates ``b`` beyond the seeds' noise: no more MACs, and higher accuracy by more than the
    95% interval of the difference of the two seed means (half-widths added: conservative)."""
    return bool(a.gmacs <= b.gmacs and a.accuracy - b.accuracy > a.acc_hw + b.acc_hw)


def _pareto_verdict(pts: pd.DataFrame) -> tuple[str, str]:
    clus = [r for _, r in pts.iterrows() if r.method in CLUSTERING]
    base = [r for _, r in pts.iterrows() if r.method in POOL_BASELINES]
    beaten = sum(any(dominates(c, b) for c in clus) for b in base)
    beating = sum(any(dominates(b, c) for b in base) for c in clus)
    words = (
        f"{beaten}/{len(base)} baseline points dominated by a clustering point; {beating}/{len(clus)} "
        "clustering points dominated by a baseline point (dominance: no more MACs and an accuracy gain beyond "
        "the seeds' 95% intervals)"
    )
    if beaten == len(base) and not beating:
        return SUPPORTED, words
    if beating:
        return NOT_SUPPORTED, words
    return INCONCLUSIVE, words + ": the fronts cross or differ within the seeds' noise"


# ------------------------------------------------------------------------------------------------ claim 5
def mode_gap(
    rows: pd.DataFrame, threat: str, eps: float, a: str, b: str
) -> tuple[pd.Series, pd.Series] | None:
    """One seed's per-example flags of one model: robust under its white-box gradient attacks in mode ``a``
    and under those in mode ``b`` (same examples): the rows the verdict's masking pair reads
    (:func:`verdict.white_box_flags`). Square, transfer, noise, low-frequency and escalation rows are left
    out: recorded under every gradient mode alike, they would floor both modes at their own number and hide
    the gap between the two gradients. None when a mode has no white-box rows at ``threat``."""
    fa, fb = (vd.white_box_flags(rows, mode, threat, eps) for mode in (a, b))
    if fa is None or fb is None:
        return None
    return fa, fb


#: The records' name of BPDA through Token Pooling's cluster assignment alone (every other front-end exact).
BPDA_ASSIGNMENT = ModeScope(GradMode.BPDA, ASSIGNMENT).name


def assignment_mode(
    model: str, rows: Sequence[pd.DataFrame], assignment_only: Collection[str] | None
) -> tuple[str | None, str]:
    """The gradient mode whose gap to ``exact`` is the assignment's alone on ``model`` (None: none is), and
    the reason when none is: ``bpda-assignment`` where every seed recorded it, else ``bpda`` where the Token
    Pooling layers are the model's only fixed front-end (``assignment_only`` names those; None: not known,
    taken as so), since there ``bpda`` switches the assignment alone."""
    if all((r["grad_mode"] == BPDA_ASSIGNMENT).any() for r in rows):
        return BPDA_ASSIGNMENT, ""
    if assignment_only is None or model in assignment_only:
        return GradMode.BPDA.value, ""
    return None, (
        f"{model} is not known to have the Token Pooling layer as its only fixed front-end (bpda switches a "
        f"wavelet tokenizer's mask too) and its runs have no {BPDA_ASSIGNMENT!r} rows, so exact − BPDA is not "
        f"the assignment's gap alone: attack it with --grad-modes {model}=exact,blocked,bpda,{BPDA_ASSIGNMENT} (BPDA through the "
        "assignment only, every other front-end exact)"
    )


#: Claim 5's three tests of exact − BPDA, each Holm-adjusted across the findings of one call (:func:`holm`):
#: the gap clears the minimum effect (one-sided, H0: gap <= margin), exact differs from BPDA (two-sided: the
#: "exact is below" test), the gap is within ±margin (TOST). Table columns; "<name> (Holm)" beside each.
MASKING_TESTS = ("p", "p clears", "p TOST")


@dataclass
class _MaskingTest:
    """One claim-5 finding before its verdict: the judged comparison, and what leaves it undecided."""

    finding: Finding
    p: PairedComparison
    side: str  # the BPDA side's gradient mode
    undecided: str  # why no test can decide it ("" when one can)
    exact_doubt: str  # why the exact side is not trusted ("" when it is)


def assignment_masking_claim(
    runs: Sequence[pd.DataFrame],
    *,
    scope: str,
    diagnostics_failures: Mapping[str, Mapping[str, Sequence[str]]] | None = None,
    threats: Sequence[str] = ("Linf", "L2"),
    pooled: Collection[str] = (),
    assignment_only: Collection[str] | None = None,
    num_classes: int | None = None,
    zoo: ClaimModels = ZOO,
    reference: Mapping[str, float] | None = None,
    trust: Trust | None = None,
) -> list[Finding]:
    """Claim 5 per Token Pooling model and threat: exact minus BPDA-through-the-assignment robust accuracy at
    the reference budget under the white-box gradient attacks alone (:func:`mode_gap`: the rows of the
    verdict's masking pair; gradient-free, transfer, noise and escalation rows are the same under every mode
    and say nothing about the gradient), seeds pooled with the image as the unit. Masking at the assignment,
    by the verdict's rule for masking: the gap's 95% interval clears the minimum effect (supported); not
    supported when exact is significantly below BPDA or the gap is within :data:`verdict.EQUIVALENCE_MARGIN`
    by TOST (a significant gap inside the margin included); else inconclusive. Each of the three tests
    (:data:`MASKING_TESTS`) is Holm-adjusted across every finding of the call (each model × threat with a
    comparison, those left undecided below included), and the verdicts are decided on the adjusted p-values;
    the table shows the raw and the Holm p beside each other.

    The BPDA side is the mode of :func:`assignment_mode`: ``bpda-assignment`` (the assignment alone, any
    model), or ``bpda`` on a model whose only fixed front-end is Token Pooling (``assignment_only``); a model
    with neither (e.g. ``wavelet-tokenpool`` attacked without ``bpda-assignment``) is inconclusive, with the
    reason. A masking claim needs the BPDA side to be a real attack: where ``trust`` (the runs'
    :class:`~robustbench_wave.evaluation.trust.Trust`; None: no checklist ran) does not trust that (model,
    mode) -- a failed gradient-masking check, a gradient the scan found lost, or no checklist that judged it
    -- the finding is inconclusive with :meth:`Trust.why`'s reason. The exact side failing its checks does
    not block a verdict (where the assignment masks the exact gradient it is expected to); the reason says so.
    The accuracy floor (``num_classes`` given): a model whose clean accuracy is under
    :func:`verdict.clean_floor` is inconclusive -- with little clean accuracy there is little robustness for
    either gradient to reveal or hide, so "no gap" would say nothing.
    Token Pooling models: those named in ``pooled`` (their specs have a ``[tokenpool]`` table) and any
    model whose name holds :attr:`ClaimModels.pooled_marker`."""
    models = sorted({m for r in runs for m in r["model"].unique() if zoo.pooled_marker in m or m in pooled})
    trust = trust if trust is not None else Trust()
    tests = []
    for model, threat in [(m, t) for m in models for t in threats]:
        rows = [r[r["model"] == model] for r in runs]
        test = _masking_finding(rows, model, threat, assignment_only, num_classes, reference, trust)
        if test is not None:
            test.finding.scope = f"{scope} · {model} · {test.finding.scope}"
            test.finding.notes = _masking_notes(model, diagnostics_failures)
            tests.append(test)
    _decide_masking(tests)
    return [t.finding for t in tests]


def _decide_masking(tests: Sequence[_MaskingTest]) -> None:
    """Every claim-5 finding's verdict, in place, on p-values Holm-adjusted across ``tests`` (the table
    shows both)."""
    raw = [_masking_p(t.p) for t in tests]
    adjusted = {name: holm([r[name] for r in raw]) for name in MASKING_TESTS}
    for i, t in enumerate(tests):
        ps = {name: (raw[i][name], adjusted[name][i]) for name in MASKING_TESTS}
        t.finding.table = _with_holm(t.finding.table, ps)
        if t.undecided:
            t.finding.verdict, t.finding.reason = INCONCLUSIVE, t.undecided
            continue
        t.finding.verdict, t.finding.reason = _masking_verdict(t.p, t.side, ps, len(tests))
        if t.exact_doubt:
            t.finding.reason += (
                f" (exact gradients are not trusted: {t.exact_doubt}; where the assignment masks the exact "
                f"gradient that is expected, and the verdict rests on the trusted {t.side} side)"
            )


def _masking_finding(
    rows: Sequence[pd.DataFrame],
    model: str,
    threat: str,
    assignment_only: Collection[str] | None,
    num_classes: int | None,
    reference: Mapping[str, float] | None,
    trust: Trust,
) -> _MaskingTest | None:
    """Claim 5 on one model and threat before the Holm adjustment (None: a mode has no white-box rows at the
    reference budget)."""
    eps = reference_eps(rows[0], threat, declared=reference)
    mode, why_not = assignment_mode(model, rows, assignment_only)
    side = mode or GradMode.BPDA.value  # unjudged: still show exact − bpda (every front-end)
    pairs = [mode_gap(r, threat, eps, GradMode.EXACT.value, side) for r in rows] if eps else []
    if not pairs or any(p is None for p in pairs):
        return None
    p = paired_over_seeds([x for x in pairs if x is not None])
    table = _mode_table(rows, threat, eps, side, p)
    label = "BPDA (assignment only)" if mode else "BPDA (every fixed front-end)"
    measured = (
        f"exact − {label} {_pts(p.diff)} {fmt.interval(p.ci_low, p.ci_high)}, p = {p.p_value:.2g} ({p.unit})"
    )
    exact_doubt = trust.why(model, [GradMode.EXACT.value]).get(GradMode.EXACT.value, "")
    undecided = [why_not] if why_not else [_untrusted_bpda(model, side, trust, exact_doubt)]
    undecided.append(_below_floor_reason(rows, num_classes))
    found = Finding(5, f"{threat} ε = {eps:.4g}", measured, INCONCLUSIVE, "", table)
    return _MaskingTest(found, p, side, "; ".join(u for u in undecided if u), exact_doubt)


def _untrusted_bpda(model: str, side: str, trust: Trust, exact_doubt: str) -> str:
    """Why the BPDA side leaves the finding undecided ("" when it is trusted: judged by a checklist and
    passed, no lost gradient)."""
    why = trust.why(model, [side]).get(side)
    if why is None:
        return ""
    either = f"; exact gradients are not trusted either ({exact_doubt})" if exact_doubt else ""
    return (
        f"exact vs {side} is not judged: {side} is not a trusted attack on {model} ({why}), and a masking claim "
        f"needs the BPDA side to be a real attack: neither a gap nor its absence then says anything about the "
        f"assignment{either}"
    )


def _masking_notes(model: str, failures: Mapping[str, Mapping[str, Sequence[str]]] | None) -> list[str]:
    fails = (failures or {}).get(model, {})
    return [f"diagnostics: failed {', '.join(v)} under {k}" for k, v in sorted(fails.items()) if v] or (
        ["diagnostics: every check passed"] if model in (failures or {}) else []
    )


def _below_floor_reason(rows: Sequence[pd.DataFrame], num_classes: int | None) -> str:
    """Why the clean accuracy (mean over seeds) leaves claim 5 undecided ("" when it does not)."""
    if num_classes is None:
        return ""
    floor = vd.clean_floor(num_classes)
    clean = float(np.mean([clean_correct(r).mean() for r in rows]))
    if clean < floor:
        return (
            f"clean accuracy {fmt.percent(clean)} is under the floor of {fmt.percent(floor)} (chance plus a third "
            "of the way to 100%): a model that has barely learned the task has little robustness for either "
            "gradient to reveal or hide"
        )
    return ""


def _masking_p(p: PairedComparison) -> dict[str, float]:
    """The raw p-values of :data:`MASKING_TESTS` (NaN read as 1: no evidence)."""
    values = {
        "p": p.p_value,
        "p clears": p.one_sided_p(vd.EQUIVALENCE_MARGIN, lower=True),
        "p TOST": p.equivalence(vd.EQUIVALENCE_MARGIN, ALPHA).p_value,
    }
    return {k: 1.0 if math.isnan(v) else float(v) for k, v in values.items()}


def _comparison_row(name: str, p: PairedComparison) -> dict[str, Any]:
    return {
        "comparison": name,
        "images": p.n,
        "seeds": p.n_seeds,
        "a": p.acc_a,
        "b": p.acc_b,
        "diff": p.diff,
        "ci_low": p.ci_low,
        "ci_high": p.ci_high,
        **_masking_p(p),
    }


def _with_holm(table: pd.DataFrame, ps: Mapping[str, tuple[float, float]]) -> pd.DataFrame:
    """The table with each test's Holm p beside its raw p, on the judged comparison's row (the first; the
    other rows are shown, not judged)."""
    table = table.copy()
    for name, (_, adj) in ps.items():
        table[f"{name} (Holm)"] = [adj if i == 0 else math.nan for i in range(len(table))]
    first = [c for c in table.columns if c not in ps and not str(c).endswith(" (Holm)")]
    return table[first + [c for name in MASKING_TESTS for c in (name, f"{name} (Holm)")]]


def _mode_table(
    rows: Sequence[pd.DataFrame], threat: str, eps: float, side: str, p: PairedComparison
) -> pd.DataFrame:
    """The judged comparison first, then the other recorded ones (exact − bpda when bpda-assignment is
    judged, blocked − exact), each pooled over the seeds that have it, all on white-box rows alone."""
    out = [_comparison_row(f"exact − {side}", p)]
    others = [(GradMode.EXACT.value, GradMode.BPDA.value), (GradMode.BLOCKED.value, GradMode.EXACT.value)]
    for a, b in others:
        pairs = [mode_gap(r, threat, eps, a, b) for r in rows]
        if (a, b) != (GradMode.EXACT.value, side) and pairs and all(x is not None for x in pairs):
            out.append(_comparison_row(f"{a} − {b}", paired_over_seeds([x for x in pairs if x is not None])))
    return pd.DataFrame(out)


def _masking_verdict(
    p: PairedComparison, side: str, ps: Mapping[str, tuple[float, float]], family: int
) -> tuple[str, str]:
    """The verdict on the Holm-adjusted p-values ``ps`` (test -> (raw, Holm) over ``family`` findings)."""
    test = "exact McNemar" if p.n_seeds == 1 else "exact sign-flip test over images"
    holm_over = f"Holm over {family} finding{'s' if family != 1 else ''}"
    (p_raw, p_adj), (clears_raw, clears_adj) = ps["p"], ps["p clears"]
    words = (
        f"exact vs {side}: {test} p = {p_raw:.2g} ({holm_over}: {p_adj:.2g}) on {p.only_a} + {p.only_b} "
        f"discordant of {p.n_pairs} pairs ({p.unit})"
    )
    margin = _margin().lstrip("±")
    if p.diff > 0 and clears_adj < ALPHA / 2:
        return SUPPORTED, (
            f"{words}: BPDA breaks what exact gradients cannot, the gap's 95% interval clearing {margin} "
            f"(one-sided p = {clears_raw:.2g}, Holm {clears_adj:.2g})"
        )
    if p_adj < ALPHA and p.diff < 0:
        return NOT_SUPPORTED, words + ": BPDA is weaker than exact gradients"
    tost = _tost_words(p, *ps["p TOST"])
    if ps["p TOST"][1] < ALPHA:
        return NOT_SUPPORTED, f"{words}: no gap beyond the minimum effect, {tost}"
    cleared = (
        f" (the gap clears {margin} at one-sided p = {clears_raw:.2g}, not after Holm: {clears_adj:.2g})"
        if p.diff > 0 and clears_raw < ALPHA / 2
        else ""
    )
    return INCONCLUSIVE, (
        f"{words}: a gap neither clearing nor shown within the minimum effect{cleared}, {tost}: attack more "
        "examples"
    )


def _tost_words(p: PairedComparison, raw: float, adjusted: float) -> str:
    """The equivalence test beside a claim-5 verdict: its margin, interval, raw and Holm p."""
    eq = p.equivalence(vd.EQUIVALENCE_MARGIN, ALPHA)
    within = "within" if adjusted < ALPHA else "not shown within"
    return (
        f"{within} {_margin()} by two one-sided tests ({100 * (1 - 2 * ALPHA):.0f}% interval "
        f"{fmt.interval(eq.ci_low, eq.ci_high)}, TOST p = {raw:.2g}, Holm {adjusted:.2g})"
    )
