"""Results are meant to be shared: files the harness writes take the user's umask (they were 0600, the mode
of the temporary file behind every atomic write), and the atomic write leaves no temporary file behind. The
write survives a power cut: the data are on disk before the rename (else the renamed file can be empty), and
every rename in the package is that one."""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

import pytest

from robustbench_wave.core.io import atomic_write_bytes, atomic_write_json, atomic_write_text, file_mode
from robustbench_wave.core.runfolder import RunLock
from tests.support import REPO


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


def test_the_data_are_on_disk_before_the_rename_and_the_rename_after(tmp_path: Path, monkeypatch) -> None:
    """The temporary file is fsynced with its whole content before it is renamed over the old file, and its
    folder after (so the rename itself is on disk)."""
    events: list[tuple[str, int, int | Path]] = []
    fsync, replace = os.fsync, os.replace

    def spy_fsync(fd: int) -> None:
        info = os.fstat(fd)
        events.append(("fsync", info.st_ino, -1 if stat.S_ISDIR(info.st_mode) else info.st_size))
        fsync(fd)

    def spy_replace(src: str | os.PathLike, dst: str | os.PathLike) -> None:
        events.append(("replace", os.stat(src).st_ino, Path(dst)))
        replace(src, dst)

    monkeypatch.setattr(os, "fsync", spy_fsync)
    monkeypatch.setattr(os, "replace", spy_replace)
    target = tmp_path / "records.csv.gz"
    target.write_bytes(b"old")
    data = b"the new records"
    atomic_write_bytes(target, data)
    (renamed,) = [i for i, event in enumerate(events) if event[0] == "replace"]
    _, inode, destination = events[renamed]
    assert destination == target and target.read_bytes() == data
    assert ("fsync", inode, len(data)) in events[:renamed]  # the temporary file, with all its data
    assert ("fsync", tmp_path.stat().st_ino, -1) in events[renamed:]  # the folder, after the rename


def test_every_rename_in_the_package_is_the_atomic_write() -> None:
    """A write-then-rename elsewhere would skip the fsync: the package renames files in io.py only."""
    rename = re.compile(r"\bos\.(replace|rename|renames)\(|\bshutil\.move\(|\.rename\((?!columns)")
    found = [
        f"{path.relative_to(REPO)}:{n}"
        for path in sorted((REPO / "robustbench_wave").rglob("*.py"))
        if path.name != "io.py"
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if rename.search(line)
    ]
    assert found == []
