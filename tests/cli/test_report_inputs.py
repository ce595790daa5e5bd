"""The report command under bad input: damaged files and partial records end in one line naming the file
before any table is written, the folder it writes is locked, ``--out`` is checked before writing, and
``report merge`` refuses damaged, stale or malformed shards without writing into the run."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from robustbench_wave import attackrun, report
from robustbench_wave.core import cli
from robustbench_wave.core.runfolder import RunLock
from robustbench_wave.evaluation import records as rec
from robustbench_wave.evaluation.result import EvaluationResult
from robustbench_wave.evaluation.sharding import SHARDS_DIR, Shard, merge_shard_folders, shard_dir
from robustbench_wave.reporting.runs import ENERGY_FILE, load_run
from robustbench_wave.reporting.tables import TABLE_FILES
from tests.support.saved_runs import CONFIG, N, one_line_error, run_meta, run_records, saved_run

# ---------------------------------------------------------------------------------------- damaged files


@pytest.mark.parametrize("target", [rec.RECORDS_FILE, rec.META_FILE])
def test_report_cli_turns_damaged_files_into_one_line_exit(tmp_path, target) -> None:
    run = saved_run(tmp_path / "run")
    path = run / target
    path.write_bytes(path.read_bytes()[:40])
    with pytest.raises(SystemExit) as err:
        report.main([str(run), "--no-figures"])
    one_line_error(err.value, path)
    assert not (run / TABLE_FILES["text"]).exists()


def test_report_parsers_are_one_line_cli_parsers(capsys) -> None:
    assert isinstance(report.get_args_parser(), cli.Parser)
    for argv in (["--bogus", "x"], [report.MERGE]):
        with pytest.raises(SystemExit) as err:
            report.main(argv)
        assert err.value.code == 2
        lines = capsys.readouterr().err.strip().splitlines()
        assert len(lines) == 1 and "(see --help)" in lines[0]


# ------------------------------------------------------------------------------------- lock and --out


def test_report_into_a_locked_run_folder_is_refused(tmp_path) -> None:
    run = saved_run(tmp_path / "run")
    with RunLock(run), pytest.raises(SystemExit) as err:  # an attack run writing there
        report.main([str(run), "--no-figures"])
    one_line_error(err.value, run, "in use by another run")
    assert not (run / TABLE_FILES["text"]).exists()
    assert report.main([str(run), "--no-figures", "--quiet"]) == 0  # released: reports


def test_out_that_is_a_file_is_refused_before_writing(tmp_path) -> None:
    run = saved_run(tmp_path / "run")
    notes = tmp_path / "notes.txt"
    notes.write_text("mine")
    before = sorted(p.name for p in run.iterdir())
    with pytest.raises(SystemExit) as err:
        report.main([str(run), "--out", str(notes), "--no-figures"])
    one_line_error(err.value, "--out", notes, "is a file")
    folder_md = tmp_path / "folder.md"
    folder_md.mkdir()
    with pytest.raises(SystemExit, match="is a folder"):
        report.main([str(run), "--out", str(folder_md), "--no-figures"])
    assert sorted(p.name for p in run.iterdir()) == before and notes.read_text() == "mine"
    assert not any(folder_md.iterdir())


# ---------------------------------------------------------------------------------------------- merge


def _shard_run(run: Path, count: int = 2) -> Path:
    """A run folder with ``count`` finished --shard jobs of the synthetic records (split by example id)."""
    records = run_records()
    bounds = [round(i * N / count) for i in range(count + 1)]
    for i in range(count):
        ids = list(range(bounds[i], bounds[i + 1]))
        part = records[records["example_id"].isin(ids)]
        shard = {"index": i, "count": count, "run_n_examples": N, "run_data_sha256": "d", "example_ids": ids}
        meta = run_meta(run={"config": CONFIG}, shard={**shard, "finalize": {"diagnostics": False}})
        meta["n_examples"] = len(ids)
        EvaluationResult(part, meta).save(shard_dir(run, Shard(i, count)))
    return run


def test_merge_of_synthetic_shards_reports(tmp_path) -> None:
    run = _shard_run(tmp_path / "run")
    assert report.main([report.MERGE, str(run), "--no-diagnostics", "--no-figures", "--quiet"]) == 0
    assert json.loads((run / rec.CONFIG_FILE).read_text()) == CONFIG
    assert rec.read_records(run / rec.RECORDS_FILE).equals(rec.coerce(run_records()))
    assert len(load_run(run).records) == len(run_records())


@pytest.mark.parametrize("target", [rec.RECORDS_FILE, rec.META_FILE])
def test_merge_refuses_a_truncated_shard_file_in_one_line(tmp_path, target) -> None:
    run = _shard_run(tmp_path / "run")
    path = run / SHARDS_DIR / "1-of-2" / target
    path.write_bytes(path.read_bytes()[:30])
    with pytest.raises(ValueError) as lib_err:
        merge_shard_folders(run)
    one_line_error(lib_err.value, path)
    with pytest.raises(SystemExit) as err:
        report.main([report.MERGE, str(run), "--no-diagnostics"])
    one_line_error(err.value, f"cannot merge {run}", path)
    assert not (run / rec.CONFIG_FILE).exists() and not (run / rec.RECORDS_FILE).exists()


def test_merge_into_a_locked_run_writes_nothing(tmp_path) -> None:
    run = _shard_run(tmp_path / "run")
    with RunLock(run), pytest.raises(SystemExit) as err:
        report.main([report.MERGE, str(run), "--no-diagnostics"])
    one_line_error(err.value, run, "in use by another run")
    assert not (run / rec.CONFIG_FILE).exists() and not (run / rec.RECORDS_FILE).exists()


def test_merge_refuses_bad_finalize_options_before_writing(tmp_path) -> None:
    run = _shard_run(tmp_path / "run")
    for i in range(2):
        path = shard_dir(run, Shard(i, 2)) / rec.META_FILE
        meta = json.loads(path.read_text())
        meta["shard"]["finalize"] = {"n_diagnostics": 0}
        path.write_text(json.dumps(meta))
        meta_digest = meta[rec.META_RECORDS]
        assert meta_digest["rows"] > 0
    with pytest.raises(SystemExit, match="n_diagnostics"):
        report.main([report.MERGE, str(run), "--no-diagnostics"])
    assert not (run / rec.CONFIG_FILE).exists()


def test_merge_removes_the_outputs_of_another_configuration(tmp_path) -> None:
    run = _shard_run(tmp_path / "run")
    (run / rec.CONFIG_FILE).write_text(json.dumps({**CONFIG, "suite": "full"}))
    (run / ENERGY_FILE).write_text("model,removed\nold,1\n")  # would enter the new report
    (run / "notes.txt").write_text("mine")
    assert report.main([report.MERGE, str(run), "--no-diagnostics", "--no-figures", "--quiet"]) == 0
    assert not (run / ENERGY_FILE).exists() and (run / "notes.txt").read_text() == "mine"
    assert json.loads((run / rec.CONFIG_FILE).read_text()) == CONFIG


def test_the_run_config_file_has_one_name() -> None:
    """config.json is named once, by evaluation.records.CONFIG_FILE: the attack run folder owns that file and
    no module that writes or reads run folders spells the name again."""
    assert rec.CONFIG_FILE in attackrun.RUN_FILES
    package = Path(attackrun.__file__).parents[1]
    paths = [
        *(package / "attackrun").glob("*.py"),
        *(package / name for name in ("attack.py", "report.py", "evaluation/sharding.py")),
        package / "reporting" / "completeness.py",
    ]
    spelled = [
        f"{path.relative_to(package)}:{node.lineno}"
        for path in paths
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.Constant) and node.value == rec.CONFIG_FILE
    ]
    assert not spelled, f"config.json spelled again (use evaluation.records.CONFIG_FILE): {spelled}"


def _edit_shard_meta(run: Path, index: int, edit) -> None:
    path = shard_dir(run, Shard(index, 2)) / rec.META_FILE
    meta = json.loads(path.read_text())
    edit(meta)
    path.write_text(json.dumps(meta))


def test_merge_refuses_edited_stale_or_malformed_shards(tmp_path) -> None:
    run = _shard_run(tmp_path / "run")
    one = shard_dir(run, Shard(1, 2))
    records = rec.read_records(one / rec.RECORDS_FILE)
    records.loc[0, "correct"] = not records.loc[0, "correct"]
    rec.write_records(records, one / rec.RECORDS_FILE)  # same rows, edited value
    with pytest.raises(ValueError) as err:
        merge_shard_folders(run)
    one_line_error(err.value, one / rec.RECORDS_FILE, "sha256 differs")

    run = _shard_run(tmp_path / "stale")
    one = shard_dir(run, Shard(1, 2))
    (one / rec.CONFIG_FILE).write_text(json.dumps({**CONFIG, "suite": "full"}))  # a killed --overwrite job
    with pytest.raises(ValueError) as err:
        merge_shard_folders(run)
    one_line_error(err.value, one, "another configuration")

    run = _shard_run(tmp_path / "malformed")
    _edit_shard_meta(run, 1, lambda m: m["shard"].update(example_ids="0-49"))
    with pytest.raises(ValueError) as err:
        merge_shard_folders(run)
    one_line_error(err.value, shard_dir(run, Shard(1, 2)) / rec.META_FILE, "shard.example_ids")
    _edit_shard_meta(
        run, 1, lambda m: m["shard"].update(example_ids=list(range(50, 100)), run_n_examples="x")
    )
    with pytest.raises(ValueError, match=r"field shard\.run_n_examples = 'x'"):
        merge_shard_folders(run)

    run = _shard_run(tmp_path / "models")
    _edit_shard_meta(run, 1, lambda m: m["models"].update(other={}))
    with pytest.raises(ValueError, match=r"shard 1/2 .* ran another configuration .*: models differ"):
        merge_shard_folders(run)


def test_missing_meta_and_unknown_baseline_are_refused_before_the_lock(tmp_path) -> None:
    run = saved_run(tmp_path / "run")
    with pytest.raises(SystemExit) as err:
        report.main([str(run), "--baseline", "nosuchmodel", "--no-figures"])
    one_line_error(err.value, "--baseline", "nosuchmodel", "['m']")
    assert not (run / ".lock").exists() and not (run / TABLE_FILES["text"]).exists()
    (run / rec.META_FILE).unlink()
    with pytest.raises(SystemExit) as err:
        report.main([str(run), "--no-figures"])
    one_line_error(err.value, run / rec.META_FILE, "is missing")
