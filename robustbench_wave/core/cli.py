"""What the command lines share: a parser whose errors are one line, a help formatter that shows defaults
only where they say something, argument types that refuse nonsense counts before any work, and one
vocabulary: a list is written by repeating its flag (commas are the same list), old spellings of a flag stay
as aliases that log a deprecation warning, and ``-v`` / ``-q`` mean debug logging / warnings only everywhere.

Only the command lines (``train``, ``attack``, ``report``, ``gallery``) import this module.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import shlex
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

#: The word that means "no limit" for count options such as ``--n-examples`` of train.
ALL = "all"

log = logging.getLogger("robustbench_wave.core.cli")


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
        self.aliases: list[str] = []  # "OLD = NEW" for the end of --help (add_alias)

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")

    def add_alias(self, old: str, target: argparse.Action, *, nargs: Any = None) -> None:
        """Accept ``old`` as a deprecated spelling of ``target``'s flag: same setting, hidden from the
        options, listed at the end of ``--help``, and a warning in the log each time it is used.
        ``nargs`` overrides the target's (a list flag that used to take several values after one flag)."""
        new = target.option_strings[-1]
        self.add_argument(
            old, action=_Alias, dest=target.dest, target=target, replacement=new,
            nargs=target.nargs if nargs is None else nargs, const=target.const, type=target.type,
            choices=target.choices, metavar=target.metavar, default=argparse.SUPPRESS, help=argparse.SUPPRESS,
        )  # fmt: skip
        self.aliases.append(f"{old} = {new}")

    def format_help(self) -> str:
        note = f"\nold spellings, still accepted with a warning: {'; '.join(self.aliases)}\n"
        return super().format_help() + (note if self.aliases else "")


class _Alias(argparse.Action):
    """A deprecated flag: logs which flag replaces it, then does exactly what that flag does."""

    def __init__(
        self, option_strings: list[str], dest: str, target: argparse.Action, replacement: str, **kwargs: Any
    ) -> None:
        super().__init__(option_strings, dest, **kwargs)
        self.target, self.replacement = target, replacement

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        log.warning("%s is deprecated: write %s (the same setting)", option_string, self.replacement)
        self.target(parser, namespace, values, option_string)


class ListAction(argparse.Action):
    """The one way to write a list: repeat the flag (``--model patch --model wavelet``); a comma list
    (``--model patch,wavelet``) is the same list. ``item`` converts and checks each element. Given
    ``nargs='+'`` (only the deprecated spellings are), several values after one flag still work but warn."""

    def __init__(
        self, option_strings: list[str], dest: str, item: Callable[[str], Any] = str, **kwargs: Any
    ) -> None:
        super().__init__(option_strings, dest, **kwargs)
        self.item = item

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        texts = list(values) if isinstance(values, list) else [values]
        if len(texts) > 1:
            log.warning(
                "%s %s: several values after one flag are deprecated; repeat the flag (%s)",
                option_string, " ".join(texts), " ".join(f"{option_string} {t}" for t in texts),
            )  # fmt: skip
        current = getattr(namespace, self.dest, None)
        items = [] if current is None or current is self.default else current  # the default is replaced
        try:
            new = [self.item(part.strip()) for text in texts for part in text.split(",") if part.strip()]
        except (argparse.ArgumentTypeError, ValueError) as err:
            raise argparse.ArgumentError(None, f"argument {option_string}: {err}") from None
        if not new:
            raise argparse.ArgumentError(None, f"argument {option_string}: {' '.join(texts)!r} names nothing")
        setattr(namespace, self.dest, [*items, *new])


class BareMeans(argparse.Action):
    """``--flag VALUE`` (``nargs='?'``); the bare ``--flag``, an old spelling, still means ``bare`` but warns
    that the value should be written out."""

    def __init__(self, option_strings: list[str], dest: str, bare: str, **kwargs: Any) -> None:
        super().__init__(
            option_strings, dest, **kwargs
        )  # const stays None: argparse passes it for a bare flag
        self.bare = bare

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        if values is None:
            log.warning("a bare %s is deprecated: write %s %s", option_string, option_string, self.bare)
            values = self.bare
        setattr(namespace, self.dest, values)


def add_verbosity(p: argparse.ArgumentParser, quiet_help: str = "warnings and errors only") -> None:
    """``-v/--verbose`` (debug logging) and ``-q/--quiet``, the same on every command line."""
    group = p.add_mutually_exclusive_group()
    group.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    group.add_argument("-q", "--quiet", action="store_true", help=quiet_help)


def setup_logging(args: argparse.Namespace, fmt: str, default: int = logging.INFO) -> None:
    """Log at the level ``-v`` / ``-q`` chose (:func:`log_level`); under ``-v`` only this package logs at
    debug level, other libraries (matplotlib, PIL ...) stay at info."""
    level = log_level(args, default)
    logging.basicConfig(level=max(level, logging.INFO), format=fmt, datefmt="%H:%M:%S")
    if level < logging.INFO:
        logging.getLogger("robustbench_wave").setLevel(level)


def one_of(names: Sequence[str], what: str) -> Callable[[str], str]:
    """An item type for :class:`ListAction`: one of ``names``."""

    def check(text: str) -> str:
        if text not in names:
            raise argparse.ArgumentTypeError(f"{text!r} is not {what}; choose from {', '.join(names)}")
        return text

    return check


def log_level(args: argparse.Namespace, default: int = logging.INFO) -> int:
    """The logging level ``-v`` / ``-q`` chose: DEBUG, WARNING, else the command's ``default``."""
    if args.verbose:
        return logging.DEBUG
    return logging.WARNING if args.quiet else default


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


def field_default(cls: type, name: str) -> Any:
    """The default of the dataclass ``cls``'s field ``name`` (its factory called): a flag's default read from
    the dataclass the command builds, so the command line and the Python API cannot disagree."""
    field = next(f for f in dataclasses.fields(cls) if f.name == name)
    return field.default_factory() if field.default is dataclasses.MISSING else field.default


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
