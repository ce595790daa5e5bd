"""What the three command lines share: a parser whose errors are one line, a help formatter that shows
defaults only where they say something, and argument types that refuse nonsense counts before any work.

Only the command lines (``train``, ``attack``, ``report``) import this module.
"""

from __future__ import annotations

import argparse
import shlex
from collections.abc import Sequence
from typing import NoReturn

#: The word that means "no limit" for count options such as ``--test-subset``.
ALL = "all"


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Append "(default: X)" only to options that take a value: a flag's default (True for ``--no-x``)
    reads as the opposite of what the flag does."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if action.nargs == 0 or action.default in (None, argparse.SUPPRESS):
            return action.help
        return super()._get_help_string(action)


class Parser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose errors are one line naming the option and the value (exit status 2)."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def _whole_number(text: str, minimum: int, meaning: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number ({meaning})") from None
    if value < minimum:
        raise argparse.ArgumentTypeError(f"{text!r} is not {meaning}")
    return value


def positive_int(text: str) -> int:
    """A count: a whole number >= 1."""
    return _whole_number(text, 1, "a count >= 1")


def non_negative_int(text: str) -> int:
    """A seed or an index: a whole number >= 0."""
    return _whole_number(text, 0, "a whole number >= 0")


def count_or_all(text: str) -> int | None:
    """A count >= 1, or ``all`` (returned as None: no limit). 0 and negatives are errors, never "all"."""
    if text.strip().lower() == ALL:
        return None
    return _whole_number(text, 1, f"a count >= 1 or '{ALL}'")


def open_fraction(text: str) -> float:
    """A share strictly between 0 and 1."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0.0 < value < 1.0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a fraction strictly between 0 and 1")
    return value


def positive_float(text: str) -> float:
    """A rate or a step: a finite number > 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value > 0.0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite number > 0")
    return value


def command_line(module: str, argv: Sequence[str], world_size: int = 1, local_world_size: int = 1) -> str:
    """The invocation as a user would type it again, recorded with a run: ``python -m MODULE ARGS``, behind
    ``torchrun`` with the same ranks per node (and nodes) when it ran on several (a ``DistContext``'s sizes).

    ``sys.argv[0]`` is the module's file path under both ``python -m`` and torchrun, which reruns nothing.
    """
    launcher = ["python"]
    if world_size > 1:
        nodes = max(1, world_size // max(1, local_world_size))
        launcher = [
            "torchrun",
            *([f"--nnodes={nodes}"] if nodes > 1 else []),
            f"--nproc_per_node={local_world_size}",
        ]
    return shlex.join([*launcher, "-m", module, *argv])
