"""The harness of ``tests/cli/test_bad_inputs.py``: one bad input per case, run through a command line, judged
by what a user sees (exit status, one line naming the culprit, no traceback) and by what is left on disk
(nothing created, changed or deleted anywhere in the case's folder or the shared trained runs).

A case is data (:class:`Case`): the command line, the flags it changes from a working invocation, an
optional ``setup`` that spoils a file or holds a lock, and the tokens a good message must name.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import os
import re
import stat
import subprocess
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from robustbench_wave.core.runfolder import LOCK_FILE
from tests.support import REPO

#: The module of each command line (``merge`` is ``report merge``).
MODULES = {
    "train": "robustbench_wave.train",
    "attack": "robustbench_wave.attack",
    "report": "robustbench_wave.report",
    "merge": "robustbench_wave.report",
}

#: A log record on stderr (the CLIs' logging formats), which is not part of the error message.
LOG_LINE = re.compile(r"^(\d\d:\d\d:\d\d )?(\[rank \d+\] )?(DEBUG|INFO|WARNING) ")

Entry = tuple[str, int, str, int]  # (kind, size, sha256 or link target, mode)


def snapshot(root: Path) -> dict[str, Entry]:
    """Every folder, file and link under ``root`` (relative path -> kind, size, sha256, mode)."""
    out: dict[str, Entry] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in [*dirnames, *filenames]:
            path = Path(dirpath) / name
            st = path.lstat()
            rel = path.relative_to(root).as_posix()
            if stat.S_ISLNK(st.st_mode):
                out[rel] = ("link", 0, os.readlink(path), stat.S_IMODE(st.st_mode))
            elif stat.S_ISDIR(st.st_mode):
                out[rel] = ("dir", 0, "", stat.S_IMODE(st.st_mode))
            else:
                digest = hashlib.sha256(path.read_bytes()).hexdigest()
                out[rel] = ("file", st.st_size, digest, stat.S_IMODE(st.st_mode))
    return out


def diff_snapshots(before: Mapping[str, Entry], after: Mapping[str, Entry]) -> list[str]:
    """What changed, one line per path (empty when nothing did)."""
    lines = [f"created {p}" for p in sorted(after.keys() - before.keys())]
    lines += [f"deleted {p}" for p in sorted(before.keys() - after.keys())]
    lines += [
        f"changed {p}: {before[p]} -> {after[p]}"
        for p in sorted(before.keys() & after.keys())
        if _significant(p, before[p], after[p])
    ]
    return lines


def _significant(path: str, before: Entry, after: Entry) -> bool:
    """A change a user would care about. An existing run-folder lock file records its last holder (pid, host,
    time) each time a command takes the lock, which a command may do before it refuses a configuration it
    can only check under the lock; that record is not a result, so only its kind and mode count."""
    if Path(path).name == LOCK_FILE and before[0] == after[0] == "file":
        return before[3] != after[3]
    return before != after


@dataclass
class Outcome:
    """What a command line did: its exit status, the error text a user reads, and what else escaped."""

    code: object  # SystemExit.code (0/None = success), or the escaped exception
    message: str  # the SystemExit text, else the error text on stderr
    stderr: str
    escaped: BaseException | None = None  # an exception other than SystemExit (a traceback for the user)

    def describe(self) -> str:
        esc = f"\nescaped: {self.escaped!r}" if self.escaped is not None else ""
        return f"exit code {self.code!r}{esc}\nmessage: {self.message!r}\nstderr:\n{self.stderr}"


def run_in_process(cli: str, argv: list[str], capsys: Any) -> Outcome:
    """``MODULE.main(argv)`` as the console script runs it, catching what would reach the user."""
    main = importlib.import_module(MODULES[cli]).main
    capsys.readouterr()
    try:
        code: object = main(argv)
        escaped = None
    except SystemExit as err:
        code, escaped = err.code, None
    except BaseException as err:
        code, escaped = err, err
    err_text = capsys.readouterr().err
    message = code if isinstance(code, str) else _error_text(err_text)
    return Outcome(code, message, err_text, escaped)


def run_subprocess(
    cli: str, argv: list[str], cwd: Path, env: Mapping[str, str], prefix: Sequence[str] = ()
) -> Outcome:
    """``python -m MODULE ARGV`` as a user types it (``prefix``: e.g. setpriv to drop root)."""
    full_env = {
        **os.environ,
        **env,
        "PYTHONPATH": str(REPO),
        "PYTHONDONTWRITEBYTECODE": "1",
        "OMP_NUM_THREADS": "1",
    }
    proc = subprocess.run(
        [*prefix, sys.executable, "-m", MODULES[cli], *argv],
        cwd=cwd,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    escaped = RuntimeError("traceback on stderr") if "Traceback" in proc.stderr else None
    return Outcome(proc.returncode, _error_text(proc.stderr), proc.stderr, escaped)


def _error_text(stderr: str) -> str:
    """The lines of ``stderr`` that are not log records: what the user reads as the error."""
    return "\n".join(
        line for line in stderr.strip().splitlines() if line.strip() and not LOG_LINE.match(line)
    )


def failures(outcome: Outcome, tokens: list[str | tuple[str, ...]]) -> list[str]:
    """Why ``outcome`` is not a clean refusal naming ``tokens`` (each a string, or a tuple of alternatives)."""
    problems = []
    if outcome.escaped is not None or "Traceback" in outcome.stderr:
        problems.append("a traceback reached the user")
    if outcome.escaped is None and outcome.code in (0, None):
        problems.append("the command succeeded (exit 0)")
    message = outcome.message.strip()
    if not message:
        problems.append("no error message")
    elif "\n" in message:
        problems.append(f"the message has {message.count(chr(10)) + 1} lines, not one")
    for token in tokens:
        options = token if isinstance(token, tuple) else (token,)
        if not any(t in message for t in options):
            problems.append(f"the message does not name {' or '.join(map(repr, options))}")
    return problems


@dataclass(frozen=True)
class Env:
    """The folders of one case (all absolute), for formatting flags and tokens."""

    root: Path  # the case's own tmp tree (snapshot root)
    results: Path  # its copy of the trained runs and the finished attack run (--out, --results-dir)
    run: Path  # the finished attack run inside ``results``
    sharded: Path  # an attack run of two finished ``--shard`` jobs, not merged yet, inside ``results``
    shared: Path  # the session's trained tree (never to be touched)
    gratings: Path  # an image-folder data set with the channels and size of ``synthetic``

    def fields(self) -> dict[str, str]:
        return {k: str(v) for k, v in vars(self).items()} | {
            "run_name": self.run.name,
            "sharded_name": self.sharded.name,
        }

    def format(self, text: str) -> str:
        return text.format(**self.fields())


Flags = dict[str, str | None]


@dataclass(frozen=True)
class Case:
    """One bad input: ``cli`` run with ``base`` flags changed by ``set``/``drop`` (a None value: a bare flag).

    ``tokens`` (formatted with :meth:`Env.fields`) must all appear in the one-line message; a tuple is a
    set of alternatives. ``setup`` prepares the case's tree (and may enter locks into the stack) before
    the snapshot is taken.
    """

    id: str
    cli: str
    tokens: tuple[str | tuple[str, ...], ...]
    set: Flags = field(default_factory=dict)
    drop: tuple[str, ...] = ()
    positional: tuple[str, ...] | None = None
    setup: Callable[[Env, contextlib.ExitStack], None] | None = None
    subprocess: bool = False
    skip: Callable[[], str | None] | None = None

    def argv(self, base: Flags, positional: tuple[str, ...], env: Env) -> list[str]:
        flags = {k: v for k, v in base.items() if k not in self.drop} | self.set
        args = [env.format(p) for p in (positional if self.positional is None else self.positional)]
        for flag, value in flags.items():
            args += [flag] if value is None else [flag, env.format(value)]
        return args

    def formatted_tokens(self, env: Env) -> list[str | tuple[str, ...]]:
        return [
            tuple(env.format(t) for t in tok) if isinstance(tok, tuple) else env.format(tok)
            for tok in self.tokens
        ]


@contextlib.contextmanager
def unchanged(*roots: Path) -> Iterator[list[str]]:
    """Yields a list that, after the block, holds every change under ``roots`` (prefixed by the root)."""
    before = {root: snapshot(root) for root in roots}
    changes: list[str] = []
    yield changes
    for root in roots:
        changes += [f"{root}: {line}" for line in diff_snapshots(before[root], snapshot(root))]
