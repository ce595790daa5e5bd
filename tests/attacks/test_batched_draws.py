"""Batched EOT draws (attacks.draws) against the one-draw-per-forward loops they replace.

The oracle is a model whose "random" draws come from a fixed table read row after row: K forwards of B rows
and one forward of K x B rows (draw k in rows k*B .. k*B + B - 1) then see the same draws, so the batched
computation must give the loop's numbers.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from robustbench_wave.attacks import GradSafe, attack_mode
from robustbench_wave.attacks.draws import (
    DrawServer,
    MeanOverDraws,
    draw_logits,
    eot_loss_grad,
    rows_independent,
    vote,
    with_batched_draws,
)
from robustbench_wave.attacks.pgd import PGD

D, C, B, K = 12, 4, 8, 5


class ScriptedNoise(nn.Module):
    """Logits of tanh(x + e) through a linear layer, e read from a fixed table, one row per input row."""

    def __init__(self, sigma: float = 0.5) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.lin = nn.Linear(D, C)
        with torch.no_grad():
            self.lin.weight.copy_(torch.randn(C, D, generator=g))
            self.lin.bias.zero_()
        self.register_buffer("table", sigma * torch.randn(20000, D, generator=g))
        self.pos = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        e = self.table[self.pos : self.pos + len(x)].view(len(x), 1, 1, D)
        self.pos += len(x)
        return self.lin(torch.tanh(x + e).flatten(1))


def data() -> tuple[torch.Tensor, torch.Tensor]:
    """Points and the noise-free model's labels (the library attacks run on the points classified right,
    and more than :data:`~robustbench_wave.attacks.model_state.MIN_ROWS` of them, so none is padded)."""
    x = torch.rand(B, 1, 1, D, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        return x, ScriptedNoise().lin(torch.tanh(x).flatten(1)).argmax(1)


@pytest.mark.parametrize("rows", [1000, 2 * B, 0])
def test_draw_logits_and_eot_loss_grad_equal_the_loop(rows: int) -> None:
    x, y = data()
    loop_model, batched_model = ScriptedNoise(), ScriptedNoise()
    xr = x.clone().requires_grad_(True)
    losses, grads, logits = [], [], []
    for _ in range(K):
        z = loop_model(xr)
        loss = F.cross_entropy(z, y, reduction="none")
        (g,) = torch.autograd.grad(loss.sum(), xr)
        losses.append(loss.detach()), grads.append(g), logits.append(z.detach())
    ce = lambda z, t: F.cross_entropy(z, t, reduction="none")  # noqa: E731
    loss, grad, z = eot_loss_grad(batched_model, x, y, K, rows, ce)
    torch.testing.assert_close(z, torch.stack(logits))
    torch.testing.assert_close(loss, torch.stack(losses).mean(0))
    torch.testing.assert_close(grad, torch.stack(grads).mean(0))
    with torch.no_grad():
        torch.testing.assert_close(draw_logits(ScriptedNoise(), x, K, rows), torch.stack(logits))
    pred, _ = vote(z, y)
    assert torch.equal(pred, vote(list(torch.stack(logits)), y)[0])


def test_mean_over_draws_is_the_mean_of_the_loop_logits() -> None:
    x, _ = data()
    model = ScriptedNoise()
    expected = torch.stack([model(x) for _ in range(K)]).mean(0)
    torch.testing.assert_close(MeanOverDraws(ScriptedNoise(), K, rows=3 * B)(x), expected)


@pytest.mark.parametrize("cls_name", ["APGD", "EOTPGD"])
def test_torchattacks_eot_loop_served_by_batched_draws_gives_the_librarys_points(cls_name: str) -> None:
    import torchattacks

    cls = getattr(torchattacks, cls_name)
    x, y = data()
    kw = {"eps": 0.2, "steps": 5, "eot_iter": K}
    kw |= {"seed": 0} if cls_name == "APGD" else {"alpha": 0.05}
    out = []
    for batched in (False, True):
        model = ScriptedNoise()
        with attack_mode(model):
            atk = (with_batched_draws(cls) if batched else cls)(GradSafe(model), **kw)
            if batched:
                atk.draw_rows = 2 * B + 1  # two draws per forward: three chunks of a five-draw step
            torch.manual_seed(0)
            out.append(atk(x, y))
    torch.testing.assert_close(out[1], out[0])


def test_the_builtin_engine_with_batched_draws_gives_the_loops_points() -> None:
    x, y = data()
    ids = torch.arange(B)
    out = []
    for rows in (0, 1000):
        model = ScriptedNoise()
        attack = PGD(0.2, "Linf", steps=4, step_size=0.05, restarts=1, eot_iter=K, eot_rows=rows)
        with attack_mode(model):
            out.append(attack.run(GradSafe(model), x, y, ids))
    torch.testing.assert_close(out[1].x_adv, out[0].x_adv)
    assert torch.equal(out[1].correct_last, out[0].correct_last)


def test_a_server_refuses_a_loop_that_moves_on_before_every_backward() -> None:
    x, _ = data()
    server = DrawServer(ScriptedNoise(), K, rows=1000)
    xr = x.clone().requires_grad_(True)
    server(xr)  # draw 0 asked for, never backpropagated
    with pytest.raises(RuntimeError, match="before backpropagating"):
        server(x.clone().requires_grad_(True))


def test_rows_independent_tells_per_row_from_per_forward_randomness() -> None:
    x, _ = data()

    class PerForward(nn.Module):
        def forward(self, z: torch.Tensor) -> torch.Tensor:
            return z.flatten(1)[:, :C] + torch.randn(())

    assert rows_independent(ScriptedNoise(), x, 1e-4)
    assert not rows_independent(PerForward(), x, 1e-4)
