"""The running worst case of an evaluation: AutoAttack's robust flags per (gradient mode, threat, eps).

An example is robust at (threat, eps) only if no attack broke it at that eps or a smaller one; later attacks
and larger budgets then run only on points still robust. Corruptions (an average-case axis) have no flags.
"""

from __future__ import annotations

import pandas as pd
import torch

from robustbench_wave.attacks import is_average_case
from robustbench_wave.evaluation.metrics import CLEAN_THREAT


class RobustState:
    """Robust flags per (grad mode, threat): a bool matrix (N examples, eps grid of that threat)."""

    def __init__(
        self, clean_correct: torch.Tensor, modes: list[str], threat_eps: dict[str, list[float]]
    ) -> None:
        self.clean_correct = clean_correct.clone().bool().cpu()
        self.eps = {t: list(v) for t, v in threat_eps.items()}
        n = len(self.clean_correct)
        self.flags = {
            m: {t: self.clean_correct.view(n, 1).repeat(1, len(v)) for t, v in self.eps.items()}
            for m in modes
        }

    def _k(self, threat: str, eps: float) -> int:
        try:
            return self.eps[threat].index(eps)
        except (KeyError, ValueError):
            raise ValueError(
                f"eps {eps} of threat {threat} is not on the suite's budget grid {self.eps}"
            ) from None

    def robust(self, mode: str, threat: str, eps: float) -> torch.Tensor:
        return self.flags[mode][threat][:, self._k(threat, eps)].clone()

    def mark_broken(self, mode: str, threat: str, eps: float, broken: torch.Tensor) -> None:
        """``broken`` (N,) bool: these examples fell at ``eps``, hence at every larger budget too."""
        k = self._k(threat, eps)
        self.flags[mode][threat][:, k:] &= ~broken.cpu().view(-1, 1)

    def apply_records(self, records: pd.DataFrame, example_ids: list[int]) -> None:
        """Replay saved records (e.g. a resumed chunk) into the flags; ``example_ids`` gives the row order."""
        index = pd.Index(example_ids)
        worst = (records["threat"] != CLEAN_THREAT) & ~records["threat"].map(is_average_case).astype(bool)
        attacked = records[records["attacked"].astype(bool) & worst]
        for (mode, threat, eps), g in attacked.groupby(["grad_mode", "threat", "eps"], sort=False):
            if mode not in self.flags:
                continue
            rows = index.get_indexer(g.loc[~g["correct"].astype(bool), "example_id"])
            if (rows < 0).any():
                raise ValueError("records name example ids that are not part of this evaluation")
            broken = torch.zeros(len(self.clean_correct), dtype=torch.bool)
            broken[torch.as_tensor(rows, dtype=torch.long)] = True
            self.mark_broken(mode, threat, float(eps), broken)
