"""Automatic EOT: find a randomised model before attacking it, attack it with AutoAttack's 'rand' protocol,
and decide its predictions over several draws.

A model whose two forwards of one batch differ (input noise, random resizing, dropout left on, stochastic
activation pruning) defeats single-draw evaluation twice: each attack step follows one draw's gradient, and
each point's fate is one draw's prediction, so randomness alone passes for robustness (Athalye, Carlini &
Wagner 2018). AutoAttack's ``version='rand'`` (Croce & Hein 2020) answers the first with 20 EOT iterations
(the step follows the mean gradient of 20 draws); this module applies it to every gradient attack of a suite
that has ``eot_iter`` and skips, with a reason, those whose back-ends cannot average draws. The second is
answered by the plurality vote of K draws (:data:`~robustbench_wave.attacks.draws.DRAW_RULE`) on common random
numbers (:func:`~robustbench_wave.evaluation.execute.predict_common`: draw k of example i is the same for
every input classified, so a point no attack moved keeps its clean vote), whatever ``--eot`` says about the
attacks. Both go through the model a chunk of draws at a time
(:mod:`robustbench_wave.attacks.draws`) when its rows draw independently (two copies of a batch in one forward
differ), else one draw per forward.

:func:`measure_randomness` is the one test of "two forwards differ": the ``deterministic`` check of the
diagnostics calls it too. A deterministic model is evaluated exactly as before (same suite, single draws,
same records): the measurement runs under its own seed and restores torch's RNG, and it draws nothing from a
model that draws nothing. A randomised model is probed once more: two forwards under the same seeding of
torch's, NumPy's and Python's RNGs must agree, else its draws come from a source nobody seeds and meta.json
says ``common_draws: false`` with the reason.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

import numpy as np
import torch
from torch import nn

from robustbench_wave.attacks import AttackEntry, Suite, attack_mode, derive_seed, input_gradient, seeded
from robustbench_wave.attacks.draws import DRAW_RULE, rows_budget, rows_independent
from robustbench_wave.attacks.torchattacks_backend import SQUARE_VOTE_DRAWS
from robustbench_wave.core.naming import parse_enum
from robustbench_wave.evaluation.execute import predict

log = logging.getLogger(__name__)

#: EOT iterations of every gradient attack on a randomised model: AutoAttack's version='rand' (APGD-CE and
#: APGD-DLR with eot_iter = 20).
EOT_ITER = 20
#: Draws per prediction of a randomised model (odd, so a vote between two classes cannot tie).
DEFAULT_DRAWS = 21
#: Examples on which two forwards are compared before the attacks.
PROBE_EXAMPLES = 16
#: Largest relative difference of two forwards' logits a deterministic model may show (float noise).
LOGIT_RTOL = 1e-4
#: Likewise for input gradients (GPU backward kernels may add in another order).
GRAD_RTOL = 1e-3


def _vote_wins(draws: int, p: np.ndarray) -> np.ndarray:
    """P(a ``draws``-draw vote between two classes picks the one a single draw picks with probability ``p``);
    an even split is a coin flip (the softmax tie rule, for a model that knows nothing more)."""
    j = np.arange(draws + 1)
    pmf = (
        np.array([math.comb(draws, int(i)) for i in j])[:, None]
        * p[None] ** j[:, None]
        * (1 - p[None]) ** (draws - j[:, None])
    )
    return pmf[2 * j > draws].sum(0) + 0.5 * pmf[2 * j == draws].sum(0)


@functools.cache
def vote_tolerance(draws: int, other: int | None = None) -> float:
    """Largest fraction of points on which two independent votes (``draws`` and ``other`` draws, ``other``
    defaulting to ``draws``) of a randomised model may disagree for its decisions to count as settled.

    A point between two classes whose single draw picks the first with probability p is won by a K-draw vote
    with probability q_K(p) = P(Bin(K, p) > K/2) (+ half the even split), and two independent votes disagree
    with probability q_a (1 - q_b) + q_b (1 - q_a). Points whose p lies evenly over [0, 1] -- as many near the
    tie as anywhere else -- disagree on the integral of that over p, about 1/sqrt(pi K) for K = a = b (0.118
    for K = 21; 1/3 for single draws): the bound. A model that disagrees more crowds its points at the tie,
    so its accuracies are the draw's more than the model's (more draws narrow the band as 1/sqrt(K)).
    Exact: the integrand is a polynomial of degree a + b, integrated by Gauss-Legendre quadrature.
    """
    b = draws if other is None else other
    if draws < 1 or b < 1:
        raise ValueError(f"votes need at least one draw, got {draws} and {b}")
    t, w = np.polynomial.legendre.leggauss((draws + b) // 2 + 1)
    p = (t + 1) / 2
    qa, qb = _vote_wins(draws, p), _vote_wins(b, p)
    return float((w / 2 * (qa * (1 - qb) + qb * (1 - qa))).sum())


class EotMode(str, Enum):
    """``auto``: EOT for a model found randomised; ``on``: for every model; ``off``: never (single draws)."""

    AUTO = "auto"
    OFF = "off"
    ON = "on"

    @classmethod
    def parse(cls, value: str | EotMode) -> EotMode:
        return parse_enum(cls, value, "EOT setting")


@dataclass(frozen=True)
class EotSettings:
    """The EOT choice of one evaluation (:class:`~robustbench_wave.evaluation.plan.EvalSettings`)."""

    mode: str = EotMode.AUTO.value
    draws: int = DEFAULT_DRAWS  # K: forwards per prediction when EOT applies

    def __post_init__(self) -> None:
        object.__setattr__(self, "mode", EotMode.parse(self.mode).value)
        if isinstance(self.draws, bool) or not isinstance(self.draws, int) or self.draws < 1:
            raise ValueError(f"EOT draws must be an integer >= 1 (e.g. {DEFAULT_DRAWS}), got {self.draws!r}")


@dataclass(frozen=True)
class Randomness:
    """Two eval-mode forwards (and input gradients) of the same batch, compared."""

    max_rel_logit_diff: float
    max_rel_grad_diff: float  # NaN: the model takes no autograd graph (e.g. a numpy round trip)
    pred_agreement: float

    def deterministic(self, rtol: float = LOGIT_RTOL) -> bool:
        """Logits agree within ``rtol``, input gradients (where there are any) within ``max(rtol, GRAD_RTOL)``."""
        grads_agree = math.isnan(self.max_rel_grad_diff) or self.max_rel_grad_diff <= max(rtol, GRAD_RTOL)
        return self.max_rel_logit_diff <= rtol and grads_agree


def measure_randomness(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> Randomness:
    """Two forwards and two margin-loss input gradients of ``x`` in attack mode (eval, frozen parameters).

    Draws from torch's global RNG as the model does; callers that must not disturb it wrap it in
    :func:`~robustbench_wave.attacks.seeded` (:func:`decide` does).
    """
    with attack_mode(model):
        with torch.no_grad():
            a = model(x)
            b = model(x)
        try:
            ga, _ = input_gradient(model, x, y, loss="margin")
            gb, _ = input_gradient(model, x, y, loss="margin")
            grad_diff = float((ga - gb).abs().max()) / float(ga.abs().max().clamp_min(1e-12))
        except RuntimeError:  # a forward that refuses an input requiring grad: the logits decide alone
            grad_diff = math.nan
    return Randomness(
        max_rel_logit_diff=float((a - b).abs().max()) / float(a.abs().max().clamp_min(1.0)),
        max_rel_grad_diff=grad_diff,
        pred_agreement=float((a.argmax(1) == b.argmax(1)).float().mean()),
    )


@dataclass(frozen=True)
class EotPlan:
    """What one evaluation does about randomness: K draws per prediction, EOT iterations per gradient, and
    the gradient attacks it skips because no back-end of theirs averages draws."""

    mode: str
    randomness: Randomness | None  # None: no examples to probe
    draws: int = 1  # K (1: single-draw predictions)
    eot_iter: int = 1  # EOT iterations forced on the gradient attacks (1: the suite's own)
    skipped: dict[str, str] = field(default_factory=dict)  # attack name -> why it does not run
    draw_rows: int = 0  # rows (draws x points) per batched forward of the draws (0: one draw per forward)
    common_draws: bool = False  # predictions on common random numbers per example (a randomised model)
    not_common: str = ""  # why a randomised model's draws are not common random numbers ('' where they are)

    @classmethod
    def from_meta(cls, eot: Mapping[str, Any]) -> EotPlan:
        """The plan a run's ``meta.json`` ``eot`` entry describes (:meth:`to_meta`)."""
        found = eot.get("randomness")
        return cls(
            mode=str(eot.get("mode", EotMode.AUTO.value)),
            randomness=Randomness(**found) if found else None,
            draws=int(eot.get("draws", 1)),
            eot_iter=int(eot.get("eot_iter", 1)),
            skipped=dict(eot.get("skipped") or {}),
            draw_rows=int(eot.get("draw_rows", 0)),
            common_draws=bool(eot.get("common_draws", False)),
            not_common=str(eot.get("common_draws_reason") or ""),
        )

    @property
    def stochastic(self) -> bool:
        return self.randomness is not None and not self.randomness.deterministic()

    @property
    def active(self) -> bool:
        return self.eot_iter > 1

    @property
    def votes(self) -> bool:
        """Predictions are K-draw votes of a randomised model (under every --eot mode unless K = 1)."""
        return self.stochastic and self.draws > 1

    @property
    def rand_protocol(self) -> bool:
        """AutoAttack's 'rand' protocol applied to a randomised model: EOT gradients and K-draw votes."""
        return self.votes and self.active

    @property
    def changes_records(self) -> bool:
        """Records differ from a plain single-draw evaluation's: EOT on, or a randomised model's seeded draws."""
        return self.active or self.stochastic

    def identity(self) -> dict[str, Any]:
        """What joins the chunk fingerprint when :attr:`changes_records`."""
        return (
            {
                "mode": self.mode,
                "stochastic": self.stochastic,
                "draws": self.draws,
                "eot_iter": self.eot_iter,
            }
            | ({"draw_rows": self.draw_rows} if self.draw_rows else {})
            | ({"common_draws": True} if self.common_draws else {})
        )

    def to_meta(self) -> dict[str, Any]:
        """The ``eot`` entry of a model in ``meta.json``: ``common_draws`` true where a randomised model's votes
        are on common random numbers, false with ``common_draws_reason`` where its draws escape the seeding."""
        uncommon = {"common_draws": False, "common_draws_reason": self.not_common} if self.not_common else {}
        return (
            self.identity()
            | uncommon
            | {
                "rule": DRAW_RULE if self.draws > 1 else "one forward per prediction",
                "randomness": dataclasses.asdict(self.randomness) if self.randomness is not None else None,
                "skipped": dict(self.skipped),
            }
        )

    def apply(self, suite: Suite) -> tuple[Suite, EotPlan]:
        """The suite as this plan runs it: every gradient attack with ``eot_iter`` at least :attr:`eot_iter`;
        on a randomised model (:attr:`votes`), Square scoring its queries by the records' K-draw vote
        (``vote_draws`` at least :attr:`draws`: batched draws for the search, every break confirmed on the
        records' draws, ``attacks/square.py``); and the plan naming the attacks that cannot do so (they are
        skipped)."""
        if not self.active:
            return suite, self
        entries, skipped = [], {}
        for entry in suite.attacks:
            reason = None
            if entry.spec.grad_dependent and "eot_iter" in entry.spec.params:
                eot = max(int(entry.params.get("eot_iter", 1)), self.eot_iter)
                entry = dataclasses.replace(entry, params={**entry.params, "eot_iter": eot})
                reason = entry.rejection(entry.backend) if entry.backend else None
                if reason is None and not entry.able_backends():
                    reason = "no back-end averages draws"
            elif entry.spec.grad_dependent:
                reason = (
                    f"{entry.family} has no eot_iter, so its gradients would be single draws (--eot off runs "
                    "it anyway)"
                )
            elif SQUARE_VOTE_DRAWS in entry.spec.params and self.votes:
                entry, reason = self._with_votes(entry)
            if reason is not None:
                skipped[entry.name] = f"EOT on a randomised model: {reason}"
            entries.append(entry)
        for name, reason in skipped.items():
            log.warning("skipping %s: %s", name, reason)
        return dataclasses.replace(suite, attacks=tuple(entries)), dataclasses.replace(self, skipped=skipped)

    def _with_votes(self, entry: AttackEntry) -> tuple[AttackEntry, str | None]:
        """Square's entry scoring each query by the K-draw vote, and why it cannot run (None: it can). A
        back-end the suite pinned that cannot vote (ART's Square) is not swapped for another: the entry is
        skipped, its reason naming the back-end that would run it."""
        draws = max(int(entry.params.get(SQUARE_VOTE_DRAWS, 1)), self.draws)
        entry = dataclasses.replace(entry, params={**entry.params, SQUARE_VOTE_DRAWS: draws})
        able = entry.able_backends()
        if not able:
            return entry, "no back-end scores a query by the K-draw vote"
        reason = entry.rejection(entry.backend) if entry.backend else None
        if reason is None:
            return entry, None
        return entry, f"{reason}; backend = {able[0]!r} scores each query by the vote"


def decide(
    model: nn.Module, x: torch.Tensor, y: torch.Tensor, settings: EotSettings, seed: int, device: torch.device
) -> EotPlan:
    """Probe the first :data:`PROBE_EXAMPLES` points and choose: EOT (:data:`EOT_ITER` draws per gradient)
    for a randomised model under ``auto``, always under ``on``, never under ``off``; ``settings.draws`` draws
    per prediction wherever EOT applies and for a randomised model under every mode (its decision rule, on
    common random numbers, unless :func:`_not_common` finds draws no seeding reaches). The probes run under
    their own seeds and leave the global RNGs as they found them."""
    randomness = None
    if len(x):
        with seeded(derive_seed(seed, "eot-probe"), device):
            randomness = measure_randomness(
                model, x[:PROBE_EXAMPLES].to(device), y[:PROBE_EXAMPLES].to(device)
            )
    plan = EotPlan(settings.mode, randomness)
    mode = EotMode(settings.mode)
    attack_eot = mode is EotMode.ON or (mode is EotMode.AUTO and plan.stochastic)
    if attack_eot or plan.stochastic:  # a randomised model is decided by K draws whatever --eot says
        batchable = not plan.stochastic or _rows_independent(model, x, seed, device)
        not_common = _not_common(model, x, seed, device) if plan.stochastic else ""
        plan = dataclasses.replace(
            plan,
            draws=settings.draws,
            eot_iter=EOT_ITER if attack_eot else 1,
            draw_rows=rows_budget(device) if batchable else 0,
            common_draws=plan.stochastic and not not_common,
            not_common=not_common,
        )
    if plan.stochastic:
        _log_randomised(plan)
    return plan


def _log_randomised(plan: EotPlan) -> None:
    """The warning that says a model was found randomised and what the evaluation does about it."""
    what = "EOT applies" if plan.active else "EOT is off: single-draw gradients"
    diff = plan.randomness.max_rel_logit_diff if plan.randomness is not None else float("nan")
    log.warning(
        "the model is randomised (two forwards differ by up to %.3g of the logits): %s; predictions by "
        "the vote of K = %d draws %s",
        diff,
        what,
        plan.draws,
        "on common random numbers" if plan.common_draws else "seeded per example, but NOT common (see above)",
    )


def _rel_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    """Largest difference of two forwards' logits relative to the largest logit (at least 1); equal entries
    (infinities, NaN against NaN included) differ by 0, a NaN against a number by NaN (never within a bound)."""
    same = (a == b) | (a.isnan() & b.isnan())
    diff = torch.where(same, torch.zeros_like(a), (a - b).abs())
    return float(diff.max()) / float(a.nan_to_num().abs().max().clamp_min(1.0)) if a.numel() else 0.0


def _not_common(model: nn.Module, x: torch.Tensor, seed: int, device: torch.device) -> str:
    """Why a randomised model's draws cannot be common random numbers ('' where they can).

    Common random numbers hold only if seeding torch's, NumPy's and Python's global RNGs (:func:`seeded`)
    fixes every draw: two forwards of the same rows under the same seeding must give the same logits (within
    :data:`LOGIT_RTOL`, the bar a deterministic model meets). A model that draws from a source nobody seeds
    (``os.urandom``, an unseeded ``np.random.default_rng()``, the clock) fails it, and its votes are not
    reproducible: the run says so (meta.json ``common_draws: false`` and the reason) instead of claiming them.
    """
    rows = x[:PROBE_EXAMPLES].to(device)
    runs = []
    with attack_mode(model), torch.no_grad():
        for _ in range(2):
            with seeded(derive_seed(seed, "eot-common"), device):
                runs.append(model(rows).float())
    diff = _rel_diff(runs[0], runs[1])
    if diff <= LOGIT_RTOL:
        return ""
    reason = (
        f"two forwards of the same rows under the same seeding of torch's, NumPy's and Python's global RNGs "
        f"differ by up to {diff:.3g} of the logits: the model draws from a source the evaluation cannot seed "
        "(os.urandom, an unseeded np.random.default_rng(), the clock), so its K-draw votes are not "
        "reproducible and a point no attack moved may lose its clean vote"
    )
    log.warning("the model's draws are not common random numbers: %s", reason)
    return reason


def _rows_independent(model: nn.Module, x: torch.Tensor, seed: int, device: torch.device) -> bool:
    """May a randomised model's draws be batched? (Its rows draw independently; the RNG put back.)"""
    with seeded(derive_seed(seed, "eot-rows"), device), attack_mode(model):
        independent = rows_independent(model, x[:PROBE_EXAMPLES].to(device), LOGIT_RTOL)
    if not independent:
        log.warning("the model draws once per forward, not per row: its EOT draws run one forward each")
    return independent


def vote_agreement(
    model: nn.Module, x: torch.Tensor, y: torch.Tensor, plan: EotPlan, seed: int, device: torch.device
) -> float:
    """Fraction of points on which two independent K-draw votes (``plan.draws``, each under its own seed,
    the RNG put back) give the same class: how settled the run's decision rule is on these points."""
    preds = []
    with attack_mode(model):
        for i in range(2):
            with seeded(derive_seed(seed, "vote-agreement", i), device):
                preds.append(predict(model, x, y, max(len(x), 1), device, plan.draws, plan.draw_rows)[0])
    return float((preds[0] == preds[1]).float().mean()) if len(x) else 1.0
