"""Every robustness number computed from per-example records, in one import (after AutoAttack, Croce & Hein
2020); the code lives by topic:

* :mod:`.worst_case` -- the per-example worst case (:func:`robust_flags`, the one definition), a run's table of
  accuracies with Wilson intervals (:func:`example_flags`, :func:`summarize`), broken / held / unknown per
  example (:func:`example_status`), back-end agreement (``--cross-check``), and the reference budget
  (:func:`reference_eps`);
* :mod:`.paired` -- the paired statistics, the image the unit: :func:`paired_over_seeds` (the exact sign-flip
  test stratified by image, Newcombe's interval, TOST), the seeds' t interval, Holm's adjustment, the binomial
  tail (docs/statistics.md);
* :mod:`.corruption_metrics` -- the average-case axis: accuracy per common corruption and severity, CE, mCE and
  relative mCE against a baseline model.

Import from here (``from robustbench_wave.evaluation.metrics import robust_flags``); a new metric goes into its
topic's module and its name into the list below.
"""

from __future__ import annotations

from robustbench_wave.evaluation.corruption_metrics import (
    ACCURACY_COLUMNS,
    CORRUPTION_THREAT,
    corruption_accuracy,
    corruption_errors,
    corruption_summary,
    default_baseline,
)
from robustbench_wave.evaluation.paired import (
    ALTERNATIVES,
    UNIT,
    Equivalence,
    PairedComparison,
    SeedInterval,
    SeedSpread,
    binomial_half_cdf,
    binomial_tail,
    holm_adjusted,
    mcnemar_exact,
    paired_comparison,
    paired_difference_interval,
    paired_over_seeds,
    paired_table,
    seed_interval,
    seed_spread,
    sign_flip_p,
    t_quantile,
)
from robustbench_wave.evaluation.worst_case import (
    CLEAN_KIND,
    CLEAN_THREAT,
    CROSS_SEP,
    EPS_TOL,
    WORST,
    WORST_MODE,
    Z95,
    backend_agreement,
    check_on_grid,
    clean_correct,
    cross_attack_name,
    declared_reference,
    example_flags,
    example_status,
    middle_budget,
    reference_eps,
    robust_accuracy,
    robust_flags,
    shared_status,
    split_cross_attack,
    summarize,
    summarize_flags,
    threat_eps,
    wilson_interval,
    worst_case_rows,
)

__all__ = [
    "ACCURACY_COLUMNS",
    "ALTERNATIVES",
    "CLEAN_KIND",
    "CLEAN_THREAT",
    "CORRUPTION_THREAT",
    "CROSS_SEP",
    "EPS_TOL",
    "UNIT",
    "WORST",
    "WORST_MODE",
    "Z95",
    "Equivalence",
    "PairedComparison",
    "SeedInterval",
    "SeedSpread",
    "backend_agreement",
    "binomial_half_cdf",
    "binomial_tail",
    "check_on_grid",
    "clean_correct",
    "corruption_accuracy",
    "corruption_errors",
    "corruption_summary",
    "cross_attack_name",
    "declared_reference",
    "default_baseline",
    "example_flags",
    "example_status",
    "holm_adjusted",
    "mcnemar_exact",
    "middle_budget",
    "paired_comparison",
    "paired_difference_interval",
    "paired_over_seeds",
    "paired_table",
    "reference_eps",
    "robust_accuracy",
    "robust_flags",
    "seed_interval",
    "seed_spread",
    "shared_status",
    "sign_flip_p",
    "split_cross_attack",
    "summarize",
    "summarize_flags",
    "t_quantile",
    "threat_eps",
    "wilson_interval",
    "worst_case_rows",
]
