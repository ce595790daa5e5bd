"""tools.compare_runs: a moved number is caught, a moved timestamp is not."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

from tools.compare_runs import compare, main

RECORDS = "model,eps,correct\nwavelet,0.03,1\n"


def _run(root: Path, *, correct: int = 1, created: str = "2026-12-05T04:00:00") -> Path:
    run = root / "attack" / "fashion-mnist" / "run"
    run.mkdir(parents=True)
    (run / "records.csv.gz").write_bytes(gzip.compress(RECORDS.replace(",1\n", f",{correct}\n").encode()))
    meta = {"created_utc": created, "models": {"wavelet": {"clean": 0.87, "seconds_total": 12.5}}}
    (run / "meta.json").write_text(json.dumps(meta))
    (root / "train").mkdir()
    (root / "train" / "weights.txt").write_text(created)  # the input: never compared
    return root


def test_identical_runs_agree_and_volatile_values_are_set_aside(tmp_path: Path) -> None:
    before = _run(tmp_path / "a")
    after = _run(tmp_path / "b", created="2026-12-06T09:30:00")
    counts, problems = compare(before, after)
    assert problems == [] and counts == {"bytes": 1, "scrubbed": 1}
    assert main([str(before), str(after)]) == 0


def test_a_changed_record_is_reported(tmp_path: Path) -> None:
    before, after = _run(tmp_path / "a"), _run(tmp_path / "b", correct=0)
    assert compare(before, after)[1] == ["attack/fashion-mnist/run/records.csv.gz: differs"]
    assert main([str(before), str(after)]) == 1


def test_a_changed_number_in_meta_is_reported(tmp_path: Path) -> None:
    before, after = _run(tmp_path / "a"), _run(tmp_path / "b")
    meta = after / "attack" / "fashion-mnist" / "run" / "meta.json"
    meta.write_text(meta.read_text().replace("0.87", "0.88"))
    assert compare(before, after)[1] == ["attack/fashion-mnist/run/meta.json: differs"]
