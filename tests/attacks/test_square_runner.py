"""The L∞ Square runner against its oracle, torchattacks' ``Square`` itself: the same points, bit for bit, and
the same state of torch's RNG afterwards, while it queries the model less."""

from __future__ import annotations

import pytest
import torch
import torchattacks
from torch import nn

from robustbench_wave.attacks import AttackRequest, GradSafe, RunContext, attack_mode, get_runner, seeded
from robustbench_wave.attacks.square import SquareSettings, p_selection, square_linf
from robustbench_wave.models.vit import build_model
from robustbench_wave.models.zoo import load_spec
from tests.support.attack_models import conv_net, labelled, toy_data


def both(model: nn.Module, x: torch.Tensor, y: torch.Tensor, settings: SquareSettings) -> tuple:
    """(torchattacks' points, RNG state after), (ours, RNG state after, query count); same outer seed."""
    with attack_mode(model):
        wrapped = GradSafe(model)
        with seeded(7):
            ref = torchattacks.Square(
                wrapped,
                norm="Linf",
                eps=settings.eps,
                n_queries=settings.n_queries,
                n_restarts=settings.n_restarts,
                p_init=settings.p_init,
                loss=settings.loss,
                seed=settings.seed,
            )(x, y)
            ref_state = torch.get_rng_state()
        with seeded(7):
            ours, count = square_linf(wrapped, x, y, settings)
            our_state = torch.get_rng_state()
    return (ref, ref_state), (ours, our_state, count)


@pytest.mark.parametrize(
    ("channels", "eps", "loss", "restarts"),
    [(1, 0.03, "margin", 1), (1, 0.1, "ce", 2), (3, 0.05, "margin", 1), (3, 0.2, "ce", 1)],
)
def test_square_linf_returns_torchattacks_points_bit_for_bit(
    channels: int, eps: float, loss: str, restarts: int
) -> None:
    model = conv_net(channels)
    x = toy_data(12, seed=channels, shape=(channels, 16, 16))
    y = labelled(model, x)
    y[:3] = (y[:3] + 1) % 4  # a few clean errors: Square leaves them alone
    settings = SquareSettings(eps=eps, n_queries=60, n_restarts=restarts, loss=loss, seed=11)
    (ref, ref_state), (ours, our_state, count) = both(model, x, y, settings)
    assert torch.equal(ours, ref)
    assert torch.equal(our_state, ref_state)  # the same draws, in the same order
    assert count.made > 0


def test_square_linf_skips_the_forwards_of_unchanged_points() -> None:
    """Late in the schedule the square is a pixel or two; a proposal that repeats the point's own signs is
    not sent to the model, and the result is still torchattacks'."""
    model = conv_net(1, seed=3)
    x = toy_data(48, seed=5, shape=(1, 16, 16))
    y = labelled(model, x)
    settings = SquareSettings(eps=0.01, n_queries=100, seed=2)  # small eps: most points stand to the end
    (ref, _), (ours, _, count) = both(model, x, y, settings)
    assert torch.equal(ours, ref)
    assert count.skipped > 0.1 * (count.made + count.skipped)


class NoisyNet(nn.Module):
    """A randomised model: Gaussian noise on the input from torch's global RNG (as the gallery's defences)."""

    def __init__(self) -> None:
        super().__init__()
        self.net = conv_net(1, seed=6)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x + 0.05 * torch.randn_like(x))


class BatchCentred(nn.Module):
    """Deterministic, but each row's logits depend on the rest of its batch (the batch mean)."""

    def __init__(self) -> None:
        super().__init__()
        self.net = conv_net(1, seed=8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x - x.mean(0, keepdim=True) + 0.5)


@pytest.mark.parametrize("model_cls", [NoisyNet, BatchCentred])
def test_a_model_whose_answers_do_not_repeat_is_queried_on_every_point(model_cls: type) -> None:
    """No stored answer stands in for a forward that would differ or draw from the RNG: torchattacks' points
    and RNG stream all the same, nothing skipped."""
    model = model_cls().eval()
    x = toy_data(8, seed=4, shape=(1, 16, 16))
    with torch.no_grad():
        y = model.net(x).argmax(1)
    (ref, ref_state), (ours, our_state, count) = both(model, x, y, SquareSettings(eps=0.02, n_queries=60))
    assert torch.equal(ours, ref)
    assert torch.equal(our_state, ref_state)
    assert count.skipped == 0


@pytest.mark.slow
def test_square_linf_on_the_zoo_wavelet_vit_matches_torchattacks() -> None:
    """The model the default suite spends its Square time on (untrained weights: the same forward path)."""
    from robustbench_wave.data import dataset_info

    torch.manual_seed(0)
    model = build_model(load_spec("wavelet"), dataset_info("fashion-mnist")).eval()
    x = toy_data(40, seed=1, shape=(1, 32, 32))
    y = labelled(model, x)
    (ref, _), (ours, _, count) = both(model, x, y, SquareSettings(eps=0.005, n_queries=40, seed=4))
    assert torch.equal(ours, ref)
    assert count.skipped > 0


def test_registered_runner_is_torchattacks_square_under_linf() -> None:
    model = conv_net(1, seed=1)
    x = toy_data(12, seed=2, shape=(1, 16, 16))
    y = labelled(model, x)
    params = {"n_queries": 80, "p_init": 0.8, "restarts": 1, "loss": "margin"}
    params |= {"small_eps_below": 0.0, "small_eps_queries": 100}
    ctx = RunContext(seed=0)
    with attack_mode(model):
        wrapped = GradSafe(model)
        request = AttackRequest(
            wrapped, x, y, torch.arange(12), 0.05, "Linf", params, "sq", "square", ctx, 1234
        )
        with seeded(9):
            got = get_runner("square", "torchattacks").fn(request).x_adv
        with seeded(9):
            want = torchattacks.Square(wrapped, norm="Linf", eps=0.05, n_queries=80, seed=1234)(x, y)
    assert torch.equal(got, want)


@pytest.mark.parametrize("n_queries", [1, 37, 1000, 5000])
def test_p_selection_is_torchattacks_schedule(n_queries: int) -> None:
    ref = torchattacks.Square(nn.Linear(1, 1), n_queries=n_queries, p_init=0.8)
    assert all(p_selection(0.8, i, n_queries) == ref.p_selection(i) for i in range(n_queries))


def test_square_settings_refuse_an_unknown_loss() -> None:
    with pytest.raises(ValueError, match="margin"):
        SquareSettings(eps=0.1, loss="dlr")
