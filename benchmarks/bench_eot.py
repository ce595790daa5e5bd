"""A randomised model's EOT draws: one draw per forward (the loop every EOT library runs) vs batched chunks.

On the gallery's randomised defences (``models.gallery``: stochastic activation pruning, random resize-and-pad;
untrained weights, a step's cost does not depend on them) and the undefended CNN behind sigma = 0.05 input
noise, three things the 'rand' protocol does per step: the builtin engine's EOT gradient (20 draws,
:func:`~robustbench_wave.attacks.draws.eot_loss_grad`), torchattacks' APGD with ``eot_iter = 20`` (5 steps;
its own loop, or served by :func:`~robustbench_wave.attacks.draws.with_batched_draws`), and a K = 21 vote
(:func:`~robustbench_wave.evaluation.execute.predict`). Batched = the rows budget of this device
(:func:`~robustbench_wave.attacks.draws.rows_budget`). For 4 points (what is left at a large budget) and 27
(the gallery's clean-correct points at n = 32).

Run alone: ``python -m benchmarks.bench_eot [--quick]`` (not in ``make bench``).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from benchmarks.harness import Row, interleaved, ratio_rows, reps_for, run_script
from robustbench_wave.attacks import GradSafe, attack_mode
from robustbench_wave.attacks.draws import eot_loss_grad, rows_budget, with_batched_draws
from robustbench_wave.evaluation.execute import predict
from robustbench_wave.models import gallery

EOT_ITER, DRAWS = 20, 21


class _Noisy(nn.Module):
    def __init__(self, net: nn.Module) -> None:
        super().__init__()
        self.net = net

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x + 0.05 * torch.randn_like(x))


MODELS: dict[str, Callable[[], nn.Module]] = {
    "sap_cnn": gallery.sap_cnn,
    "resize_pad_cnn": gallery.resize_pad_cnn,
    "gaussian_cnn": lambda: _Noisy(gallery.cnn()),
}


def _variants(
    model: nn.Module, x: torch.Tensor, y: torch.Tensor, rows: int
) -> dict[str, Callable[[], object]]:
    import torchattacks

    ce = lambda z, t: F.cross_entropy(z, t, reduction="none")  # noqa: E731

    def apgd(batched: bool) -> Callable[[], object]:
        def run() -> object:
            atk = (with_batched_draws(torchattacks.APGD) if batched else torchattacks.APGD)(
                model, eps=0.03, steps=5, eot_iter=EOT_ITER, seed=0
            )
            atk.draw_rows = rows if batched else 0
            return atk(x, y)

        return run

    return {
        "gradient_loop": lambda: eot_loss_grad(model, x, y, EOT_ITER, 0, ce),
        "gradient_batched": lambda: eot_loss_grad(model, x, y, EOT_ITER, rows, ce),
        "apgd_loop": apgd(False),
        "apgd_batched": apgd(True),
        "vote_loop": lambda: predict(model, x, y, len(x), x.device, DRAWS, 0),
        "vote_batched": lambda: predict(model, x, y, len(x), x.device, DRAWS, rows),
    }


def case_rows(name: str, n: int, reps: int) -> list[Row]:
    """One model and number of points: each batched variant against its loop."""
    torch.manual_seed(0)
    net = MODELS[name]().eval()
    x = torch.rand(n, 1, 32, 32, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        y = net(x).argmax(1)  # its own (one-draw) answers: the points APGD attacks are (mostly) all of them
    rows = rows_budget(x.device)
    out: list[Row] = []
    with attack_mode(net):
        fns = _variants(GradSafe(net), x, y, rows)
        for what in ("gradient", "apgd", "vote"):
            pair = {v: fns[v] for v in (f"{what}_loop", f"{what}_batched")}
            times = interleaved(pair, reps)
            case = f"{name}, {n} points, {what} ({rows} rows per forward)"
            out += ratio_rows("eot", case, times, f"{what}_loop", unit="call")
    return out


def bench(args: argparse.Namespace) -> list[Row]:
    """Every model at 4 and 27 points (``--quick``: 4 only)."""
    reps = reps_for(args)
    sizes = (4,) if args.quick else (4, 27)
    return [row for name in MODELS for n in sizes for row in case_rows(name, n, reps)]


if __name__ == "__main__":
    run_script("eot", __doc__.splitlines()[0], bench)
