"""A user's own defence in the gallery's table: ``gallery all --defence FILE.py:FACTORY --weights W
--baseline FILE.py:FACTORY --baseline-weights W`` attacks it under both protocols in the same runs as its
undefended twin, and its row is judged against the twin on the same images; bad input is refused first."""

from __future__ import annotations

import json
import math
import re
import shlex
import textwrap
from pathlib import Path

import pandas as pd
import pytest
import torch
from safetensors.torch import save_file
from scipy.stats import binomtest

from robustbench_wave import gallery
from robustbench_wave.defenses import AttackOptions, build_table
from robustbench_wave.defenses.protocols import ADAPTIVE, NAIVE, own_attack_command
from robustbench_wave.defenses.table import judge_broken, title
from robustbench_wave.evaluation.metrics import paired_table, robust_flags, wilson_interval
from robustbench_wave.evaluation.trust import Standing, Trust
from robustbench_wave.models.external import ExternalSpec
from robustbench_wave.reporting.runs import RunFolder, load_run
from tests.support.gallery_in_process import attack_in_process

#: The user's file: 4-bit rounding in front of a tiny CNN, the CNN alone (same ``net.*`` weights), and two
#: baselines that do not fit the synthetic data (5 classes; a head sized for 28x28 images).
DEFENCE_PY = """
from collections import OrderedDict

import torch
from torch import nn


class TinyCNN(nn.Module):
    def __init__(self, num_classes=10, pooled=4):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 8, 5, stride=2, padding=2), nn.ReLU(), nn.Conv2d(8, 16, 5, stride=2, padding=2),
            nn.ReLU(),
        )
        self.pool = nn.AdaptiveAvgPool2d(pooled) if pooled else nn.Identity()
        self.head = nn.Sequential(nn.Flatten(), nn.Linear(16 * (pooled or 7) ** 2, num_classes))

    def forward(self, x):
        return self.head(self.pool(self.features(x)))


class Quantise(nn.Module):
    def forward(self, x):
        return torch.round(x * 15) / 15


def quantised_cnn():
    return nn.Sequential(OrderedDict(quantise=Quantise(), net=TinyCNN()))


def plain_cnn():
    return nn.Sequential(OrderedDict(net=TinyCNN()))


def five_classes():
    return nn.Sequential(OrderedDict(net=TinyCNN(num_classes=5)))


def for_28px():
    return nn.Sequential(OrderedDict(net=TinyCNN(pooled=0)))
"""

ATTACK_ARGS = "--attacks clean,fgsm,pgd_linf,transfer_pgd_linf --n-diagnostics 8 --diagnostics-steps 2 --cross-check off"
SMALL = ["--dataset", "synthetic", "--n-examples", "16", "--suite", "smoke", "--no-progress"]


def _user_files(root: Path) -> tuple[Path, Path]:
    """The defence file and the CNN's weights, trained a little on the synthetic gratings (both factories
    load them: the same ``net.*`` keys)."""
    root.mkdir(parents=True, exist_ok=True)
    source = root / "mydefence.py"
    source.write_text(textwrap.dedent(DEFENCE_PY))
    namespace: dict = {}
    exec(compile(source.read_text(), str(source), "exec"), namespace)
    from robustbench_wave.data import load_split

    images, labels, _ = load_split("synthetic", "train")
    x, y = images[:1000].float() / 255, labels[:1000]
    torch.manual_seed(0)
    model = namespace["plain_cnn"]()
    optimizer = torch.optim.Adam(model.parameters(), 3e-3)
    for _ in range(20):  # about 70% clean: attacks at eps 0.03 have points to break
        batch = torch.randint(0, 1000, (64,))
        loss = torch.nn.functional.cross_entropy(model(x[batch]), y[batch])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    weights = root / "net.safetensors"
    save_file(model.state_dict(), str(weights))
    return source, weights


def _own_args(source: Path, weights: Path, baseline: str | None = "plain_cnn") -> list[str]:
    args = ["--defence", f"{source}:quantised_cnn", "--weights", str(weights)]
    if baseline:
        args += ["--baseline", f"{source}:{baseline}", "--baseline-weights", str(weights)]
    return args


@pytest.mark.slow
def test_a_users_defence_is_tabulated_against_its_twin_in_the_same_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source, weights = _user_files(tmp_path / "user")
    # the table of the runs, not the attack command's process (test_gallery_end_to_end starts one): run here
    launched = attack_in_process(monkeypatch)
    out = tmp_path / "gallery"
    argv = [
        "all",
        "--results-dir",
        str(out),
        *SMALL,
        *_own_args(source, weights),
        "--attack-args",
        ATTACK_ARGS,
    ]
    assert gallery.main(argv) == 0
    assert len(launched) == 2  # one attack command per protocol, each with both models
    assert not (out / "weights").exists()  # nothing of the gallery's is trained for a defence of one's own

    defence = ExternalSpec(f"{source}:quantised_cnn").slug
    twin = ExternalSpec(f"{source}:plain_cnn").slug
    table = pd.read_csv(out / "gallery.csv").set_index("defence")
    assert list(table.index) == [defence]
    row = table.loc[defence]
    assert row["adaptive"] <= row["naive"] <= row["exact"]  # BPDA and more attacks never raise the worst case
    assert row["modes_naive"] == "exact" and row["modes_adaptive"] == "bpda+exact"
    assert "gradient_health" in row["checks_naive"]  # rounding hides the gradient

    runs = {
        p: load_run(out / "attack" / "synthetic" / f"{defence}-{p}_smoke_n16_seed0")
        for p in (NAIVE, ADAPTIVE)
    }
    for run in runs.values():  # one run holds both models; the twin crafts the transfer attack
        config = json.loads((run.path / "config.json").read_text())
        assert config["surrogate"] == f"{source}:plain_cnn"
        assert set(run.records["model"]) == {defence, twin}
    records = runs[ADAPTIVE].records
    eps = float(row["eps"])
    ours = robust_flags(records[records["model"] == defence], "Linf", eps)
    theirs = robust_flags(records[records["model"] == twin], "Linf", eps)
    assert row["baseline"] == twin and row["baseline_adaptive"] == pytest.approx(theirs.mean())
    assert row["adaptive"] == pytest.approx(ours.mean())

    # the judgement by hand: the discordant pairs, scipy's exact binomial test, the verdict's rule
    only_ours, only_theirs = int((ours & ~theirs).sum()), int((~ours & theirs).sum())
    p = binomtest(only_ours, only_ours + only_theirs, 0.5).pvalue if only_ours + only_theirs else 1.0
    assert row["paired_p"] == pytest.approx(p)
    diff = (only_ours - only_theirs) / len(ours)
    assert row["paired_diff"] == pytest.approx(diff)
    # n = 16: a 95% interval narrower than ±10 points is impossible, so only a significant test decides;
    # what the numbers are (the checklist of the run) decides what the table may say of them
    trust = Trust.from_run(runs[ADAPTIVE].meta, runs[ADAPTIVE].diagnostics)
    standing = trust.standing(defence, sorted(set(records[records["model"] == defence]["grad_mode"])))
    base = trust.standing(twin, sorted(set(records[records["model"] == twin]["grad_mode"])))
    assert row["standing"] == standing.value and row["baseline_standing"] == base.value
    if not standing.trusted:  # an upper bound: broken only when it is significantly below a verified twin
        expected = "yes" if p < 0.05 and diff < 0 and base.trusted else standing.value
    elif p < 0.05 and diff < 0:  # less robust: shown only against a twin whose number is no upper bound
        expected = "yes" if base.trusted else "inconclusive"
    else:
        expected = "no" if p < 0.05 and row["paired_low"] > 0.10 else "inconclusive"
    assert row["broken"] == expected
    text = (out / "gallery.txt").read_text()
    assert twin in text and "vs baseline (paired)" in text


def _rows(model: str, mode: str, attack: str, kind: str, broken: set[int], n: int) -> list[dict]:
    threat, eps = ("none", 0.0) if kind == "clean" else ("Linf", 0.03)
    return [
        {"model": model, "grad_mode": mode, "attack": attack, "kind": kind, "threat": threat, "eps": eps,
         "example_id": i, "correct": i not in broken, "attacked": True}
        for i in range(n)
    ]  # fmt: skip


def _run(models: dict[str, set[int]], n: int = 10, checked: bool = True) -> RunFolder:
    """One run of several models: per model, the examples PGD breaks (none is clean-wrong); ``checked``: a
    checklist judged every model and each passed (the verified numbers the comparisons below rest on)."""
    rows = []
    for model, broken in models.items():
        rows += _rows(model, "exact", "clean", "clean", set(), n) + _rows(
            model, "exact", "pgd", "white-box", broken, n
        )
    passed = [{"name": "gradient_health", "grad_mode": "exact", "passed": True}]
    diagnostics = [{"model": m, "checks": passed} for m in models] if checked else []
    return RunFolder(Path("/runs/x"), pd.DataFrame(rows), {}, diagnostics)


def _own_table(ours: set[int], theirs: set[int] | None, n: int = 10) -> pd.Series:
    models = {"mine": ours} | ({"twin": theirs} if theirs is not None else {})
    run = _run(models, n)
    table = build_table(
        {"mine": {NAIVE: run, ADAPTIVE: run}}, own={"mine": "twin" if theirs is not None else None}
    )
    return table.set_index("defence").loc["mine"]


def test_the_broken_judgement_is_the_paired_test_on_the_same_images() -> None:
    # robust on 8/10 vs the twin's 2/10, every discordant pair for the defence: p = 2 / 2^6 = 0.03125
    row = _own_table(ours={8, 9}, theirs=set(range(2, 10)))
    assert row["adaptive"] == 0.8 and row["baseline_adaptive"] == 0.2
    assert row["paired_p"] == pytest.approx(2 / 64) and row["paired_diff"] == pytest.approx(0.6)
    assert row["broken"] == "no" and row["standing"] == "verified"
    low, high = wilson_interval(2, 10)
    assert row["baseline_adaptive_low"] == pytest.approx(low) and row[
        "baseline_adaptive_high"
    ] == pytest.approx(high)
    # the reverse, 1/10 vs 8/10 with seven discordant pairs against it: p = 2 / 2^7, broken
    assert _own_table(ours=set(range(1, 10)), theirs={8, 9})["broken"] == "yes"
    # the same flags on 10 images: neither significant nor provably within ±10 points -> inconclusive
    assert _own_table(ours={1, 2, 3}, theirs={1, 2, 3})["broken"] == "inconclusive"
    # ... and on 400 images the equivalence test decides: broken
    assert _own_table(ours=set(range(200)), theirs=set(range(200)), n=400)["broken"] == "yes"


def test_the_rule_against_a_hand_made_table() -> None:
    assert judge_broken(paired_table(both=2, only_a=6, only_b=0, neither=2)) == "no"
    assert judge_broken(paired_table(both=2, only_a=0, only_b=6, neither=2)) == "yes"
    assert judge_broken(paired_table(both=2, only_a=2, only_b=2, neither=4)) == "inconclusive"
    assert judge_broken(paired_table(both=300, only_a=3, only_b=3, neither=94)) == "yes"  # TOST within ±10
    # the same tables with the defence's numbers upper bounds: never "no"; "yes" only against a verified twin
    up = {"standing": Standing.UNVERIFIED}
    assert judge_broken(paired_table(both=2, only_a=6, only_b=0, neither=2), **up) == "unverified"
    assert judge_broken(paired_table(both=2, only_a=0, only_b=6, neither=2), **up) == "yes"
    assert judge_broken(paired_table(both=300, only_a=3, only_b=3, neither=94), **up) == "yes"
    assert (
        judge_broken(
            paired_table(both=2, only_a=0, only_b=6, neither=2), **up, base_standing=Standing.UNCHECKED
        )
        == "unverified"
    )
    # a verified defence against a baseline that is an upper bound: only an advantage stands
    unsure = {"base_standing": Standing.UNVERIFIED}
    assert judge_broken(paired_table(both=2, only_a=6, only_b=0, neither=2), **unsure) == "no"
    assert judge_broken(paired_table(both=2, only_a=0, only_b=6, neither=2), **unsure) == "inconclusive"


def test_without_a_baseline_the_table_says_nothing_judges_it() -> None:
    row = _own_table(ours={1}, theirs=None)
    assert row["baseline"] == "" and row["broken"] == "no baseline" and math.isnan(row["paired_p"])
    run = _run({"mine": {1}})
    table = build_table({"mine": {NAIVE: run, ADAPTIVE: run}}, own={"mine": None})
    from robustbench_wave.defenses.table import formatted

    assert formatted(table)["broken"].tolist() == ["no baseline"]
    paired = _run({"mine": {1}, "twin": {1, 2}})
    with pytest.raises(ValueError, match=r"also holds \['twin'\].*--baseline"):
        build_table({"mine": {NAIVE: paired, ADAPTIVE: paired}}, own={"mine": None})
    with pytest.raises(ValueError, match="has no records of other"):
        build_table({"mine": {NAIVE: paired, ADAPTIVE: paired}}, own={"mine": "other"})


def test_gallery_rows_are_paired_with_the_cnn_beside_an_own_row() -> None:
    cnn = _run({"cnn": set(range(5))})  # 50%: Wilson [23.7, 76.3]
    bd = _run({"bd": set(range(4))})  # 60%: one more point than the CNN on the same 10 images
    mine = _run({"mine": set(), "twin": set(range(5))})
    runs = {
        "cnn": {NAIVE: cnn, ADAPTIVE: cnn},
        "bit_depth": {NAIVE: bd, ADAPTIVE: bd},
        "mine": {NAIVE: mine, ADAPTIVE: mine},
    }
    table = build_table(runs, own={"mine": "twin"}).set_index("defence")
    assert list(table.index) == ["cnn", "bit_depth", "mine"]
    assert table.loc["bit_depth", "baseline"] == "cnn" and table.loc["bit_depth", "baseline_adaptive"] == 0.5
    # one discordant pair, for the defence: p = 1, and 10 images can show no 10-point rule either way
    assert table.loc["bit_depth", "paired_p"] == pytest.approx(1.0)
    assert table.loc["bit_depth", "broken"] == "inconclusive" and table.loc["cnn", "baseline"] == ""
    assert table.loc["mine", "baseline"] == "twin" and table.loc["mine", "adaptive"] == 1.0
    # 10/10 vs 5/10, five discordant pairs all for the defence: the exact test of no difference gives
    # p = 2 / 2^5 = 0.0625, but the rule asks whether the 95% interval [+11.7, +76.3] clears +10 points: it does
    assert table.loc["mine", "paired_p"] == pytest.approx(2 / 32)
    assert table.loc["mine", "paired_low"] > 0.10 and table.loc["mine", "broken"] == "no"
    with pytest.raises(ValueError, match="undefended CNN"):
        build_table({"bit_depth": runs["bit_depth"], "mine": runs["mine"]}, own={"mine": "twin"})


def test_the_commands_pair_the_defence_with_its_twin(tmp_path: Path) -> None:
    defence, twin = ExternalSpec("/u/d.py:defended", "/u/w"), ExternalSpec("/u/d.py:plain", "/u/w")
    options = AttackOptions(
        tmp_path, dataset="synthetic", n_examples=8, defences=(), own=(defence,), baseline=twin
    )
    naive = own_attack_command(defence, NAIVE, options)
    assert naive[naive.index("--model") : naive.index("--model") + 8] == [
        "--model", "/u/d.py:defended", "--weights", "/u/w", "--model", "/u/d.py:plain", "--weights", "/u/w",
    ]  # fmt: skip
    assert naive[naive.index("--surrogate") + 1] == "/u/d.py:plain"
    assert naive[naive.index("--grad-modes") + 1] == "exact"  # the naive protocol: the exact gradient only
    assert "--grad-modes" not in own_attack_command(defence, ADAPTIVE, options)
    alone = AttackOptions(tmp_path, dataset="synthetic", defences=(), own=(defence,))
    lonely = own_attack_command(defence, NAIVE, alone)
    assert lonely[lonely.index("--surrogate") + 1] == "none" and lonely.count("--model") == 1
    # flags a user wrote go as written
    mine = AttackOptions(
        tmp_path, defences=(), own=(defence,), protocols={NAIVE: ("--grad-modes", "blocked")}
    )
    command = own_attack_command(defence, NAIVE, mine)
    assert command[command.index("--grad-modes") + 1] == "blocked"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--defence", "{src}:no_such_factory", "--weights", "{w}"], "has no attribute 'no_such_factory'"),
        (["--defence", "{root}/missing.py:quantised_cnn", "--weights", "{w}"], "no Python file"),
        (["--defence", "{src}:quantised_cnn"], "no --weights file"),
        (["--defence", "{src}:quantised_cnn", "--weights", "{root}/nope.safetensors"], "does not exist"),
        (
            [
                *["--defence", "{src}:quantised_cnn", "--weights", "{w}"],
                *["--baseline", "{src}:five_classes"],
                *["--baseline-weights", "{w}"],
            ],
            r"--baseline \S+five_classes: weights file .* does not fit",
        ),
        (
            [*["--defence", "{src}:quantised_cnn", "--weights", "{w}"], *["--baseline", "{src}:for_28px"]],
            "--baseline .*for_28px: it has .* weight tensors but no --weights",
        ),
        (["--baseline", "{src}:plain_cnn", "--defence", "jpeg"], "--baseline .* undefended twin"),
        (
            [*["--defence", "{src}:quantised_cnn", "--weights", "{w}"], "--baseline", "cnn"],
            "is not FILE.py:FACTORY",
        ),
        (["--defence", "jpeg", "--weights", "{w}"], "must follow the FILE.py:FACTORY --defence"),
        (
            ["--defence", "{src}:quantised_cnn", "--weights", "{w}", "--baseline-weights", "{w}"],
            "without --baseline",
        ),
    ],
)
def test_bad_input_is_one_line_before_any_write(tmp_path: Path, args: list[str], message: str) -> None:
    root = tmp_path / "user"
    root.mkdir()
    (root / "mydefence.py").write_text(textwrap.dedent(DEFENCE_PY))
    model_ns: dict = {}
    exec(textwrap.dedent(DEFENCE_PY), model_ns)
    save_file(model_ns["plain_cnn"]().state_dict(), str(root / "net.safetensors"))
    argv = [a.format(src=root / "mydefence.py", w=root / "net.safetensors", root=root) for a in args]
    out = tmp_path / "gallery"
    with pytest.raises(SystemExit) as err:
        gallery.main(["all", "--results-dir", str(out), "--dataset", "synthetic", *argv])
    assert err.value.code != 0
    assert not out.exists()


def test_a_baseline_of_other_classes_or_image_size_is_refused_by_name(tmp_path: Path, capsys) -> None:
    root = tmp_path / "user"
    root.mkdir()
    (root / "mydefence.py").write_text(textwrap.dedent(DEFENCE_PY))
    ns: dict = {}
    exec(textwrap.dedent(DEFENCE_PY), ns)
    for name in ("plain_cnn", "five_classes", "for_28px"):
        save_file(ns[name]().state_dict(), str(root / f"{name}.safetensors"))
    src, out = root / "mydefence.py", tmp_path / "gallery"
    base = ["attack", "--results-dir", str(out), "--dataset", "synthetic", "--defence", f"{src}:quantised_cnn",
            "--weights", str(root / "plain_cnn.safetensors")]  # fmt: skip
    for name, message in (
        ("five_classes", r"returned logits of shape \(8, 5\) .* needs \(8, 10\)"),
        ("for_28px", "cannot take the data set's images"),
    ):
        with pytest.raises(SystemExit, match=f"--baseline {src}:{name}: .*{message}"):
            gallery.main(
                [
                    *base,
                    "--baseline",
                    f"{src}:{name}",
                    "--baseline-weights",
                    str(root / f"{name}.safetensors"),
                ]
            )
    assert not out.exists()


DOCS = Path(__file__).resolve().parents[2] / "docs"


def _gallery_commands(page: Path) -> list[list[str]]:
    """Every ``python -m robustbench_wave.gallery`` line of the page's bash blocks, as argument lists."""
    out = []
    for block in re.findall(r"```bash\n(.*?)```", page.read_text(encoding="utf-8"), re.DOTALL):
        for line in block.replace("\\\n", " ").splitlines():
            words = shlex.split(line, comments=True)
            if words[:3] == ["python", "-m", "robustbench_wave.gallery"]:
                out.append(words[3:])
    return out


@pytest.mark.parametrize("page", ["bring-your-own-model.md", "gallery.md"])
def test_the_docs_own_defence_command_parses_in_the_current_vocabulary(page: str, caplog) -> None:
    commands = [c for c in _gallery_commands(DOCS / page) if "--baseline" in c]
    assert commands, f"docs/{page} shows no gallery command with --baseline"
    for argv in commands:
        args = gallery.get_args_parser().parse_args(argv)
        assert args.weights and args.baseline and args.baseline_weights
    assert not [r for r in caplog.records if r.levelname == "WARNING"]  # no deprecated spelling


#: The gallery table's columns (own defences add none): a table of the gallery alone has exactly them.
GALLERY_COLUMNS = [
    "defence", "source", "broken_by", "threat", "eps", "model", "n",
    *[f"{c}{s}" for c in ("clean", "exact", "naive", "adaptive") for s in ("", "_low", "_high")],
    "modes_naive", "modes_adaptive", "checks_naive", "checks_adaptive", "standing", "untrusted_modes",
    "baseline", "baseline_adaptive", "baseline_adaptive_low", "baseline_adaptive_high", "baseline_standing",
    "paired_diff", "paired_low", "paired_high", "paired_p", "outcome", "broken", "within_undefended",
]  # fmt: skip


def test_a_table_of_the_gallery_alone_pairs_every_defence_with_the_cnn() -> None:
    cnn, bd = _run({"cnn": set(range(5))}), _run({"bd": set(range(4))})
    table = build_table({"cnn": {NAIVE: cnn, ADAPTIVE: cnn}, "bit_depth": {NAIVE: bd, ADAPTIVE: bd}})
    assert list(table.columns) == GALLERY_COLUMNS
    assert table["baseline"].tolist() == ["", "cnn"] and table["paired_diff"].iloc[1] == pytest.approx(0.1)
    assert title(table).startswith("Defences known to be broken")


def test_an_own_rows_checks_are_its_models_alone() -> None:
    run = _run({"mine": {1}, "twin": {1, 2}})
    failing = {"name": "gradient_health", "grad_mode": "exact", "passed": False}
    passing = {"name": "gradient_health", "grad_mode": "exact", "passed": True}
    run.diagnostics[:] = [{"model": "mine", "checks": [passing]}, {"model": "twin", "checks": [failing]}]
    row = build_table({"mine": {NAIVE: run, ADAPTIVE: run}}, own={"mine": "twin"}).iloc[0]
    assert row["checks_naive"] == "" and row["checks_adaptive"] == ""
