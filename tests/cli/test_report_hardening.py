"""The records and report side under bad input: damaged records and meta files give one line naming the file,
report refuses partial, edited or stale records before any table, holds the lock of the folder it writes,
checks --out before writing, and ``report merge`` refuses damaged shards (issue 10)."""

from __future__ import annotations

import ast
import gzip
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pandas as pd
import pytest

from robustbench_wave import attackrun, cli, report
from robustbench_wave.evaluation import metrics
from robustbench_wave.evaluation import records as rec
from robustbench_wave.evaluation.result import EvaluationResult
from robustbench_wave.evaluation.sharding import SHARDS_DIR, Shard, merge_shard_folders, shard_dir
from robustbench_wave.reporting.runs import ENERGY_FILE, load_run
from robustbench_wave.reporting.tables import TABLE_FILES
from robustbench_wave.runfolder import RunLock
from tests.support import REPO
from tests.support.masking_models import baseline_spec, synthetic_records

N = 100
CONFIG = {"suite": "smoke", "n_examples": N, "models": ["m"]}


def _records() -> pd.DataFrame:
    return synthetic_records("m", baseline_spec(), n=N)


def _meta(**extra) -> dict:
    info = {"name": "synthetic", "info": {"num_classes": 4}}
    return {"dataset": info, "n_examples": N, "models": {"m": {"timing": []}}, **extra}


def _saved_run(folder: Path, **extra) -> Path:
    EvaluationResult(_records(), _meta(**extra)).save(folder)
    return folder


def _one_line_error(err: BaseException, *names: object) -> str:
    text = str(err)
    assert "\n" not in text.strip()
    for name in names:
        assert str(name) in text
    return text


# ---------------------------------------------------------------------------------------- damaged files

CSV = _records().head(3).pipe(rec.coerce).to_csv(index=False, lineterminator="\n")


def _damaged_records() -> dict[str, bytes]:
    good = gzip.compress(CSV.encode(), mtime=0)
    header, row = CSV.splitlines()[0], CSV.splitlines()[1]
    return {
        "truncated gzip (EOFError)": good[: len(good) // 2],
        "not gzip (BadGzipFile)": CSV.encode(),
        "corrupt deflate stream (zlib.error)": good[:10] + b"\xff" * 40,
        "not UTF-8 (UnicodeDecodeError)": gzip.compress(b"\xff\xfe\x00bad" * 10),
        "empty (EmptyDataError)": gzip.compress(b""),
        "ragged rows (ParserError)": gzip.compress(f"{header}\n{row}\n{row},1,2,3\n".encode()),
        "missing column": gzip.compress(
            _records().head(3).drop(columns="label").to_csv(index=False).encode()
        ),
        "unexpected column": gzip.compress(_records().head(3).assign(x=1).to_csv(index=False).encode()),
        "unparsable id": gzip.compress(CSV.replace(",0,0,", ",abc,0,", 1).encode()),
        "flag not True/False": gzip.compress(CSV.replace(",True,", ",maybe,", 1).encode()),
        "fractional id": gzip.compress(CSV.replace(",1,1,", ",1.5,1,", 1).encode()),
    }


@pytest.mark.parametrize("case", list(_damaged_records()))
def test_read_records_damaged_file_is_one_line_naming_it(tmp_path, case) -> None:
    path = tmp_path / rec.RECORDS_FILE
    path.write_bytes(_damaged_records()[case])
    with pytest.raises(ValueError) as err:
        rec.read_records(path)
    _one_line_error(err.value, path, "not a readable records file")


def test_damaged_cases_really_are_damaged(tmp_path) -> None:
    """The good file reads; each case above differs from it (so each test exercises a reader error)."""
    (tmp_path / "good.csv.gz").write_bytes(gzip.compress(CSV.encode(), mtime=0))
    assert len(rec.read_records(tmp_path / "good.csv.gz")) == 3
    good = gzip.compress(CSV.encode(), mtime=0)
    assert all(data != good for data in _damaged_records().values())


@pytest.mark.parametrize(
    ("text", "why"),
    [("{", "not valid JSON"), ("[1, 2]", "holds a JSON list"), ('"x"', "holds a JSON str")],
)
def test_read_meta_invalid_is_one_line_naming_it(tmp_path, text, why) -> None:
    path = tmp_path / rec.META_FILE
    path.write_text(text)
    with pytest.raises(ValueError) as err:
        rec.read_meta(path)
    _one_line_error(err.value, path, why)
    path.write_bytes(b"\xff\xfe{}")
    with pytest.raises(ValueError, match="cannot be read"):
        rec.read_meta(path)


@pytest.mark.parametrize("target", [rec.RECORDS_FILE, rec.META_FILE])
def test_report_cli_turns_damaged_files_into_one_line_exit(tmp_path, target) -> None:
    run = _saved_run(tmp_path / "run")
    path = run / target
    path.write_bytes(path.read_bytes()[:40])
    with pytest.raises(SystemExit) as err:
        report.main([str(run), "--no-figures"])
    _one_line_error(err.value, path)
    assert not (run / TABLE_FILES["text"]).exists()


def test_report_parsers_are_one_line_cli_parsers(capsys) -> None:
    assert isinstance(report.get_args_parser(), cli.Parser)
    assert isinstance(report.get_merge_parser(), cli.Parser)
    for argv in (["--bogus", "x"], [report.MERGE]):
        with pytest.raises(SystemExit) as err:
            report.main(argv)
        assert err.value.code == 2
        lines = capsys.readouterr().err.strip().splitlines()
        assert len(lines) == 1 and "(see --help)" in lines[0]


# ---------------------------------------------------------------------------------- completeness checks


def test_save_records_hash_and_rows_and_keeps_records_bytes(tmp_path) -> None:
    run = _saved_run(tmp_path / "run")
    meta = json.loads((run / rec.META_FILE).read_text())
    data = (run / rec.RECORDS_FILE).read_bytes()
    assert meta[rec.META_RECORDS] == {
        "sha256": rec.file_sha256(run / rec.RECORDS_FILE),
        "rows": len(_records()),
    }
    assert rec.write_records(_records(), tmp_path / "again.csv.gz").read_bytes() == data  # records unchanged
    assert load_run(run).records.shape == (len(_records()), len(rec.COLUMNS))


def test_partial_or_edited_records_are_refused_before_any_table(tmp_path) -> None:
    run = _saved_run(tmp_path / "run")
    records = _records()
    rec.write_records(records.head(len(records) - 7), run / rec.RECORDS_FILE)  # an interrupted write
    with pytest.raises(SystemExit) as err:
        report.main([str(run), "--no-figures"])
    text = _one_line_error(err.value, run / rec.RECORDS_FILE, "re-run the attack command")
    assert f"({len(records) - 7} rows, expected {len(records)}; sha256 differs)" in text
    assert not (run / TABLE_FILES["text"]).exists()
    edited = records.copy()
    edited.loc[5, "correct"] = not edited.loc[5, "correct"]  # same rows, another number
    rec.write_records(edited, run / rec.RECORDS_FILE)
    with pytest.raises(ValueError, match=rf"\({len(records)} rows, expected {len(records)}; sha256 differs"):
        load_run(run)


def _without_digest(run: Path) -> None:
    """A run saved before meta.json recorded its records' hash."""
    meta = json.loads((run / rec.META_FILE).read_text())
    meta.pop("records", None)
    (run / rec.META_FILE).write_text(json.dumps(meta))


def test_structural_check_catches_missing_rows_of_older_runs(tmp_path) -> None:
    run = _saved_run(tmp_path / "run")
    _without_digest(run)
    records = _records()
    attacked = records[records["attack"] == "square"].index
    rec.write_records(records.drop(attacked[-3:]), run / rec.RECORDS_FILE)
    with pytest.raises(ValueError) as err:
        load_run(run)
    text = _one_line_error(err.value, run / rec.RECORDS_FILE, "'square'", "holds 97 rows for 100 examples")
    assert "missing ids [97, 98, 99]" in text
    rec.write_records(pd.concat([records, records.tail(1)]), run / rec.RECORDS_FILE)  # a repeated row
    with pytest.raises(ValueError, match=r"repeated \[99\]"):
        load_run(run)
    rec.write_records(records[records["example_id"] != 4], run / rec.RECORDS_FILE)  # one example everywhere
    with pytest.raises(ValueError, match=r"cover 99 examples, meta\.json records n_examples 100"):
        load_run(run)
    rec.write_records(records[records["threat"] != "none"], run / rec.RECORDS_FILE)
    with pytest.raises(ValueError, match="no clean rows of model 'm'"):
        load_run(run)


def test_model_listed_in_meta_without_rows_is_refused(tmp_path) -> None:
    run = tmp_path / "run"
    meta = _meta()
    meta["models"]["gone"] = {}
    EvaluationResult(_records(), meta).save(run)
    with pytest.raises(ValueError, match="no rows of model 'gone'"):
        load_run(run)


def test_records_of_another_configuration_are_refused(tmp_path) -> None:
    run = _saved_run(tmp_path / "run", run={"config": CONFIG})
    (run / rec.CONFIG_FILE).write_text(json.dumps(CONFIG))
    assert len(load_run(run).records)  # the same configuration: fine
    (run / rec.CONFIG_FILE).write_text(json.dumps({**CONFIG, "n_examples": 50}))  # a killed --overwrite run
    with pytest.raises(SystemExit) as err:
        report.main([str(run), "--no-figures"])
    _one_line_error(err.value, run, "another configuration than its config.json", "n_examples differ")
    assert not (run / TABLE_FILES["text"]).exists()


def test_a_cross_check_file_of_older_versions_is_not_read(tmp_path) -> None:
    """Cross-check rows live in records.csv.gz now (attacks name@backend, counted in the worst case); a
    crosscheck_records.csv.gz left by an older version must not change what the folder reports."""
    run = _saved_run(tmp_path / "run")
    before = load_run(run)
    legacy = _records().assign(correct=False, attacked=True)
    rec.write_records(legacy, run / rec.CROSSCHECK_FILE)
    after = load_run(run)
    pd.testing.assert_frame_equal(after.records, before.records)
    assert not len(metrics.backend_agreement(after.records))


# ------------------------------------------------------------------------------------- lock and --out


def test_report_into_a_locked_run_folder_is_refused(tmp_path) -> None:
    run = _saved_run(tmp_path / "run")
    with RunLock(run), pytest.raises(SystemExit) as err:  # an attack run writing there
        report.main([str(run), "--no-figures"])
    _one_line_error(err.value, run, "in use by another run")
    assert not (run / TABLE_FILES["text"]).exists()
    assert report.main([str(run), "--no-figures", "--quiet"]) == 0  # released: reports


def test_out_that_is_a_file_is_refused_before_writing(tmp_path) -> None:
    run = _saved_run(tmp_path / "run")
    notes = tmp_path / "notes.txt"
    notes.write_text("mine")
    before = sorted(p.name for p in run.iterdir())
    with pytest.raises(SystemExit) as err:
        report.main([str(run), "--out", str(notes), "--no-figures"])
    _one_line_error(err.value, "--out", notes, "is a file")
    folder_md = tmp_path / "folder.md"
    folder_md.mkdir()
    with pytest.raises(SystemExit, match="is a folder"):
        report.main([str(run), "--out", str(folder_md), "--no-figures"])
    assert sorted(p.name for p in run.iterdir()) == before and notes.read_text() == "mine"
    assert not any(folder_md.iterdir())


def test_unwritable_out_is_one_line_without_traceback() -> None:
    """Run as an unprivileged user (root ignores permissions): a read-only --out folder."""
    if os.geteuid() != 0 or not shutil.which("setpriv"):
        pytest.skip("needs root and setpriv to drop to an unprivileged user")
    base = Path(tempfile.mkdtemp(prefix="rbw-ro-"))
    try:
        base.chmod(0o755)
        run = _saved_run(base / "run")
        for p in [run, *run.iterdir()]:
            p.chmod(0o755 if p.is_dir() else 0o644)
        (base / "ro").mkdir(mode=0o755)
        cmd = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", sys.executable, "-m"]
        cmd += ["robustbench_wave.report", str(run), "--out", str(base / "ro" / "x"), "--no-figures"]
        home = base / "home"
        home.mkdir(mode=0o777)
        home.chmod(0o777)
        env = {**os.environ, "HOME": str(home), "MPLCONFIGDIR": str(home), "OMP_NUM_THREADS": "1"}
        done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
        if "Permission denied" in done.stderr and "robustbench_wave" not in done.stderr:
            pytest.skip(f"the unprivileged user cannot run the interpreter: {done.stderr[-200:]}")
        assert done.returncode != 0 and "Traceback" not in done.stderr, done.stderr[-2000:]
        assert f"--out {base / 'ro'}" in done.stderr and "is not writable" in done.stderr
        assert not any((base / "ro").iterdir())
    finally:
        shutil.rmtree(base)


# ---------------------------------------------------------------------------------------------- merge


def _shard_run(run: Path, count: int = 2) -> Path:
    """A run folder with ``count`` finished --shard jobs of the synthetic records (split by example id)."""
    records = _records()
    bounds = [round(i * N / count) for i in range(count + 1)]
    for i in range(count):
        ids = list(range(bounds[i], bounds[i + 1]))
        part = records[records["example_id"].isin(ids)]
        shard = {"index": i, "count": count, "run_n_examples": N, "run_data_sha256": "d", "example_ids": ids}
        meta = _meta(run={"config": CONFIG}, shard={**shard, "finalize": {"diagnostics": False}})
        meta["n_examples"] = len(ids)
        EvaluationResult(part, meta).save(shard_dir(run, Shard(i, count)))
    return run


def test_merge_of_synthetic_shards_reports(tmp_path) -> None:
    run = _shard_run(tmp_path / "run")
    assert report.main([report.MERGE, str(run), "--no-diagnostics", "--no-figures", "--quiet"]) == 0
    assert json.loads((run / rec.CONFIG_FILE).read_text()) == CONFIG
    assert rec.read_records(run / rec.RECORDS_FILE).equals(rec.coerce(_records()))
    assert len(load_run(run).records) == len(_records())


@pytest.mark.parametrize("target", [rec.RECORDS_FILE, rec.META_FILE])
def test_merge_refuses_a_truncated_shard_file_in_one_line(tmp_path, target) -> None:
    run = _shard_run(tmp_path / "run")
    path = run / SHARDS_DIR / "1-of-2" / target
    path.write_bytes(path.read_bytes()[:30])
    with pytest.raises(ValueError) as lib_err:
        merge_shard_folders(run)
    _one_line_error(lib_err.value, path)
    with pytest.raises(SystemExit) as err:
        report.main([report.MERGE, str(run), "--no-diagnostics"])
    _one_line_error(err.value, f"cannot merge {run}", path)
    assert not (run / rec.CONFIG_FILE).exists() and not (run / rec.RECORDS_FILE).exists()


def test_merge_into_a_locked_run_writes_nothing(tmp_path) -> None:
    run = _shard_run(tmp_path / "run")
    with RunLock(run), pytest.raises(SystemExit) as err:
        report.main([report.MERGE, str(run), "--no-diagnostics"])
    _one_line_error(err.value, run, "in use by another run")
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
    _one_line_error(err.value, one / rec.RECORDS_FILE, "sha256 differs")

    run = _shard_run(tmp_path / "stale")
    one = shard_dir(run, Shard(1, 2))
    (one / rec.CONFIG_FILE).write_text(json.dumps({**CONFIG, "suite": "full"}))  # a killed --overwrite job
    with pytest.raises(ValueError) as err:
        merge_shard_folders(run)
    _one_line_error(err.value, one, "another configuration")

    run = _shard_run(tmp_path / "malformed")
    _edit_shard_meta(run, 1, lambda m: m["shard"].update(example_ids="0-49"))
    with pytest.raises(ValueError) as err:
        merge_shard_folders(run)
    _one_line_error(err.value, shard_dir(run, Shard(1, 2)) / rec.META_FILE, "shard.example_ids")
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
    run = _saved_run(tmp_path / "run")
    with pytest.raises(SystemExit) as err:
        report.main([str(run), "--baseline", "nosuchmodel", "--no-figures"])
    _one_line_error(err.value, "--baseline", "nosuchmodel", "['m']")
    assert not (run / ".lock").exists() and not (run / TABLE_FILES["text"]).exists()
    (run / rec.META_FILE).unlink()
    with pytest.raises(SystemExit) as err:
        report.main([str(run), "--no-figures"])
    _one_line_error(err.value, run / rec.META_FILE, "is missing")
