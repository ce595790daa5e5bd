"""The evaluation engine (evaluation.evaluator): bookkeeping invariants, gradient modes, batch-size invariance,
resume, provenance and the budget audit."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

from robustbench_wave.attacks import BudgetViolation, RunnerSpec, RunOutput, parse_suite
from robustbench_wave.evaluation import EvalSettings, EvaluationResult, evaluate, evaluator
from robustbench_wave.evaluation.metrics import WORST, example_flags, middle_budget, robust_flags
from robustbench_wave.evaluation.records import COLUMNS, DTYPES
from tests.support.attack_models import frontend_model, labelled, small_cnn, teacher, tiny_suite, toy_data

N = 40
EPS = {"Linf": [0.0, 0.05, 0.15], "L2": [0.0, 0.5], "L0": [0.0, 0.05]}
# attacks whose outcome depends only on each example (builtin / deterministic), so skip_broken and batching
# must not change any per-example worst case
DETERMINISTIC = parse_suite(
    {
        "name": "det",
        "eps": {"default": EPS},
        "attack": [
            {"name": "clean", "family": "clean"},
            {"name": "noise_u", "family": "noise", "distribution": "uniform", "draws": 2},
            {"name": "noise_g", "family": "noise", "distribution": "gaussian"},
            {"name": "noise_sp", "family": "noise", "distribution": "salt_pepper"},
            {"name": "fgsm", "family": "fgsm", "threat": "Linf"},
            {
                "name": "pgd_linf",
                "family": "pgd",
                "threat": "Linf",
                "steps": 4,
                "rel_step_size": 0.4,
                "restarts": 2,
            },
            {"name": "pgd_l2", "family": "pgd", "threat": "L2", "steps": 4, "rel_step_size": 0.4},
            {"name": "transfer", "family": "transfer", "threat": "Linf", "steps": 3, "rel_step_size": 0.5},
        ],
    }
)


def _data(model: torch.nn.Module, n: int = N) -> tuple[torch.Tensor, torch.Tensor]:
    x = toy_data(n, seed=11)
    y = labelled(model, x)
    y[::8] = (y[::8] + 1) % 3  # some clean errors, so clean accuracy is not trivially 1
    return x, y


@pytest.fixture(scope="module")
def cnn_runs() -> dict[str, EvaluationResult]:
    model = small_cnn()
    x, y = _data(model)
    kw = {"surrogate": teacher(), "progress": False}
    return {
        "skip": evaluate(model, x, y, DETERMINISTIC, EvalSettings(seed=3), batch_size=7, **kw),
        "noskip": evaluate(
            model, x, y, DETERMINISTIC, EvalSettings(seed=3, skip_broken=False), batch_size=64, **kw
        ),
    }


def test_records_follow_the_contract_schema(cnn_runs: dict[str, EvaluationResult]) -> None:
    r = cnn_runs["skip"].records
    assert list(r.columns) == COLUMNS
    assert {c: str(t) for c, t in r.dtypes.items()} == DTYPES
    n_rows = N * sum(len(EPS[a.threat]) if a.family != "clean" else 1 for a in DETERMINISTIC.attacks)
    assert len(r) == n_rows and not r.duplicated(["model", "grad_mode", "attack", "eps", "example_id"]).any()
    by = r.groupby("attack")["backend"].first()
    assert by["pgd_linf"] == "builtin" and by["fgsm"] == "torchattacks" and by["transfer"] == "builtin"
    assert set(r["kind"]) == {"clean", "noise", "white-box", "transfer"}
    skipped = r[~r["attacked"]]
    assert not skipped["correct"].any() and skipped["pred"].isna().all() and skipped["norm"].isna().all()
    pgd = r[(r["attack"] == "pgd_linf") & r["attacked"] & (r["eps"] > 0)]
    assert pgd["correct_last"].notna().all() and (pgd["correct"] <= pgd["correct_last"]).all()
    attacked = r[r["attacked"] & (r["threat"] != "none")]
    assert (attacked["norm"] <= attacked["eps"] * (1 + 1e-5) + 1e-6).all()


def test_eps_zero_returns_the_clean_accuracy(cnn_runs: dict[str, EvaluationResult]) -> None:
    for run in cnn_runs.values():
        r = run.records
        clean = r[r["attack"] == "clean"].set_index("example_id")["correct"]
        assert 0.5 < clean.mean() < 1.0
        zero = r[(r["eps"] == 0) & (r["attack"] != "clean")]
        assert len(zero) == N * (len(DETERMINISTIC.attacks) - 1)
        for _, g in zero.groupby("attack"):
            assert (g.set_index("example_id")["correct"] == clean).all()
        assert (zero.loc[zero["attacked"], "norm"] == 0).all()
        s = run.summary()
        assert np.allclose(s.loc[s["eps"] == 0, "robust_accuracy"], clean.mean())


def test_worst_case_is_never_above_any_single_attack(cnn_runs: dict[str, EvaluationResult]) -> None:
    for run in cnn_runs.values():
        flags = example_flags(run.records)
        for threat, attack, eps in flags.columns:
            if threat == "none" or attack == WORST:
                continue
            worst = flags[(threat, WORST, eps)]
            assert (worst.astype(bool) <= flags[(threat, attack, eps)].astype(bool)).all()
            # and at a larger budget the worst case can only fall
            larger = [c for c in flags.columns if c[0] == threat and c[1] == WORST and c[2] > eps]
            for c in larger:
                assert (flags[c].astype(bool) <= worst.astype(bool)).all()
        s = run.summary()
        for _, g in s[s["threat"] != "none"].groupby(["model", "grad_mode", "threat", "eps"]):
            assert g.loc[g["attack"] == WORST, "robust_accuracy"].item() <= g["robust_accuracy"].min() + 1e-12


def test_skip_broken_changes_work_not_the_worst_case(cnn_runs: dict[str, EvaluationResult]) -> None:
    skip, noskip = (example_flags(cnn_runs[k].records) for k in ("skip", "noskip"))
    worst_cols = [c for c in skip.columns if c[1] == WORST]
    pd.testing.assert_frame_equal(skip[worst_cols], noskip[worst_cols])
    a, b = cnn_runs["skip"].records, cnn_runs["noskip"].records
    assert a["attacked"].sum() < b["attacked"].sum()  # skipping saved work
    # without skipping every clean-correct point is attacked by every attack at every eps
    clean = b[b["attack"] == "clean"].set_index("example_id")["correct"]
    for _, g in b[b["attack"] != "clean"].groupby(["attack", "eps"]):
        assert (g.set_index("example_id")["attacked"] == clean).all()
    # with skipping, a point broken at a smaller eps is not attacked again
    pgd = a[a["attack"] == "pgd_linf"].pivot(index="example_id", columns="eps", values="attacked")
    assert (pgd[0.15] <= pgd[0.05]).all()


def test_results_do_not_depend_on_batch_size_for_a_fixed_seed() -> None:
    model = small_cnn(seed=1)
    x, y = _data(model, 24)
    kw = {"surrogate": teacher(), "progress": False}
    a = evaluate(model, x, y, tiny_suite(), EvalSettings(seed=5), batch_size=7, **kw).records
    b = evaluate(model, x, y, tiny_suite(), EvalSettings(seed=5), batch_size=24, **kw).records
    assert set(a["family"]) >= {"noise", "fgsm", "pgd", "apgd", "square", "transfer"}
    for col in ("attack", "eps", "example_id", "attacked", "correct", "pred", "correct_last"):
        pd.testing.assert_series_equal(a[col], b[col])
    np.testing.assert_allclose(a["norm"], b["norm"], atol=1e-5)
    assert (a.loc[a["attacked"], "norm"] > 0).any()


@pytest.fixture(scope="module")
def frontend_run() -> EvaluationResult:
    model = frontend_model()
    x, y = _data(model, 32)
    settings = EvalSettings(model_name="toy-wavelet")
    return evaluate(model, x, y, DETERMINISTIC, settings, surrogate=teacher(), progress=False)


def test_fixed_front_end_models_are_attacked_under_every_gradient_mode(
    frontend_run: EvaluationResult,
) -> None:
    r = frontend_run.records
    assert set(r["grad_mode"]) == {"exact", "blocked", "bpda"}
    s = frontend_run.summary()
    assert set(s["grad_mode"]) == {"exact", "blocked", "bpda", "worst"}

    def acc(mode: str, attack: str, eps: float) -> float:
        row = s[(s["grad_mode"] == mode) & (s["attack"] == attack) & np.isclose(s["eps"], eps)]
        return float(row["robust_accuracy"].item())

    # zero gradient: PGD under 'blocked' is no stronger than under exact gradients, and the per-mode worst row
    # is the minimum over modes
    assert acc("blocked", "pgd_linf", 0.15) >= acc("exact", "pgd_linf", 0.15)
    for attack, eps in [("pgd_linf", 0.15), (WORST, 0.15), (WORST, 0.5)]:
        assert (
            acc("worst", attack, eps)
            <= min(acc(m, attack, eps) for m in ("exact", "blocked", "bpda")) + 1e-12
        )
    # shared (gradient-free) attacks give each mode the same outcome wherever the point was attacked in it
    shared = r[r["attack"].isin(["noise_u", "transfer"]) & r["attacked"]]
    piv = shared.pivot_table(
        index=["attack", "eps", "example_id"], columns="grad_mode", values="correct", aggfunc="first"
    )
    for a_mode in ("blocked", "bpda"):
        both = piv[["exact", a_mode]].dropna()
        assert (both["exact"] == both[a_mode]).all()
    assert frontend_run.meta["attacks"]["noise_u"]["grad_modes"].startswith("shared")
    # blocked: the gradient is structurally zero, so PGD ran one step (identical result, see test_attack_runners)
    notes = {
        t["grad_mode"]: t.get("note")
        for t in frontend_run.meta["models"]["toy-wavelet"]["timing"]
        if t["attack"] == "pgd_linf"
    }
    assert notes["blocked"] and not notes["exact"] and not notes["bpda"]
    assert frontend_run.robust_accuracy("Linf", 0.15) == acc("worst", WORST, 0.15)
    assert frontend_run.robust_accuracy("Linf", 0.15, grad_mode="blocked") == acc("blocked", WORST, 0.15)
    with pytest.raises(ValueError, match="not evaluated"):
        frontend_run.robust_accuracy("Linf", 0.1)


def test_models_without_front_end_run_exact_only(cnn_runs: dict[str, EvaluationResult]) -> None:
    assert set(cnn_runs["skip"].records["grad_mode"]) == {"exact"}
    with pytest.raises(ValueError, match="does not offer"):  # a mode it lacks is refused, never dropped
        evaluate(
            small_cnn(),
            toy_data(4),
            torch.zeros(4, dtype=torch.long),
            DETERMINISTIC.select(["fgsm"]),
            EvalSettings(grad_modes=("exact", "blocked")),
            progress=False,
        )


def test_meta_records_provenance_hyperparameters_and_timing(cnn_runs: dict[str, EvaluationResult]) -> None:
    meta = cnn_runs["skip"].meta
    assert {"git_revision", "libraries"} <= set(meta["provenance"])
    assert "torchattacks" in meta["provenance"]["libraries"]
    assert meta["seeds"]["attack_seed"] == 3 and meta["n_examples"] == N
    assert meta["suite"]["name"] == "det"
    assert meta["attacks"]["pgd_linf"]["params"] == {
        "steps": 4,
        "rel_step_size": 0.4,
        "restarts": 2,
        "random_start": True,
        "loss": "ce",  # the defaults of the options added later are recorded too
        "eot_iter": 1,
    }
    assert meta["attacks"]["pgd_linf"]["backend"] == "builtin"
    assert meta["dataset"]["eps_key"] == "default" and meta["dataset"]["eps"]["Linf"] == EPS["Linf"]
    m = meta["models"]["model"]
    assert len(m["param_sha256"]) == 64 and m["surrogate"]["param_sha256"]
    timed = {t["attack"] for t in m["timing"]}
    assert timed == {a.name for a in DETERMINISTIC.attacks}
    assert all(t["seconds"] >= 0 for t in m["timing"])
    assert m["seconds_attacks"] == pytest.approx(sum(t["seconds"] for t in m["timing"]), abs=1e-3)


def test_transfer_without_surrogate_is_skipped_and_said_so() -> None:
    model = small_cnn()
    x, y = _data(model, 8)
    r = evaluate(model, x, y, DETERMINISTIC.select(["transfer"]), progress=False)
    assert "transfer" not in set(r.records["attack"])
    assert r.meta["attacks"]["transfer"]["skipped"] == "no surrogate model given"


def test_killed_runs_resume_from_saved_chunks(tmp_path) -> None:
    model = small_cnn()
    x, y = _data(model, 16)
    suite = DETERMINISTIC.select(["noise_u", "pgd_linf"])
    kw = {"progress": False, "cache_dir": tmp_path / "chunks"}
    first = evaluate(model, x, y, suite, **kw)
    assert first.meta["models"]["model"]["resumed_chunks"] == 0
    chunk_files = sorted(p.name for p in (tmp_path / "chunks").glob("*.json"))
    assert chunk_files == ["model__noise_u__shared.json", "model__pgd_linf__exact.json"]
    # simulate a kill during pgd_linf: its chunk never got its completion marker
    (tmp_path / "chunks" / "model__pgd_linf__exact.json").unlink()
    second = evaluate(model, x, y, suite, **kw)
    assert second.meta["models"]["model"]["resumed_chunks"] == 1
    pd.testing.assert_frame_equal(first.records, second.records)
    third = evaluate(model, x, y, suite, **kw)
    assert third.meta["models"]["model"]["resumed_chunks"] == 2
    pd.testing.assert_frame_equal(first.records, third.records)
    # a different configuration (seed) never reuses old chunks
    other = evaluate(model, x, y, suite, EvalSettings(seed=1), **kw)
    assert other.meta["models"]["model"]["resumed_chunks"] == 0


def test_budget_violations_stop_the_run_naming_the_attack(monkeypatch: pytest.MonkeyPatch) -> None:
    def rogue(request):  # type: ignore[no-untyped-def]
        return RunOutput((request.images + 2 * request.eps).clamp(0, 1))

    engine = evaluator
    registered = engine.get_runner

    def get_runner(family: str, backend: str) -> RunnerSpec:
        if (family, backend) == ("fgsm", "foolbox"):
            return RunnerSpec(family, backend, rogue, True)
        return registered(family, backend)

    monkeypatch.setattr(engine, "get_runner", get_runner)
    model = small_cnn()
    x, y = _data(model, 8)
    with pytest.raises(BudgetViolation, match="'fgsm \\(foolbox\\)'"):
        evaluate(model, x, y, DETERMINISTIC.select(["fgsm"]), EvalSettings(backend="foolbox"), progress=False)


def test_cross_check_runs_the_other_backends_on_the_same_points() -> None:
    model = small_cnn()
    x, y = _data(model, 24)
    suite = DETERMINISTIC.select(["fgsm", "pgd_linf"])
    r = evaluate(model, x, y, suite, EvalSettings(cross_check="all"), progress=False)
    xc = r.crosscheck()
    assert set(zip(xc["attack"], xc["backend"])) == {
        ("fgsm", "foolbox"),
        ("fgsm", "builtin"),
        ("pgd_linf", "torchattacks"),
        ("pgd_linf", "foolbox"),
    }
    prim = r.records[r.records["attacked"]].groupby(["attack", "eps"]).size()
    for _, row in xc.iterrows():
        assert row["n_points"] == prim[(row["attack"], row["eps"])]
    fgsm = xc[xc["attack"] == "fgsm"]
    assert (fgsm["n_disagree"] == 0).all()  # three implementations of the same formula
    assert (xc["difference"].abs() <= 0.25).all()
    # the other back-ends' runs are records of attacks name@backend
    crossed = r.records[r.records["attack"].str.contains("@", regex=False)]
    assert set(zip(crossed["attack"], crossed["backend"])) == {
        ("fgsm@foolbox", "foolbox"),
        ("fgsm@builtin", "builtin"),
        ("pgd_linf@torchattacks", "torchattacks"),
        ("pgd_linf@foolbox", "foolbox"),
    }


def test_every_break_counts_whichever_back_end_found_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """A primary back-end that finds nothing (it returns the clean image) and a cross-checking one that
    works: the worst case is the union, so the cross-check's breaks alone make it; the table says who found
    them; and a point broken by the cross-check at one eps is not attacked again at a larger one."""
    registered = evaluator.get_runner
    blind = RunnerSpec("pgd", "builtin", lambda request: RunOutput(request.images.clone()), True)

    def get_runner(family: str, backend: str) -> RunnerSpec:
        return blind if (family, backend) == ("pgd", "builtin") else registered(family, backend)

    monkeypatch.setattr(evaluator, "get_runner", get_runner)
    model = small_cnn()
    x, y = _data(model, 24)
    suite = DETERMINISTIC.select(["pgd_linf"])
    r = evaluate(model, x, y, suite, EvalSettings(cross_check="all", skip_broken=True), progress=False)
    rows = r.records
    primary = rows[rows["attack"] == "pgd_linf"]
    assert not (primary["attacked"] & ~primary["correct"]).any()  # the blind back-end broke nothing
    cross = rows[rows["attack"].str.startswith("pgd_linf@")]
    broken = cross[cross["attacked"] & ~cross["correct"]]
    assert len(broken) > 0
    for eps in sorted(set(rows.loc[rows["threat"] == "Linf", "eps"])):
        by_cross = set(broken.loc[broken["eps"] <= eps + 1e-12, "example_id"])
        clean = set(rows.loc[(rows["attack"] == "clean") & rows["correct"], "example_id"])
        flags = robust_flags(rows, "Linf", eps)
        assert set(flags[flags].index) == clean - by_cross, eps
    first = min(broken["eps"])
    first_broken = broken.loc[broken["eps"] == first, "example_id"]
    later = primary[(primary["eps"] > first) & primary["example_id"].isin(first_broken)]
    assert len(later) and not later["attacked"].any()  # skipped: already broken by the cross-check
    agreement = r.crosscheck()
    assert (agreement["n_only_primary"] == 0).all() and agreement["n_only_backend"].sum() == len(broken)
    # 'headline' cross-checks the middle budget of the grid only
    head = evaluate(model, x, y, suite, EvalSettings(cross_check="headline"), progress=False)
    assert set(head.records.loc[head.records["attack"].str.contains("@", regex=False), "eps"]) == {
        middle_budget(EPS["Linf"])
    }


def test_input_validation() -> None:
    model = small_cnn()
    with pytest.raises(ValueError, match="\\[0,1\\]"):
        evaluate(model, toy_data(2) * 2, torch.zeros(2, dtype=torch.long), "smoke", progress=False)
    with pytest.raises(ValueError, match="labels"):
        evaluate(model, toy_data(2), torch.zeros(3, dtype=torch.long), "smoke", progress=False)
    with pytest.raises(ValueError, match="backend"):
        evaluate(
            model,
            toy_data(2),
            torch.zeros(2, dtype=torch.long),
            "smoke",
            EvalSettings(backend="cleverhans"),
            progress=False,
        )
    with pytest.raises(ValueError, match="sqrt"):
        big = parse_suite(
            {"eps": {"default": {"L2": [9.0]}}, "attack": [{"name": "p", "family": "pgd", "threat": "L2"}]}
        )
        evaluate(model, toy_data(2), torch.zeros(2, dtype=torch.long), big, progress=False)


class CancellingLinear(torch.nn.Module):
    """logits = (x W1) W2 - x (W1 W2) + x V with V zero on half the pixels: the first two terms cancel in real
    arithmetic, so on those pixels the input gradient is float rounding alone, and its sign follows the scale
    of the loss (torchattacks' batch-mean 1/B). A model whose attack points show any dependence on the batch."""

    def __init__(self) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.w1 = torch.nn.Parameter(torch.randn(64, 32, generator=g))
        self.w2 = torch.nn.Parameter(torch.randn(32, 10, generator=g))
        v = torch.randn(64, 10, generator=g)
        v[32:] = 0.0
        self.v = torch.nn.Parameter(v)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        f = x.flatten(1)
        return (f @ self.w1) @ self.w2 - f @ (self.w1 @ self.w2) + f @ self.v


def test_batch_mean_library_attacks_do_not_depend_on_batch_size_or_shard() -> None:
    import torchattacks

    model = CancellingLinear().eval()
    x = toy_data(40, seed=1)
    y = labelled(model, x)
    # the premise: torchattacks' FGSM on the same rows returns other points in another batch size
    alone = torchattacks.FGSM(model, eps=0.1)(x[:7], y[:7])
    assert not torch.equal(alone, torchattacks.FGSM(model, eps=0.1)(x, y)[:7])
    suite = parse_suite(
        {
            "name": "mean-loss",
            "eps": {"default": {"Linf": [0.1]}},
            "attack": [
                {"name": "clean", "family": "clean"},
                {"name": "fgsm", "family": "fgsm", "threat": "Linf", "backend": "torchattacks"},
                {"name": "mifgsm", "family": "mifgsm", "threat": "Linf", "steps": 2},
            ],
        }
    )
    settings = EvalSettings(skip_broken=False)

    def run(n: int, batch_size: int) -> pd.DataFrame:
        r = evaluate(model, x[:n], y[:n], suite, settings, batch_size=batch_size, progress=False).records
        return r[r["attack"] != "clean"].reset_index(drop=True)

    whole, batched, shard = run(40, 40), run(40, 7), run(20, 20)
    for col in ("attack", "example_id", "correct", "pred", "norm", "loss_final"):
        pd.testing.assert_series_equal(batched[col], whole[col])
        pd.testing.assert_series_equal(
            shard[col], whole[whole["example_id"] < 20].reset_index(drop=True)[col]
        )
