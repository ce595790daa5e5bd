"""Saved adversarial examples (attack --save-adversarial), their re-audit (report reaudit) and the
leaderboard export (report export): checked against the records with independent recomputations.

The models, data and suite are the sharding tests' (tests/support/shard_models.py: a fixed Haar front-end + a
per-patch head, trained on the synthetic data set; 43 examples in seeding blocks of 8, Linf budgets 0.05 and
0.25), trained by this folder's conftest.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from safetensors.torch import load_file

from robustbench_wave import attack, attackrun, report
from robustbench_wave.attacks import perturbation_norm
from robustbench_wave.data import load_split, to_float
from robustbench_wave.evaluation.adversarial import ADVERSARIAL_DIR, read_set, write_set
from robustbench_wave.evaluation.records import RECORDS_FILE, read_run
from robustbench_wave.reporting.export import export_eps
from robustbench_wave.training import checkpoint
from tests.support.shard_models import N, attack_args, load_trained, run_dir, use_tiny_models

ADV_FILE = f"{ADVERSARIAL_DIR}/tiny.safetensors"


def _clean_images() -> tuple[torch.Tensor, torch.Tensor]:
    images, labels, _ = load_split("synthetic", "test")
    return to_float(images[:N]), torch.as_tensor(labels[:N]).long()


@pytest.fixture(scope="module")
def saved_run(weights: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The one-process run of the conftest's reference, with --save-adversarial."""
    out = tmp_path_factory.mktemp("saved")
    with pytest.MonkeyPatch.context() as mp:
        use_tiny_models(mp, weights)
        assert attack.main(attack_args(out, weights, "--no-diagnostics", "--save-adversarial")) == 0
    return run_dir(out)


def _broken(records: pd.DataFrame, mode: str, threat: str, eps: float) -> set[int]:
    """Independent of metrics: clean-correct examples with a wrong row of ``threat`` at eps' <= eps."""
    rows = records[records["grad_mode"] == mode]
    clean = rows[rows["threat"] == "none"].set_index("example_id")["correct"]
    at = rows[(rows["threat"] == threat) & (rows["eps"] <= eps + 1e-12)]
    wrong = set(at.loc[~at["correct"].astype(bool), "example_id"].astype(int))
    return {int(i) for i in clean.index[clean.to_numpy(bool)]} & wrong


# ---------------------------------------------------------------------------------------- saving


@pytest.mark.slow
def test_saved_examples_match_the_records(saved_run: Path, reference: bytes) -> None:
    assert (saved_run / RECORDS_FILE).read_bytes() == reference  # the flag moves no record
    records, meta = read_run(saved_run)
    assert meta["adversarial"]["files"]["tiny"]["file"] == ADV_FILE
    assert json.loads((saved_run / "config.json").read_text())["save_adversarial"] is True
    tensors = load_file(saved_run / ADV_FILE)
    kept, header = read_set(saved_run / ADV_FILE)
    assert [s["attack"] for s in header["sources"]] == sorted(s["attack"] for s in header["sources"])
    x, _ = _clean_images()
    by_row = records.set_index(["grad_mode", "attack", "eps", "example_id"])
    n = 0
    for g in header["groups"]:
        p, key = g["prefix"], (g["grad_mode"], g["threat"], g["eps"])
        ids, adv = tensors[f"{p}/example_id"], tensors[f"{p}/x"]
        assert ids.dtype == torch.int64 and adv.dtype == torch.float32 and adv.shape[1:] == x.shape[1:]
        assert ids.tolist() == sorted(set(ids.tolist()))  # ascending, each example once
        for i, src, point in zip(ids.tolist(), tensors[f"{p}/source"].tolist(), adv):
            row = by_row.loc[(key[0], header["sources"][src]["attack"], key[2], i)]
            assert row["attacked"] and not row["correct"]  # the saved point is a break the records hold
            norm = float(perturbation_norm((point - x[i])[None], key[1])[0])
            assert norm == row["norm"]  # bit for bit the point whose norm was recorded
        n += len(ids)
    assert n == len(kept) == meta["adversarial"]["files"]["tiny"]["n"] > 0
    for mode in ("exact", "blocked", "bpda"):
        for eps in (0.05, 0.25):
            covered = set(kept.worst_case(mode, "Linf", eps).example_id.tolist())
            assert covered == _broken(records, mode, "Linf", eps)


@pytest.mark.slow
def test_runs_without_the_flag_are_unchanged(saved_run: Path, tiny: Path, tmp_path: Path) -> None:
    args = attack_args(
        tmp_path, tiny, "--no-diagnostics", "--attacks", "noise_uniform,fgsm", "--surrogate", "none"
    )
    assert attack.main(args) == 0
    run = run_dir(tmp_path)
    assert "adversarial" not in json.loads((run / "meta.json").read_text())
    assert "save_adversarial" not in json.loads((run / "config.json").read_text())
    assert not (run / ADVERSARIAL_DIR).exists()
    with pytest.raises(SystemExit, match=r"holds no saved adversarial examples.*--save-adversarial"):
        report.main(["reaudit", str(run)])
    # turning the flag on is another configuration: --overwrite replaces the run, adversarial/ included
    with pytest.raises(SystemExit, match="different configuration"):
        attack.main([*args, "--save-adversarial"])
    assert attack.main([*args, "--save-adversarial", "--overwrite"]) == 0
    assert (run / ADV_FILE).exists()
    assert attack.main([*args, "--overwrite"]) == 0
    assert not (run / ADVERSARIAL_DIR).exists()


@pytest.mark.slow
def test_shards_and_resume_save_the_single_process_file(
    saved_run: Path,
    tiny: Path,
    tmp_path: Path,
) -> None:
    single = (saved_run / ADV_FILE).read_bytes()
    for i in (0, 1):
        assert attack.main(attack_args(tmp_path, tiny, "--shard", f"{i}/2", "--save-adversarial")) == 0
    run = run_dir(tmp_path)
    assert (run / "shards" / "1-of-2" / ADV_FILE).exists()
    assert report.main(["merge", str(run), "--no-diagnostics"]) == 0
    assert (run / ADV_FILE).read_bytes() == single
    # resume: a chunk whose adversarial examples are missing is computed again; the file does not change
    chunks = run / "shards" / "0-of-2" / "chunks"
    sorted(chunks.glob("*.adv.safetensors"))[2].unlink()
    sorted(chunks.glob("*.json"))[5].unlink()
    args = [*attack_args(tmp_path, tiny, "--shard", "0/2", "--save-adversarial", "--batch-size", "7")]
    assert attack.main(args) == 0
    meta = json.loads((run / "shards" / "0-of-2" / "meta.json").read_text())
    assert meta["models"]["tiny"]["resumed_chunks"] == 10
    assert report.main(["merge", str(run), "--no-diagnostics"]) == 0
    assert (run / ADV_FILE).read_bytes() == single


# -------------------------------------------------------------------------------------- re-audit


@pytest.mark.slow
def test_reaudit_reproduces_the_recorded_predictions(saved_run: Path, tiny: Path, capsys) -> None:
    assert report.main(["reaudit", str(saved_run), "--batch-size", "3"]) == 0
    out = capsys.readouterr().out
    assert "re-audit passed" in out
    assert report.main(["reaudit", str(saved_run)]) == 0
    table = attackrun.reaudit_run(saved_run, Path("results"), "cpu")[0]
    assert set(table["grad_mode"]) == {"exact", "blocked", "bpda"} and table["n_checked"].sum() > 0
    assert (table[["n_budget_violations", "n_pred_mismatches", "n_unmatched", "n_missing"]] == 0).all().all()


def _tampered(saved_run: Path, tmp_path: Path) -> Path:
    """A copy of the run whose first saved point of the largest group is pushed beyond its budget, the
    digest in meta.json updated (so only the re-audit can notice)."""
    import shutil

    run = tmp_path / "run"
    shutil.copytree(saved_run, run)
    kept, _ = read_set(run / ADV_FILE)
    key = max(kept.keys(), key=lambda k: len(kept.group(k).example_id))
    g = kept.group(key)
    x = g.x.clone()
    x[0] = (x[0] + 2 * key[2]).clamp(0, 1)
    kept._parts[key] = [(g.example_id, x, g.source)]
    write_set(kept, run / ADV_FILE)
    meta = json.loads((run / "meta.json").read_text())
    meta["adversarial"]["files"]["tiny"]["sha256"] = hashlib.sha256((run / ADV_FILE).read_bytes()).hexdigest()
    (run / "meta.json").write_text(json.dumps(meta))
    return run


@pytest.mark.slow
def test_reaudit_catches_a_point_beyond_its_budget(
    saved_run: Path, tiny: Path, tmp_path: Path, capsys
) -> None:
    run = _tampered(saved_run, tmp_path)
    assert report.main(["reaudit", str(run)]) == 1
    assert "re-audit FAILED: 1 budget violations" in capsys.readouterr().err
    # an edited file that meta.json does not describe is refused before anything is classified
    (run / ADV_FILE).write_bytes((run / ADV_FILE).read_bytes()[:-4] + b"\0\0\0\0")
    with pytest.raises(SystemExit, match=r"differs from the file meta\.json describes"):
        report.main(["reaudit", str(run)])


@pytest.mark.slow
def test_reaudit_catches_changed_weights(
    saved_run: Path,
    tiny: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys,
) -> None:
    def changed(*args, **kwargs):  # type: ignore[no-untyped-def]
        model, meta = load_trained(*args, **kwargs)
        with torch.no_grad():
            model[1].mlp[2].weight.mul_(-1.0)  # same checkpoint name and hash, other weights
        return model, meta

    monkeypatch.setattr(checkpoint, "load_trained", changed)
    assert report.main(["reaudit", str(saved_run)]) == 1
    err = capsys.readouterr().err
    assert "weights differ from the attacked ones" in err and "pred mismatches" in err


# ---------------------------------------------------------------------------------------- export


def test_export_eps_follows_robustbench() -> None:
    assert export_eps("cifar10", "Linf", [2 / 255, 4 / 255, 8 / 255])[0] == 8 / 255
    assert export_eps("cifar10", "L2", [0.25, 0.5])[0] == 0.5
    assert export_eps("cifar10", "Linf", [1 / 255, 2 / 255])[0] == 1 / 255  # standard not attacked: middle
    assert export_eps("synthetic", "Linf", [0.05, 0.25])[0] == 0.05


@pytest.mark.slow
def test_model_info_json_against_the_records(saved_run: Path, tmp_path: Path) -> None:
    assert report.main(["export", str(saved_run), "--out", str(tmp_path)]) == 0
    info = json.loads((tmp_path / "model_info" / "synthetic" / "Linf" / "tiny.json").read_text())
    records, meta = read_run(saved_run)
    rows = records[records["model"] == "tiny"]
    clean = rows[rows["threat"] == "none"].groupby("example_id")["correct"].all()
    at = rows[(rows["threat"] == "Linf") & (rows["eps"] <= 0.05 + 1e-12)]
    held = at.groupby("example_id")["correct"].all().reindex(clean.index, fill_value=True)
    assert info["clean_acc"] == f"{100 * clean.mean():.2f}"
    assert info["external"] == info["reported"] == f"{100 * (clean & held).mean():.2f}"
    assert "autoattack_acc" not in info  # no FAB-T / APGD-T ran: not AutoAttack
    for field in ("name", "authors", "link", "venue", "architecture", "additional_data", "footnote"):
        assert field in info
    assert (info["dataset"], info["threat_model"], info["eps"]) == ("synthetic", "Linf", "0.05")
    # the saved run ran no gradient-masking checklist: its numbers are no verified robust accuracy (issue 39)
    assert info["number_forward_passes"] == 1 and info["unreliable"] is True
    extra = info["robustbench_wave"]
    config_hash = hashlib.sha256(json.dumps(meta["run"]["config"], sort_keys=True).encode()).hexdigest()
    assert extra["runs"][0]["config_sha256"] == config_hash
    assert extra["runs"][0]["git_revision"] == meta["provenance"]["git_revision"]
    assert {a["name"] for a in extra["attacks"]} == set(at.loc[at["threat"] == "Linf", "attack"])
    versions = {a["backend"]: a["versions"] for a in extra["attacks"]}
    assert versions["torchattacks"] == [meta["provenance"]["libraries"]["torchattacks"]]
    assert extra["n"] == N


@pytest.mark.slow
def test_transfer_matrix_against_the_records(tiny: Path, tmp_path: Path) -> None:
    runs = []
    for sur in ("tiny", "tiny2"):
        args = attack_args(
            tmp_path, tiny, "--model", "tiny2", "--attacks", "transfer_pgd_linf", "--surrogate", sur
        )
        args = [*args, "--run-name", f"from-{sur}", "--no-diagnostics", "--cross-check", "off"]
        assert attack.main(args) == 0
        runs.append(tmp_path / "attack" / "synthetic" / f"from-{sur}")
    out = tmp_path / "export"
    assert report.main(["export", *map(str, runs), "--out", str(out)]) == 0
    matrix = pd.read_csv(out / "transfer_matrix.csv", index_col=[0, 1, 2])
    long = pd.read_csv(out / "transfer.csv")
    assert matrix.shape == (2, 2) and list(matrix.columns) == ["tiny", "tiny2"]
    for sur, run in zip(("tiny", "tiny2"), runs):
        records, _ = read_run(run)
        for target in ("tiny", "tiny2"):
            rows = records[(records["model"] == target) & (records["grad_mode"] == "exact")]
            ok = rows[rows["eps"] <= 0.05 + 1e-12].groupby("example_id")["correct"].all()
            assert matrix.loc[("Linf", 0.05, sur), target] == pytest.approx(float(ok.mean()), abs=1e-12)
            cell = long[(long["surrogate"] == sur) & (long["target"] == target)].iloc[0]
            assert bool(cell["white_box"]) == (sur == target) and cell["n_unknown"] == 0
    assert r"\textit" in (out / "transfer_matrix.tex").read_text()
    assert np.isfinite(matrix.to_numpy()).all()


def test_within_budget_agrees_with_the_audit() -> None:
    from robustbench_wave.attacks import BudgetViolation, audit, within_budget

    g = torch.Generator().manual_seed(0)
    x = torch.rand(6, 1, 4, 4, generator=g) * 0.8 + 0.1
    delta = (torch.rand(6, 1, 4, 4, generator=g) * 2 - 1) * 0.05
    delta[2, 0, 0, 0] = 0.2  # beyond Linf 0.1
    adv = x + delta
    adv[4, 0, 1, 1] = 1.5  # outside [0, 1]
    ok = within_budget(x, adv, 0.1, "Linf")
    assert ok.tolist() == [True, True, False, True, False, True]
    audit(x[ok], adv[ok], 0.1, "Linf", "a")  # what passes here passes the audit
    for i in (2, 4):
        with pytest.raises(BudgetViolation):
            audit(x[i : i + 1], adv[i : i + 1], 0.1, "Linf", "a")


def test_transfer_cell_is_empty_when_another_attack_broke_a_point_first(tmp_path: Path) -> None:
    """Example 0 fell to PGD before the transfer ran, so the transfer's robust accuracy is unknown: the cell
    is NaN with n_unknown = 1 (example 2 fell to the transfer, example 1 held)."""
    from robustbench_wave.evaluation.records import make_frame
    from robustbench_wave.reporting.export import transfer_table
    from robustbench_wave.reporting.runs import RunFolder

    def rows(attack: str, family: str, kind: str, threat: str, eps: float, attacked, correct) -> pd.DataFrame:  # type: ignore[no-untyped-def]
        cols = dict(
            model="m", dataset="synthetic", grad_mode="exact", attack=attack, family=family, kind=kind
        )
        cols |= dict(threat=threat, eps=eps, backend="builtin", example_id=np.arange(3), label=np.zeros(3))
        pred = np.where(np.asarray(correct), 0, 1).astype(object)
        pred[~np.asarray(attacked)] = None
        cols |= dict(
            pred=pred, correct=correct, norm=0.0, attacked=attacked, correct_last=None, loss_final=0.0
        )
        return make_frame(cols, 3)

    records = pd.concat(
        [
            rows("clean", "clean", "clean", "none", 0.0, [True] * 3, [True] * 3),
            rows("pgd", "pgd", "white-box", "Linf", 0.1, [True] * 3, [False, True, True]),
            rows("transfer", "transfer", "transfer", "Linf", 0.1, [False, True, True], [False, True, False]),
        ],
        ignore_index=True,
    )
    meta = {
        "dataset": {"name": "synthetic"},
        "data_sha256": "d",
        "models": {"m": {"param_sha256": "w", "surrogate": {"name": "s", "param_sha256": "v"}}},
    }
    cell = transfer_table([RunFolder(tmp_path, records, meta)]).iloc[0]
    assert (cell["surrogate"], cell["target"], cell["n_unknown"], cell["n_robust"]) == ("s", "m", 1, 1)
    assert np.isnan(cell["robust_accuracy"]) and not cell["white_box"]
    records.loc[records["attack"] == "transfer", "attacked"] = True  # run alone: every point attacked
    assert transfer_table([RunFolder(tmp_path, records, meta)]).iloc[0]["robust_accuracy"] == 1 / 3
