"""Run folders: safe names, containment in the results tree, an exclusive lock, and removing only our files.

Every name that becomes part of a path (a model spec's ``name``, ``--run-name``, a suite name) must match one
safe pattern, and every run folder must lie inside the results root it was given, so no input can make a run
write or delete outside ``--out``. A run holds :class:`RunLock` on its folder while it writes there, so a
second run into the same folder stops with a clear message instead of mixing its results in (the lock is an
``flock``: the kernel releases it when the process ends, even after ``kill -9``). Discarding a run
(``--overwrite``, a changed configuration) removes only the files this project writes, by name.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import socket
import time
from collections.abc import Iterable
from pathlib import Path
from types import TracebackType

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: no advisory locks, runs are not protected from each other
    fcntl = None  # type: ignore[assignment]

log = logging.getLogger(__name__)

#: A name that may become one path component: letters, digits and ``. _ + = -``, not starting with a dot.
SAFE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+=-]{0,199}")
SAFE_NAME_RULE = "1-200 letters, digits and . _ + = - (no '/', no '..', not starting with '.')"

#: The lock file inside a locked folder (kept after release: deleting a lock file races with its next user).
LOCK_FILE = ".lock"

#: The results root when none is given: trained runs under ``train/``, attack runs under ``attack/``.
RESULTS_ROOT = Path("results")


class FolderBusyError(ValueError):
    """Another process holds the lock on a run folder."""


def check_safe_name(value: object, what: str) -> str:
    """``value`` when it can name one folder safely; else ValueError naming ``what`` and the value."""
    if not isinstance(value, str) or not SAFE_NAME.fullmatch(value) or ".." in value:
        raise ValueError(f"{what} {value!r} cannot name a folder: use {SAFE_NAME_RULE}")
    return value


def check_inside(root: str | os.PathLike, path: str | os.PathLike) -> Path:
    """``path`` when it lies inside ``root`` (lexically, after ``..`` is collapsed); else ValueError."""
    root_abs, path_abs = os.path.abspath(root), os.path.abspath(path)
    if os.path.commonpath([root_abs, path_abs]) != root_abs or root_abs == path_abs:
        raise ValueError(f"{path} lies outside the results folder {root}; refusing to write there")
    return Path(path)


def check_writable_root(path: str | os.PathLike, flag: str = "--out") -> Path:
    """A results root that is a folder (or can be created as one) this process may write into.

    Checked before any work, so that a bad ``--out`` ends with one line instead of a traceback hours later.
    Nothing is created here.
    """
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise ValueError(f"{flag} {path}: is a file, not a folder; give a folder")
    existing = path
    while not existing.exists():
        if existing.parent == existing:
            break
        existing = existing.parent
    if existing.exists() and not existing.is_dir():
        raise ValueError(f"{flag} {path}: {existing} is a file, so the folder cannot be created")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise ValueError(f"{flag} {path}: {existing} is not writable; give a folder you can write to")
    return path


def check_folders(directory: str | os.PathLike, folders: Iterable[str]) -> None:
    """``directory`` and the named sub-folders are folders where they exist: a foreign file in their place
    would otherwise stop a run half-way, after its ``config.json`` was written."""
    directory = Path(directory)
    for path in (directory, *(directory / name for name in folders)):
        if path.exists() and not path.is_dir():
            raise ValueError(
                f"{path} is a file where the run keeps a folder; move it away or choose another run folder"
            )


def remove_owned(
    directory: str | os.PathLike, files: Iterable[str], folders: Iterable[str] = ()
) -> list[str]:
    """Delete the named ``files`` and ``folders`` of ``directory`` (and our leftover temporary files).

    Everything else is left alone and returned (with a warning), so discarding a run never deletes a file
    this project did not write.
    """
    directory = Path(directory)
    if not directory.is_dir():
        return []
    files, folders = set(files), set(folders)
    foreign = []
    for child in sorted(directory.iterdir()):
        name = child.name
        if child.is_dir() and not child.is_symlink():
            if name in folders:
                shutil.rmtree(child)
            else:
                foreign.append(name)
        elif name == LOCK_FILE:
            continue  # held by the caller; deleting it would let a second run take a new lock
        elif name in files or _is_our_temporary(name, files):
            child.unlink(missing_ok=True)
        else:
            foreign.append(name)
    if foreign:
        log.warning(
            "left %d entries in %s that this project did not write: %s", len(foreign), directory, foreign
        )
    return foreign


def _is_our_temporary(name: str, files: set[str]) -> bool:
    """A temporary sibling left by :func:`robustbench_wave.core.io.atomic_write` of one of ``files``."""
    return name.endswith(".tmp") and any(name.startswith(f".{f}.") for f in files)


class RunLock:
    """Exclusive lock on a run folder while a process writes into it (``with RunLock(folder): ...``).

    A second holder fails at once with :class:`FolderBusyError` naming the holder (pid, host, start time).
    The folder is created when the lock is taken, so validate all input before.
    """

    def __init__(self, directory: str | os.PathLike, hint: str = "wait for it to finish") -> None:
        self.directory = Path(directory)
        self.hint = hint
        self._fd: int | None = None

    def acquire(self) -> RunLock:
        if fcntl is None or self._fd is not None:
            return self
        self.directory.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.directory / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read_holder(fd)
            os.close(fd)
            raise FolderBusyError(
                f"{self.directory} is in use by another run ({holder}); {self.hint}"
            ) from None
        os.ftruncate(fd, 0)
        os.write(
            fd, json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "since": time.time()}).encode()
        )
        self._fd = fd
        return self

    def release(self) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> RunLock:
        return self.acquire()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.release()


def _read_holder(fd: int) -> str:
    try:
        info = json.loads(os.pread(fd, 4096, 0).decode() or "{}")
    except (OSError, ValueError):
        return "holder unknown"
    since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(info.get("since", 0)))
    return f"pid {info.get('pid', '?')} on {info.get('host', '?')}, since {since}"
