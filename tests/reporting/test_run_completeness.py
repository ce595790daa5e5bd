"""Reading a run folder whole or not at all: damaged records and meta files give one line naming the file,
and the report refuses partial, edited or stale records, records of another configuration than the folder's
config.json, and rows a model listed in meta.json lacks, before any table; an older version's cross-check
file is not read."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pandas as pd
import pytest

from robustbench_wave import report
from robustbench_wave.evaluation import metrics
from robustbench_wave.evaluation import records as rec
from robustbench_wave.evaluation.result import EvaluationResult
from robustbench_wave.reporting.runs import load_run
from robustbench_wave.reporting.tables import TABLE_FILES
from tests.support.saved_runs import CONFIG, one_line_error, run_meta, run_records, saved_run

# ---------------------------------------------------------------------------------------- damaged files

CSV = run_records().head(3).pipe(rec.coerce).to_csv(index=False, lineterminator="\n")


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
            run_records().head(3).drop(columns="label").to_csv(index=False).encode()
        ),
        "unexpected column": gzip.compress(run_records().head(3).assign(x=1).to_csv(index=False).encode()),
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
    one_line_error(err.value, path, "not a readable records file")


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
    one_line_error(err.value, path, why)
    path.write_bytes(b"\xff\xfe{}")
    with pytest.raises(ValueError, match="cannot be read"):
        rec.read_meta(path)


# ---------------------------------------------------------------------------------- completeness checks


def test_save_records_hash_and_rows_and_keeps_records_bytes(tmp_path) -> None:
    run = saved_run(tmp_path / "run")
    meta = json.loads((run / rec.META_FILE).read_text())
    data = (run / rec.RECORDS_FILE).read_bytes()
    assert meta[rec.META_RECORDS] == {
        "sha256": rec.file_sha256(run / rec.RECORDS_FILE),
        "rows": len(run_records()),
    }
    assert rec.write_records(run_records(), tmp_path / "again.csv.gz").read_bytes() == data  # unchanged
    assert load_run(run).records.shape == (len(run_records()), len(rec.COLUMNS))


def test_partial_or_edited_records_are_refused_before_any_table(tmp_path) -> None:
    run = saved_run(tmp_path / "run")
    records = run_records()
    rec.write_records(records.head(len(records) - 7), run / rec.RECORDS_FILE)  # an interrupted write
    with pytest.raises(SystemExit) as err:
        report.main([str(run), "--no-figures"])
    text = one_line_error(err.value, run / rec.RECORDS_FILE, "re-run the attack command")
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
    run = saved_run(tmp_path / "run")
    _without_digest(run)
    records = run_records()
    attacked = records[records["attack"] == "square"].index
    rec.write_records(records.drop(attacked[-3:]), run / rec.RECORDS_FILE)
    with pytest.raises(ValueError) as err:
        load_run(run)
    text = one_line_error(err.value, run / rec.RECORDS_FILE, "'square'", "holds 97 rows for 100 examples")
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
    meta = run_meta()
    meta["models"]["gone"] = {}
    EvaluationResult(run_records(), meta).save(run)
    with pytest.raises(ValueError, match="no rows of model 'gone'"):
        load_run(run)


def test_records_of_another_configuration_are_refused(tmp_path) -> None:
    run = saved_run(tmp_path / "run", run={"config": CONFIG})
    (run / rec.CONFIG_FILE).write_text(json.dumps(CONFIG))
    assert len(load_run(run).records)  # the same configuration: fine
    (run / rec.CONFIG_FILE).write_text(json.dumps({**CONFIG, "n_examples": 50}))  # a killed --overwrite run
    with pytest.raises(SystemExit) as err:
        report.main([str(run), "--no-figures"])
    one_line_error(err.value, run, "another configuration than its config.json", "n_examples differ")
    assert not (run / TABLE_FILES["text"]).exists()


def test_a_cross_check_file_of_older_versions_is_not_read(tmp_path) -> None:
    """Cross-check rows live in records.csv.gz now (attacks name@backend, counted in the worst case); a
    crosscheck_records.csv.gz left by an older version must not change what the folder reports."""
    run = saved_run(tmp_path / "run")
    before = load_run(run)
    legacy = run_records().assign(correct=False, attacked=True)
    rec.write_records(legacy, run / rec.CROSSCHECK_FILE)
    after = load_run(run)
    pd.testing.assert_frame_equal(after.records, before.records)
    assert not len(metrics.backend_agreement(after.records))
