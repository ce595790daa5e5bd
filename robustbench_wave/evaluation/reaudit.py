"""Re-audit a run's saved adversarial examples against its records, with nothing re-attacked.

Every saved point (:mod:`adversarial`) is checked again as the evaluation checked it: within its budget
(:func:`~robustbench_wave.attacks.budget.within_budget`, the audit's rule: finite, in [0,1], norm <= eps),
then classified by the reloaded model exactly as the evaluation classified it (eval mode, the same attack
wrapper, the run's batch size; a randomised model by its K-draw vote on the run's own common random numbers,
so the same draws), and its prediction compared with the ``pred`` its record holds. The records
and the saved points must also agree on which examples fell: every example the records count as broken at
(mode, threat, eps) has a saved point at that budget or below, and every saved point's record is a break.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd
import torch
from torch import nn

from robustbench_wave.attacks import (
    GradSafe,
    attack_mode,
    derive_seed,
    is_average_case,
    seeded,
    within_budget,
)
from robustbench_wave.evaluation.adversarial import AdversarialSet, Key
from robustbench_wave.evaluation.eot import EotPlan, vote_tolerance
from robustbench_wave.evaluation.execute import predict, predict_common
from robustbench_wave.evaluation.metrics import CLEAN_THREAT, EPS_TOL, clean_correct, robust_flags
from robustbench_wave.evaluation.plan import DEFAULT_BATCH_SIZE

COLUMNS = [
    "model", "grad_mode", "threat", "eps", "n_checked", "n_budget_violations", "n_pred_mismatches",
    "n_unmatched", "n_missing", "n_vote_flips",
]  # fmt: skip
#: The counts that must all be 0 for a run to pass.
FAILURES = ["n_budget_violations", "n_pred_mismatches", "n_unmatched", "n_missing"]


def problems(table: pd.DataFrame, plans: Mapping[str, EotPlan] | None = None) -> list[str]:
    """What fails a re-audit: any of :data:`FAILURES`, and per model more vote flips than independent votes
    near a tie explain (:func:`~robustbench_wave.evaluation.eot.vote_tolerance` of the K in its run's
    ``plans`` entry; 0 without one). Only runs made before predictions shared their draws have flips."""
    found = [f"{int(table[c].sum())} {c[2:].replace('_', ' ')}" for c in FAILURES if table[c].sum()]
    for model, rows in table.groupby("model", sort=True):
        plan = (plans or {}).get(str(model))
        tol = vote_tolerance(plan.draws) if plan is not None and plan.votes else 0.0
        flips, checked = int(rows["n_vote_flips"].sum()), int(rows["n_checked"].sum())
        if flips > tol * checked:
            found.append(
                f"{model}: {flips} of {checked} saved points are classified right by a new K-draw vote "
                f"(more than the {tol:.1%} that independent votes near a tie explain)"
            )
    return found


def _record_keys(records: pd.DataFrame) -> set[Key]:
    threats = records["threat"].astype(str)
    rows = records[(threats != CLEAN_THREAT) & ~threats.map(is_average_case).astype(bool)]
    triples = rows[["grad_mode", "threat", "eps"]].drop_duplicates().itertuples(index=False, name=None)
    return {(str(m), str(t), float(e)) for m, t, e in triples}


def _breaks(records: pd.DataFrame, key: Key) -> set[int]:
    """Examples the records count as broken at ``key``: clean-correct and not robust (metrics' worst case)."""
    mode, threat, eps = key
    rows = records[records["grad_mode"] == mode]
    flags = robust_flags(rows, threat, eps)
    clean = clean_correct(rows).reindex(flags.index, fill_value=False)
    return set(flags.index[clean.to_numpy(bool) & ~flags.to_numpy(bool)].astype(int))


def _recorded(records: pd.DataFrame, key: Key, ids: torch.Tensor, sources: list[str]) -> pd.DataFrame:
    """The record of each saved point: its attack's row at this (mode, eps) for that example (NaN if none)."""
    mode, threat, eps = key
    rows = records[
        (records["grad_mode"] == mode)
        & (records["threat"] == threat)
        & (abs(records["eps"] - eps) <= EPS_TOL)
    ]
    want = pd.DataFrame({"example_id": ids.numpy().astype(np.int64), "attack": sources})
    cols = ["example_id", "attack", "pred", "attacked", "correct"]
    return want.merge(rows[cols].astype({"attack": object}), on=["example_id", "attack"], how="left")


def reaudit_model(
    model: nn.Module,
    images: torch.Tensor,
    labels: torch.Tensor,
    example_ids: Sequence[int],
    kept: AdversarialSet,
    records: pd.DataFrame,
    *,
    batch_size: int = DEFAULT_BATCH_SIZE,
    device: torch.device | str = "cpu",
    eot: EotPlan | None = None,
    seed: int = 0,
) -> pd.DataFrame:
    """One row per (grad mode, threat, eps) of ``records`` (this model's) or of ``kept``: :data:`COLUMNS`.

    ``images`` / ``labels`` are the run's clean inputs in the order of ``example_ids``. ``eot`` is the run's
    randomness protocol (its meta.json ``eot``): a randomised model whose predictions drew on common random
    numbers is re-classified on the same draws (``seed``: the run's), so to its recorded class exactly. A run
    made before that (K-draw votes under other seeds) is re-classified by a new K-draw vote, which must
    confirm each break; a point near a tie may vote right this time: counted in ``n_vote_flips``.
    """
    position = {int(e): p for p, e in enumerate(example_ids)}
    device = torch.device(device)
    out = []
    with attack_mode(model):
        classify = _Classifier(GradSafe(model), batch_size, device, eot, seed)
        for key in sorted(_record_keys(records) | set(kept.keys())):
            with seeded(derive_seed(seed, "reaudit", *key), device):
                out.append(_check_key(classify, images, labels, position, kept, records, key))
    return pd.DataFrame(out, columns=COLUMNS)


class _Classifier:
    """The evaluation's decision rule: one forward, a randomised model's K-draw vote on the run's common random
    numbers, or (a run made before those) a new K-draw vote."""

    def __init__(
        self, model: nn.Module, batch_size: int, device: torch.device, eot: EotPlan | None, seed: int
    ) -> None:
        self.model, self.batch_size, self.device, self.seed = model, batch_size, device, seed
        self.common = eot is not None and eot.common_draws
        self.new_vote = eot is not None and eot.votes and not self.common  # flips counted apart
        self.draws, self.rows = (eot.draws, eot.draw_rows) if eot is not None and eot.stochastic else (1, 0)

    def __call__(self, x: torch.Tensor, y: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        if self.common:
            args = (self.seed, self.batch_size, self.device, self.draws, self.rows)
            return predict_common(self.model, x, y, ids, *args)[0]
        draws, rows = (self.draws, self.rows) if self.new_vote else (1, 0)
        return predict(self.model, x, y, self.batch_size, self.device, draws, rows)[0]


def _check_key(
    classify: _Classifier,
    images: torch.Tensor,
    labels: torch.Tensor,
    position: dict[int, int],
    kept: AdversarialSet,
    records: pd.DataFrame,
    key: Key,
) -> dict[str, object]:
    g = kept.group(key)
    unknown = [i for i in g.example_id.tolist() if i not in position]
    if unknown:
        raise ValueError(f"{kept.model} {key}: saved example ids {unknown[:5]} are not examples of the run")
    pos = torch.tensor([position[i] for i in g.example_id.tolist()], dtype=torch.long)
    x = g.x.reshape(len(pos), *images.shape[1:]) if not len(pos) else g.x  # no point saved: (0, C, H, W)
    ok = within_budget(images[pos], x, key[2], key[1])
    pred = classify(x, labels[pos], g.example_id)
    rec = _recorded(records, key, g.example_id, g.source)
    is_break = rec["attacked"].fillna(False).astype(bool) & ~rec["correct"].fillna(True).astype(bool)
    recorded = rec["pred"].astype("Int64")
    same = (recorded.to_numpy(dtype=np.int64, na_value=-1) == pred.numpy()) & recorded.notna().to_numpy()
    flips = np.zeros(len(pos), dtype=bool)
    if classify.new_vote:  # another vote: a break is confirmed when it is wrong, whichever wrong class
        flips = (pred == labels[pos]).numpy() & recorded.notna().to_numpy()
        same = recorded.notna().to_numpy()  # the flips are counted apart (problems: beyond the tolerance)
    covered = set(kept.worst_case(*key).example_id.tolist())
    return {
        "model": kept.model,
        "grad_mode": key[0],
        "threat": key[1],
        "eps": key[2],
        "n_checked": len(pos),
        "n_budget_violations": int((~ok).sum()),
        "n_pred_mismatches": int((~same).sum()),
        "n_unmatched": int((~is_break.to_numpy()).sum()),
        "n_missing": len(_breaks(records, key) - covered),
        "n_vote_flips": int(flips.sum()),
    }
