"""bench_square's baseline is what it says: under ``reference_square`` the evaluation's L∞ Square runs
torchattacks' ``Square``, and the harness's runner returns the same points on the benchmark's settings."""

from __future__ import annotations

import torch
import torchattacks

from benchmarks.bench_square import default_suite, reference_square, square_case
from robustbench_wave.attacks import AttackRequest, GradSafe, RunContext, attack_mode, get_runner, seeded
from robustbench_wave.attacks.square import SquareSettings
from tests.support.attack_models import conv_net, labelled, toy_data


def test_reference_square_runs_torchattacks_square(monkeypatch):
    calls: list[float] = []
    real = torchattacks.Square

    class Counting(real):
        def __init__(self, *args, **kwargs):
            calls.append(kwargs["eps"])
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(torchattacks, "Square", Counting)
    model = conv_net(1, seed=2)
    x = toy_data(6, seed=3, shape=(1, 16, 16))
    y = labelled(model, x)
    params = {"n_queries": 20, "p_init": 0.8, "restarts": 1, "loss": "margin"}
    params |= {"small_eps_below": 0.0, "small_eps_queries": 100}
    with attack_mode(model), reference_square():
        request = AttackRequest(
            GradSafe(model), x, y, torch.arange(6), 0.05, "Linf", params, "sq", "square", RunContext()
        )
        with seeded(1):
            get_runner("square", "torchattacks").fn(request)
    assert calls == [0.05]


def test_square_case_reports_the_same_points():
    model = conv_net(1, seed=4)
    x = toy_data(6, seed=1, shape=(1, 16, 16))
    with attack_mode(model):
        times, note = square_case(
            GradSafe(model), x, labelled(model, x), SquareSettings(eps=0.02, n_queries=30), 1
        )
    assert note.startswith("same points: yes")
    assert set(times) == {"torchattacks", "harness"}


def test_quick_default_suite_only_shortens_square():
    full, quick = default_suite(False), default_suite(True)
    assert [a.name for a in full.attacks] == [a.name for a in quick.attacks]
    for a, b in zip(full.attacks, quick.attacks, strict=True):
        assert (b.params["n_queries"] == 100) if a.family == "square" else (a.params == b.params)
