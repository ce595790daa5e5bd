"""Attack implementations against oracles: budgets, the closed-form optimal L∞ attack on a linear model,
gradient modes, per-example randomness, backend agreement and the model-state guard."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from robustbench_wave.attacks import (
    PGD,
    BudgetViolation,
    GradSafe,
    RunContext,
    attack_mode,
    audit,
    example_generators,
    get_runner,
    input_gradient,
    input_gradient_blocked,
    noise_sample,
    parse_suite,
    perturbation_norm,
    pgd_with_history,
    seeded,
)
from robustbench_wave.attacks.model_state import MIN_ROWS
from robustbench_wave.models.frontend import grad_mode
from tests.support.attack_models import (
    frontend_model,
    labelled,
    linear_model,
    optimal_linf_margin,
    small_cnn,
    teacher,
    toy_data,
)

TOL = 1e-5


def _entry(family: str, threat: str, **params: object):
    extra = (
        {"distribution": {"Linf": "uniform", "L2": "gaussian", "L0": "salt_pepper"}[threat]}
        if family == "noise"
        else {}
    )
    raw = {"name": f"{family}_{threat}", "family": family, "threat": threat, **extra, **params}
    suite = parse_suite({"eps": {"default": {"Linf": [0.1], "L2": [1.0], "L0": [0.1]}}, "attack": [raw]})
    return suite.attacks[1]


def test_builtin_pgd_finds_the_optimal_linf_attack_on_a_binary_linear_model() -> None:
    g = torch.Generator().manual_seed(3)
    # moderate logit scale: at margins of ~100 float32 cross-entropy saturates and its gradient vanishes
    w = 0.2 * torch.randn(2, 64, generator=g)
    b = 0.1 * torch.randn(2, generator=g)
    model = linear_model(w, b)
    x = toy_data(64, seed=4)
    y = labelled(model, x)
    for eps in (0.03, 0.08, 0.12):
        min_margin, x_opt = optimal_linf_margin(w, b, x, y, eps)
        with attack_mode(model):
            x_adv, _, _ = PGD(
                eps=eps, norm="Linf", steps=12, step_size=eps / 4, restarts=1, random_start=True
            ).run(GradSafe(model), x, y, torch.arange(64))
        with torch.no_grad():
            robust_pgd = model(x_adv).argmax(1) == y
        robust_opt = min_margin > 0
        assert 0 < int(robust_opt.sum()) < 64  # the budget is informative
        assert torch.equal(robust_pgd, robust_opt)
        torch.testing.assert_close(x_adv, x_opt, atol=1e-6, rtol=0)  # it reaches the optimal corner itself


def test_builtin_pgd_matches_the_exact_robust_accuracy_of_a_multiclass_linear_model() -> None:
    model = teacher(n_classes=4, seed=7)
    w, b = model[1].weight.detach(), model[1].bias.detach()
    x = toy_data(64, seed=8)
    y = labelled(model, x)
    eps = 0.05
    min_margin, _ = optimal_linf_margin(w, b, x, y, eps)
    with attack_mode(model):
        x_adv, _, _ = PGD(eps=eps, norm="Linf", steps=20, step_size=eps / 8, restarts=2).run(
            GradSafe(model), x, y, torch.arange(64)
        )
    with torch.no_grad():
        acc_pgd = (model(x_adv).argmax(1) == y).float().mean().item()
    acc_opt = (min_margin > 0).float().mean().item()
    assert acc_pgd >= acc_opt - 1e-9  # no attack beats the optimum
    assert acc_pgd - acc_opt <= 2 / 64  # and cross-entropy PGD gets within two points of it


def test_blocked_mode_gives_zero_input_gradient_exact_and_bpda_do_not() -> None:
    model = frontend_model()
    x = toy_data(8)
    y = labelled(model, x)
    grads = {}
    for mode in ("exact", "blocked", "bpda"):
        with grad_mode(model, mode):
            grads[mode], _ = input_gradient(model, x, y)
    assert torch.count_nonzero(grads["blocked"]) == 0
    assert grads["exact"].abs().sum() > 0 and grads["bpda"].abs().sum() > 0
    # bpda differentiates the un-thresholded transform: it sees pixels the exact mask hides
    assert not torch.allclose(grads["exact"], grads["bpda"])
    # and the model's previous mode is restored, also after an exception inside the block
    with pytest.raises(RuntimeError), grad_mode(model, "blocked"):
        raise RuntimeError("boom")
    assert model[0].grad_mode.value == "exact"


def test_blocked_pgd_cannot_move_beyond_its_random_start() -> None:
    model = frontend_model()
    x = toy_data(16)
    y = labelled(model, x)
    with grad_mode(model, "blocked"):
        a, _ = pgd_with_history(
            model, x, y, 0.1, "Linf", steps=4, step_size=0.05, restarts=1, seed=0, random_start=False
        )
    torch.testing.assert_close(a, x)  # zero gradient: sign(0) = 0, no step


def test_random_start_depends_only_on_seed_example_and_restart() -> None:
    model = small_cnn()
    x = toy_data(10)
    y = labelled(model, x)
    ids = torch.arange(100, 110)
    with attack_mode(model):
        m = GradSafe(model)
        full, last_full, _ = PGD(eps=0.1, norm="L2", steps=3, step_size=0.05, restarts=2, seed=5).run(
            m, x, y, ids
        )
        perm = torch.tensor([7, 2, 9])
        part, last_part, _ = PGD(eps=0.1, norm="L2", steps=3, step_size=0.05, restarts=2, seed=5).run(
            m, x[perm], y[perm], ids[perm]
        )
        other, _, _ = PGD(eps=0.1, norm="L2", steps=3, step_size=0.05, restarts=2, seed=6).run(m, x, y, ids)
    torch.testing.assert_close(part, full[perm], atol=1e-6, rtol=0)
    assert torch.equal(last_part, last_full[perm])
    assert not torch.allclose(other, full)  # the seed matters


def test_pgd_history_rises_on_a_linear_model_and_best_iterate_is_kept() -> None:
    g = torch.Generator().manual_seed(0)
    model = linear_model(torch.randn(2, 64, generator=g))
    x = toy_data(32)
    y = labelled(model, x)
    _, hist = pgd_with_history(model, x, y, 0.05, "Linf", steps=6, step_size=0.0125, restarts=2, seed=0)
    assert hist.shape == (6,)
    assert (hist[1:] >= hist[:-1] - 1e-6).all()  # ascent on a linear loss never goes down
    # best iterate: with an overshooting step the last iterate can be right while a middle one was wrong
    with attack_mode(model):
        best, correct_last, _ = PGD(eps=0.05, norm="Linf", steps=6, step_size=0.0125, restarts=1).run(
            GradSafe(model), x, y, torch.arange(32)
        )
    with torch.no_grad():
        correct_best = model(best).argmax(1) == y
    assert (correct_best <= correct_last).all()  # best is never weaker than the last iterate


def test_audit_rejects_out_of_budget_points_and_names_the_attack() -> None:
    x = toy_data(4)
    ok = (x + 0.1).clamp(0, 1)
    torch.testing.assert_close(
        audit(x, ok, 0.1, "Linf", "mine").float(), perturbation_norm(ok - x, "Linf").float()
    )
    with pytest.raises(BudgetViolation, match=r"'rogue'.*Linf budget"):
        audit(x, (x + 0.2).clamp(0, 1), 0.1, "Linf", "rogue")
    with pytest.raises(BudgetViolation, match=r"'rogue'.*\[0,1\]"):
        audit(x, x + 0.05, 0.1, "Linf", "rogue")
    with pytest.raises(BudgetViolation, match=r"'rogue'.*NaN"):
        audit(x, x * float("nan"), 0.1, "Linf", "rogue")
    d = torch.zeros_like(x)
    d[:, :, 0, 0] = 0.5
    assert torch.allclose(perturbation_norm(d, "L0"), torch.full((4,), 1 / 64, dtype=torch.float64))
    with pytest.raises(BudgetViolation, match=r"'rogue'.*L2"):
        audit(x, (x + d).clamp(0, 1), 0.4, "L2", "rogue")


def test_attack_mode_restores_model_state_even_when_the_attack_raises() -> None:
    model = small_cnn().train()
    model[0].weight.requires_grad_(False)
    before = ([m.training for m in model.modules()], [p.requires_grad for p in model.parameters()])
    with pytest.raises(ValueError), attack_mode(model):
        assert not model.training and not any(p.requires_grad for p in model.parameters())
        raise ValueError("attack failed")
    assert ([m.training for m in model.modules()], [p.requires_grad for p in model.parameters()]) == before


def _robust_acc(
    model: nn.Module, family: str, backend: str, x, y, eps: float, threat: str = "Linf", **params
) -> torch.Tensor:
    entry = _entry(family, threat, **params)
    with attack_mode(model), seeded(0):
        x_adv = (
            get_runner(family, backend)
            .fn(entry.request(GradSafe(model), x, y, torch.arange(len(x)), eps, RunContext()))
            .x_adv
        )
        with torch.no_grad():
            return model(x_adv).argmax(1) == y


def test_fgsm_backends_return_the_same_points() -> None:
    model = small_cnn()
    x = toy_data(32)
    y = labelled(model, x)
    outs = {}
    entry = _entry("fgsm", "Linf")
    for backend in ("builtin", "torchattacks", "foolbox"):
        with attack_mode(model):
            outs[backend] = (
                get_runner("fgsm", backend)
                .fn(entry.request(GradSafe(model), x, y, torch.arange(32), 0.05, RunContext()))
                .x_adv
            )
    torch.testing.assert_close(outs["torchattacks"], outs["builtin"], atol=1e-6, rtol=0)
    torch.testing.assert_close(outs["foolbox"], outs["builtin"], atol=1e-6, rtol=0)


@pytest.mark.parametrize(("threat", "eps"), [("Linf", 0.04), ("L2", 0.2)])
def test_pgd_backends_agree_on_the_same_points(threat: str, eps: float) -> None:
    model = teacher(n_classes=3, seed=2)
    x = toy_data(64, seed=9)
    y = labelled(model, x)
    params = {"steps": 10, "rel_step_size": 0.25, "restarts": 1}
    acc = {
        b: _robust_acc(model, "pgd", b, x, y, eps, threat, **params).float().mean().item()
        for b in ("builtin", "torchattacks", "foolbox")
    }
    assert 0.1 < acc["builtin"] < 0.9, acc  # an informative budget
    assert abs(acc["torchattacks"] - acc["builtin"]) <= 0.08, acc
    assert abs(acc["foolbox"] - acc["builtin"]) <= 0.08, acc


def test_noise_draws_are_per_example_and_salt_pepper_hits_the_stated_density() -> None:
    x = toy_data(6, shape=(3, 8, 8))
    gens = example_generators(0, "sp", torch.arange(6), 0)
    out = noise_sample("salt_pepper", x, 0.25, gens)
    changed = (out != x).any(1).flatten(1).sum(1)
    assert (changed <= 16).all() and (
        changed >= 12
    ).all()  # 16 = floor(0.25 * 64) positions, some already 0/1
    vals = out[(out != x)]
    assert set(vals.unique().tolist()) <= {0.0, 1.0}
    again = noise_sample("salt_pepper", x[3:4], 0.25, example_generators(0, "sp", torch.tensor([3]), 0))
    assert torch.equal(again, out[3:4])


class _Bypass(nn.Module):
    """A fixed front-end plus a skip path on raw pixels: blocking the front-end does not block the input."""

    def __init__(self) -> None:
        super().__init__()
        self.body = frontend_model()
        self.skip = nn.Linear(64, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x) + self.skip(x.flatten(1))


def test_structural_zero_gradient_probe() -> None:
    x = toy_data(4)
    model, bypass = frontend_model(), _Bypass()
    with grad_mode(model, "blocked"), grad_mode(bypass, "blocked"):
        assert input_gradient_blocked(model, x)
        assert not input_gradient_blocked(bypass, x)
    for mode in ("exact", "bpda"):
        with grad_mode(model, mode):
            assert not input_gradient_blocked(model, x)
    assert not input_gradient_blocked(small_cnn(), x)


@pytest.mark.parametrize(
    ("family", "backend", "threat"),
    [
        ("pgd", "builtin", "Linf"),
        ("pgd", "torchattacks", "Linf"),
        ("pgd", "torchattacks", "L2"),
        ("pgd", "foolbox", "Linf"),
        ("pgd", "foolbox", "L2"),
        ("apgd", "torchattacks", "Linf"),
        ("apgd", "torchattacks", "L2"),
        ("lowfreq-pgd", "builtin", "Linf"),
        ("lowfreq-pgd", "builtin", "L2"),
    ],
)
def test_with_a_blocked_gradient_one_step_equals_many(family: str, backend: str, threat: str) -> None:
    """The evaluation runs gradient attacks for 1 step when the gradient is structurally zero: same points."""
    model = frontend_model()
    x = toy_data(16)
    y = labelled(model, x)
    eps = 0.2 if threat == "Linf" else 1.0
    outs = []
    with attack_mode(model), grad_mode(model, "blocked"):
        for steps in (25, 1):
            extra = {"level": 1} if family == "lowfreq-pgd" else {}
            entry = _entry(family, threat, steps=steps, restarts=2, **extra)
            with seeded(7):
                outs.append(
                    get_runner(family, backend)
                    .fn(entry.request(GradSafe(model), x, y, torch.arange(16), eps, RunContext(), 7))
                    .x_adv
                )
    assert torch.equal(outs[0], outs[1])
    assert (outs[0] != x).any()  # the random start is there


def test_square_small_eps_budget_is_an_explicit_protocol_choice(monkeypatch):
    """Off by default (every eps gets n_queries); with small_eps_below set, smaller eps get small_eps_queries."""
    import torchattacks

    seen: list[tuple[float, int]] = []

    class Recorder:
        def __init__(self, model, *, eps, n_queries, **kwargs):
            seen.append((eps, n_queries))

        def __call__(self, x, y):
            return x

    def linf_recorder(model, x, y, settings, votes=None):  # L∞ runs attacks.square.square_linf
        assert votes is None  # vote_draws defaults to 1: single draws, torchattacks' algorithm
        seen.append((settings.eps, settings.n_queries))
        return x, None

    from robustbench_wave.attacks import torchattacks_backend

    monkeypatch.setattr(torchattacks, "Square", Recorder)
    monkeypatch.setattr(torchattacks_backend, "square_linf", linf_recorder)
    x, y, model = toy_data(4), torch.zeros(4, dtype=torch.long), nn.Flatten()  # the recorder never queries
    runner = get_runner("square", "torchattacks").fn
    for threat in ("Linf", "L2"):
        seen.clear()
        default = _entry("square", threat, n_queries=300)
        reduced = _entry("square", threat, n_queries=300, small_eps_below=0.05, small_eps_queries=20)
        for entry in (default, reduced):
            for eps in (0.01, 0.05, 0.1):
                runner(entry.request(model, x, y, torch.arange(len(x)), eps, RunContext()))
        assert seen == [(0.01, 300), (0.05, 300), (0.1, 300), (0.01, 20), (0.05, 300), (0.1, 300)]


def test_a_one_point_batch_gives_the_bits_of_the_same_point_inside_a_batch() -> None:
    """Records must not depend on how points are batched (batch size, shards): GradSafe pads batches below
    MIN_ROWS rows (on AVX-512 CPUs batches of 1 and 2 rows both take other kernels)."""
    from robustbench_wave.data import dataset_info
    from robustbench_wave.models.vit import build_model

    torch.manual_seed(0)
    model = GradSafe(build_model("patch", dataset_info("synthetic")).eval())
    x = torch.rand(5, 1, 32, 32)
    with torch.no_grad():
        batched = model(x)
        assert all(torch.equal(model(x[i : i + 1]), batched[i : i + 1]) for i in range(5))
        assert all(torch.equal(model(x[i : i + 2]), batched[i : i + 2]) for i in range(4))
        assert torch.equal(model(x[1:4]), batched[1:4])


class _RowWise(nn.Module):
    """Logits from each row alone with no matrix product: no batch size changes a bit of them."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.flatten(1)[:, :10] * 3.0 - 1.0


class _Drawing(_RowWise):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x) + torch.rand(len(x), 10)


def test_a_small_batch_is_padded_only_as_far_as_its_bits_need() -> None:
    """GradSafe.rows_for: a model whose rows never depend on their batch takes a small batch as it is; one that
    draws, and every forward with gradients, keep MIN_ROWS; the probe leaves every random state as it was."""
    import numpy as np

    x = torch.rand(3, 1, 8, 8)
    rowwise, drawing = GradSafe(_RowWise()), GradSafe(_Drawing())
    torch_state, numpy_state = torch.get_rng_state(), np.random.get_state()  # noqa: NPY002
    with torch.no_grad():
        assert [rowwise.rows_for(x[:n]) for n in (1, 2, 3)] == [1, 2, 3]
        assert [drawing.rows_for(x[:n]) for n in (1, 2, 3)] == [MIN_ROWS] * 3
    assert torch.equal(torch.get_rng_state(), torch_state)
    assert np.array_equal(np.random.get_state()[1], numpy_state[1])  # noqa: NPY002
    assert rowwise.rows_for(x[:1]) == MIN_ROWS  # gradients enabled: always padded


def test_the_zoo_vits_keep_the_padded_bits_with_fewer_rows() -> None:
    """Whatever rows_for chose on this CPU for the zoo ViTs, a small batch's logits without gradients are the
    bits the same points get inside a large batch, for points the probe never saw too."""
    from robustbench_wave.data import dataset_info
    from robustbench_wave.models.vit import build_model

    for name in ("patch", "wavelet"):
        torch.manual_seed(0)
        model = GradSafe(build_model(name, dataset_info("synthetic")).eval())
        x = torch.rand(9, 1, 32, 32)
        with torch.no_grad():
            batched = model(x)
            for n in (1, 2, 3):
                for start in range(0, 9 - n, 2):
                    assert torch.equal(model(x[start : start + n]), batched[start : start + n]), (name, n)
            assert all(1 <= model.rows_for(x[:n]) <= MIN_ROWS for n in (1, 2, 3))


class _ChannelsLast(nn.Module):
    """A colour front-end's layout change (like YCbCr on a channels-last tensor): its input gradient is strided."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(3, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x.permute(0, 2, 3, 1)).mean((1, 2))


def test_a_strided_input_gradient_reaches_the_attack_contiguous_with_the_same_values() -> None:
    """torchattacks' PGD-L2 calls ``grad.view``: on a permuting model it raised (CIFAR-10 headline run)."""
    import torchattacks

    torch.manual_seed(0)
    bare = _ChannelsLast().eval()
    x, y = torch.rand(5, 3, 8, 8), torch.randint(0, 4, (5,))

    def grad(model: nn.Module) -> torch.Tensor:
        xr = x.clone().requires_grad_(True)
        return torch.autograd.grad(nn.functional.cross_entropy(model(xr), y), xr)[0]

    plain, safe = grad(bare), grad(GradSafe(bare))
    assert not plain.is_contiguous() and safe.is_contiguous()
    assert torch.equal(safe, plain)
    adv = torchattacks.PGDL2(GradSafe(bare), eps=0.5, alpha=0.1, steps=2)(x, y)
    assert (adv - x).flatten(1).norm(dim=1).max() <= 0.5 + 1e-5
