"""Results are meant to be shared: files the harness writes take the user's umask (they were 0600, the mode
of the temporary file behind every atomic write), and the atomic write leaves no temporary file behind."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from robustbench_wave.io import atomic_write_bytes, atomic_write_json, atomic_write_text, file_mode
from robustbench_wave.runfolder import RunLock


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.mark.parametrize("umask", [0o022, 0o077, 0o002])
def test_written_files_take_the_umask(tmp_path: Path, umask: int) -> None:
    old = os.umask(umask)
    try:
        want = 0o666 & ~umask
        assert file_mode() == want
        paths = [
            atomic_write_text(tmp_path / "a.txt", "x"),
            atomic_write_bytes(tmp_path / "b.bin", b"x"),
            atomic_write_json(tmp_path / "c.json", {"x": 1}),
            atomic_write_text(tmp_path / "a.txt", "overwritten"),  # replacing keeps the rule
        ]
    finally:
        os.umask(old)
    assert {p.name: _mode(p) for p in paths} == {"a.txt": want, "b.bin": want, "c.json": want}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.txt", "b.bin", "c.json"]


def test_file_mode_reads_the_umask_without_changing_it() -> None:
    old = os.umask(0o027)
    try:
        assert file_mode() == 0o640
        assert os.umask(0o027) == 0o027  # still what we set: file_mode() did not leave another one behind
    finally:
        os.umask(old)


def test_a_run_folder_lock_is_released_with_its_holder(tmp_path: Path) -> None:
    with RunLock(tmp_path):
        pass
    with RunLock(tmp_path):  # taken again at once: nothing stale is left
        pass
    assert (tmp_path / ".lock").exists()
