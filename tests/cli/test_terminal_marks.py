"""The terminal shows the marks (issue 39, item 8): the attack command prints its table once, after the
gradient-masking checklist, with the checklist's ``†`` cells and legend -- never the suite's unmarked table
before it. With ``--no-diagnostics`` it prints the table at the end of the suite, followed by a line saying
that no checklist ran (on the terminal only: the files are those of any run). When the checklist fails with
an error, the suite's table is still printed, saying the checklist did not finish.

One tiny run of two factories computing the same linear function (:mod:`tests.support.escalation_models`):
the undefended one (the ``--baseline``) and one with saturated logits, whose every check fails in its only
mode; ``--escalation off`` keeps it at the suite's records, so it stays marked.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from robustbench_wave import attack
from robustbench_wave.attackrun import finalize
from robustbench_wave.data import load_split, to_float
from robustbench_wave.models.external import ExternalSpec
from robustbench_wave.reporting.tables import (
    MARK,
    MARK_LEGEND,
    NO_CHECKLIST_NOTE,
    UNFINISHED_CHECKLIST_NOTE,
)
from tests.support import external_models as ext

PLAIN = "tests.support.external_models:pooled_linear"
SATURATED = "tests.support.escalation_models:saturated_pooled_linear"
PREFIX = {PLAIN: "", SATURATED: "net."}
TITLE = "Robust accuracy on synthetic"


def _attack(tmp_path: Path, *extra: str) -> Path:
    """Run the attack command on 8 synthetic images (smoke suite, FGSM and PGD); the run folder."""
    images, labels, _ = load_split("synthetic", "train")
    fitted = ext.fit_pooled_linear(to_float(images[:2000]), labels[:2000])
    args = ["--dataset", "synthetic", "--suite", "smoke", "--n-examples", "8", "--batch-size", "8"]
    args += ["--attacks", "fgsm,pgd_linf", "--cross-check", "off", "--surrogate", "none"]
    for ref in (PLAIN, SATURATED):
        weights = tmp_path / f"{len(PREFIX[ref])}.safetensors"
        ext.save_weights({f"{PREFIX[ref]}{k}": v for k, v in fitted.items()}, str(weights))
        args += ["--model", ref, "--weights", str(weights)]
    args += ["--baseline", PLAIN, "--escalation", "off", "--n-diagnostics", "8", "--diagnostics-steps", "4"]
    args += ["--no-progress", "--device", "cpu", "--out", str(tmp_path / "out"), *extra]
    assert attack.main(args) == 0
    (run,) = (tmp_path / "out" / "attack" / "synthetic").iterdir()
    return run


def _rows(text: str, model: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith(f"{ExternalSpec(model).slug}/")]


@pytest.mark.slow
def test_the_table_is_printed_once_after_the_checklist_with_its_marks(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = _attack(tmp_path)
    out = capsys.readouterr().out
    assert out.count(TITLE) == 1  # one table on the terminal: no unmarked one from before the checklist
    table = out[out.index(TITLE) :]
    table = table[: table.index("\nverdict:")]
    # the marked table: the saturated model's attack cells end with the mark, the honest baseline's do not
    saturated, plain = _rows(table, SATURATED), _rows(table, PLAIN)
    assert saturated and all(line.rstrip().endswith(MARK) for line in saturated)
    assert plain and not any(MARK in line for line in plain)
    assert MARK_LEGEND in table.splitlines()
    assert NO_CHECKLIST_NOTE not in out
    # it is the table the files hold, printed as written, after the checklist, before the verdict
    assert table.strip() == (run / "table.txt").read_text(encoding="utf-8").strip()
    assert out.index("gradient-masking checklist next") < out.index(TITLE) < out.index("\nverdict:")


@pytest.mark.slow
def test_without_the_checklist_the_table_says_that_no_cell_is_verified(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = _attack(tmp_path, "--no-diagnostics")
    out = capsys.readouterr().out
    assert out.count(TITLE) == 1 and MARK not in out and "verdict:" not in out
    text = (run / "table.txt").read_text(encoding="utf-8")
    assert text + NO_CHECKLIST_NOTE + "\n" in out  # the file's table, then the note on the next line
    assert NO_CHECKLIST_NOTE not in text  # the note is the terminal's alone
    assert out.index(NO_CHECKLIST_NOTE) < out.index("\nwrote ")


@pytest.mark.slow
def test_a_checklist_that_fails_still_prints_the_suites_table(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("the checklist broke")

    monkeypatch.setattr(finalize, "measure_run", broken)
    with pytest.raises(RuntimeError, match="the checklist broke"):
        _attack(tmp_path)
    out = capsys.readouterr().out
    assert out.count(TITLE) == 1 and MARK not in out
    (run,) = (tmp_path / "out" / "attack" / "synthetic").iterdir()
    assert (run / "table.txt").read_text(encoding="utf-8") + UNFINISHED_CHECKLIST_NOTE + "\n" in out
