"""Atomic file writes and small provenance helpers shared by training, attacks and reports.

Every result file is written to a temporary sibling, flushed to disk (fsync) and renamed into place, so a killed
run never leaves a half-written table, checkpoint or record file behind (the old file, if any, survives intact),
and neither does a power cut: without the fsync the rename can reach the disk before the data, leaving an
empty file under the final name.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import subprocess
import tempfile
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import Any

TRACKED_LIBRARIES = (
    "torch",
    "torchvision",
    "timm",
    "torchattacks",
    "foolbox",
    "PyWavelets",
    "numpy",
    "pandas",
    "safetensors",
    "robustbench_wave",
)


def atomic_write(path: str | os.PathLike, writer: Callable[[Path], None]) -> Path:
    """Call ``writer(tmp_path)`` and rename the result to ``path`` (same directory, so the rename is atomic).

    The data are fsynced before the rename and the folder after it, so that after a crash ``path`` holds either
    the old file or the whole new one."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        writer(tmp_path)
        os.chmod(tmp_path, file_mode())  # mkstemp makes 0600; results are meant to be shared
        _fsync(tmp_path)
        os.replace(tmp_path, path)
    finally:
        if tmp_path.exists():
            tmp_path.unlink()
    _fsync_folder(path.parent)
    return path


def _fsync(path: Path) -> None:
    """Flush a written file's data to disk (the writer may have closed it without)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_folder(folder: Path) -> None:
    """Make a rename in ``folder`` durable; a no-op where folders cannot be opened (Windows)."""
    try:
        fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:  # some file systems refuse fsync on a folder; the data themselves are on disk
        pass
    finally:
        os.close(fd)


def file_mode() -> int:
    """The mode a plain ``open(path, "w")`` would give a new file: 0666 less the process's umask."""
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return 0o666 & ~int(line.split()[1], 8)
    except OSError:
        pass
    mask = os.umask(0o022)  # no /proc: read the umask by setting it (and put it back at once)
    os.umask(mask)
    return 0o666 & ~mask


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    return atomic_write(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    return atomic_write(path, lambda tmp: tmp.write_bytes(data))


def atomic_write_json(path: str | os.PathLike, obj: Any) -> Path:
    return atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=True, default=_json_default) + "\n")


def read_jsonl(path: str | os.PathLike) -> list[dict]:
    path = Path(path)
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _json_default(obj: Any) -> Any:
    if isinstance(obj, Path):
        return str(obj)
    if hasattr(obj, "item"):  # numpy / torch scalars
        return obj.item()
    if hasattr(obj, "tolist"):
        return obj.tolist()
    if hasattr(obj, "value"):  # enums
        return obj.value
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


def sha256_file(path: str | os.PathLike, chunk: int = 1 << 20) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def git_revision(cwd: str | os.PathLike | None = None) -> str:
    """The current commit (with a '-dirty' suffix when the tree has changes), or 'unknown' outside git."""
    cwd = Path(cwd) if cwd else Path(__file__).resolve().parent
    try:
        rev = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True, check=True, timeout=10
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=cwd,
            capture_output=True,
            text=True,
            check=True,
            timeout=10,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return rev + ("-dirty" if dirty else "")


def library_versions() -> dict[str, str]:
    versions = {"python": platform.python_version()}
    for name in TRACKED_LIBRARIES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = "not installed"
    return versions


def provenance() -> dict[str, Any]:
    """What every result file carries so that it can be reproduced and compared."""
    return {
        "git_revision": git_revision(),
        "libraries": library_versions(),
        "platform": platform.platform(),
    }
