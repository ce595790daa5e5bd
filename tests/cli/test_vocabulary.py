"""One vocabulary across the command lines: each old spelling still parses to the same settings as the new
one and logs a deprecation warning; a list is the repeated flag or a comma list; ``report``'s subcommands
are real subcommands, each with its ``--help``, and the old forms still reach them."""

from __future__ import annotations

import argparse
import logging

import pytest

from robustbench_wave import attack, gallery, report, train
from robustbench_wave.attacks import load_suite

#: (command parser, old argv, new argv): each pair must parse to the same settings.
ALIASES = [
    (train, ["--fresh"], ["--overwrite"]),
    (train, ["--test-subset", "32"], ["--n-examples", "32"]),
    (train, ["--seed", "0", "1", "2"], ["--train-seed", "0", "--train-seed", "1", "--train-seed", "2"]),
    (train, ["--seed", "3"], ["--train-seed", "3"]),
    (train, ["--out", "elsewhere"], ["--results-dir", "elsewhere"]),
    (attack, ["--model", "patch", "--cross-check"], ["--model", "patch", "--cross-check", "all"]),
    (gallery, ["all", "--out", "g"], ["all", "--results-dir", "g"]),
    (gallery, ["all", "--fresh"], ["all", "--overwrite"]),
    (gallery, ["all", "--test-subset", "32"], ["all", "--train-n-examples", "32"]),
]


def _parse(module, argv: list[str]) -> argparse.Namespace:
    return module.get_args_parser().parse_args(argv)


@pytest.mark.parametrize(("module", "old", "new"), ALIASES, ids=[" ".join(o) for _, o, _ in ALIASES])
def test_each_old_spelling_warns_and_means_the_new_one(module, old, new, caplog) -> None:
    with caplog.at_level(logging.WARNING, logger="robustbench_wave"):
        assert vars(_parse(module, old)) == vars(_parse(module, new))
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warned and all("deprecated" in w for w in warned), warned
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="robustbench_wave"):
        _parse(module, new)
    assert not caplog.records  # the new spelling is quiet


def test_a_list_is_the_repeated_flag_or_commas() -> None:
    repeated = _parse(
        attack, ["--model", "patch", "--model", "wavelet", "--attacks", "fgsm", "--attacks", "pgd_linf"]
    )
    commas = _parse(attack, ["--model", "patch,wavelet", "--attacks", "fgsm,pgd_linf"])
    assert repeated.model == commas.model == ["patch", "wavelet"]
    assert repeated.attacks == commas.attacks == ["fgsm", "pgd_linf"]
    assert _parse(train, ["--train-seed", "0,1", "--train-seed", "2"]).train_seed == [0, 1, 2]
    assert _parse(train, []).train_seed == [0]  # the default, replaced (not extended) by the flag
    assert _parse(train, ["--train-seed", "4"]).train_seed == [4]


def test_grad_modes_as_a_list_keep_the_run_configuration() -> None:
    """The same settings (config.json, hence chunks and records) as the old comma string."""
    default = attack._settings(_parse(attack, ["--model", "patch"]))
    assert default.grad_modes.every is None  # no request: each model's offered modes, config.json as before
    assert default.to_config(load_suite("smoke"), {})["grad_modes"] == "exact,blocked,bpda"
    two = attack._settings(
        _parse(attack, ["--model", "patch", "--grad-modes", "exact", "--grad-modes", "bpda"])
    )
    assert (
        two.grad_modes
        == attack._settings(_parse(attack, ["--model", "patch", "--grad-modes", "exact,bpda"])).grad_modes
    )
    assert two.to_config(load_suite("smoke"), {})["grad_modes"] == "exact,bpda"


def test_attack_reads_and_writes_under_results_dir_unless_out_is_given() -> None:
    args = _parse(attack, ["--model", "patch", "--results-dir", "r"])
    assert attack._options(args).results_dir == attack._options(args).out
    args = _parse(attack, ["--model", "patch", "--results-dir", "r", "--out", "o"])
    assert str(attack._options(args).out) == "o" and str(attack._options(args).results_dir) == "r"


@pytest.mark.parametrize("flag", ["--seed", "--train-seed"])
def test_a_bad_list_item_names_the_flag_given(flag, capsys) -> None:
    with pytest.raises(SystemExit):
        _parse(train, [flag, "0,-1"])
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"argument {flag}: '-1'" in err[0]


@pytest.mark.parametrize("module", [train, attack, gallery])
def test_v_and_q_mean_the_same_everywhere(module, capsys) -> None:
    with pytest.raises(SystemExit):
        module.get_args_parser().parse_args(["--help"] if module is not gallery else ["all", "--help"])
    text = capsys.readouterr().out
    assert "-v, --verbose" in text and "debug logging" in text and "-q, --quiet" in text


def test_report_help_lists_every_subcommand(capsys) -> None:
    with pytest.raises(SystemExit) as err:
        report.main(["--help"])
    assert err.value.code == 0
    text = capsys.readouterr().out
    for name in report.SUBCOMMANDS:
        assert f"    {name} " in text, name
    assert set(report.SUBCOMMANDS) == {"run", "merge", "reaudit", "export", "claims"}


@pytest.mark.parametrize("name", list(report.SUBCOMMANDS))
def test_each_report_subcommand_has_its_own_help(name, capsys) -> None:
    with pytest.raises(SystemExit) as err:
        report.main([name, "--help"])
    assert err.value.code == 0
    text = capsys.readouterr().out
    assert text.startswith(f"usage: python -m robustbench_wave.report {name}")
    assert report.SUBCOMMANDS[name][1].split()[0] in text  # its own description


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["RUN"], ["run", "RUN"]),
        (["RUN", "--out", "x.md"], ["run", "RUN", "--out", "x.md"]),
        (["--quiet", "RUN"], ["run", "--quiet", "RUN"]),
        (["--reaudit", "RUN"], ["reaudit", "RUN"]),
        (["RUN", "--reaudit", "--batch-size", "3"], ["reaudit", "RUN", "--batch-size", "3"]),
        (["merge", "RUN"], ["merge", "RUN"]),
        (["--help"], ["--help"]),
    ],
)
def test_old_report_forms_reach_their_subcommand(argv, expected) -> None:
    assert report.with_command(argv) == expected
    args = report.get_args_parser().parse_args(expected) if expected != ["--help"] else None
    assert args is None or args.command == expected[0]


def test_old_claims_runs_spelling_still_lists_runs(caplog) -> None:
    parser = report.get_args_parser()
    with caplog.at_level(logging.WARNING, logger="robustbench_wave"):
        old = parser.parse_args(["claims", "--runs", "a", "b"])
    new = parser.parse_args(["claims", "--run", "a", "--run", "b"])
    assert old.runs == new.runs and [str(p) for p in new.runs] == ["a", "b"]
    assert any("deprecated" in r.getMessage() for r in caplog.records)
