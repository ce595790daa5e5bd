"""Where the declarative specs are: the attack suites (``attacks/*.toml``) and the zoo (``models/*.toml``).

The repository keeps them at its top level, beside the package, where a reader looks for them; the wheel ships
them inside the package as ``robustbench_wave.suites`` and ``robustbench_wave.zoo_specs`` (pyproject.toml's
``package-dir`` maps those names onto the two folders), so ``benchmark()`` has its default suite after a plain
``pip install``. An editable install resolves the same names to the checkout's folders; a checkout used without
installing falls back to them directly. An environment variable (``RBW_SUITE_DIR``, ``RBW_ZOO_DIR``) overrides
both, for a user's own specs.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

#: The installed package of the suites and the checkout folder it is built from.
SUITES = ("robustbench_wave.suites", "attacks", "RBW_SUITE_DIR")
#: The same for the zoo specs.
ZOO = ("robustbench_wave.zoo_specs", "models", "RBW_ZOO_DIR")


def spec_dir(package: str, folder: str, env: str) -> Path:
    """The folder of one kind of spec: ``env``'s value when set, else the installed ``package`` (a folder of
    TOML files, no ``__init__``), else the checkout's ``folder`` beside the package."""
    if os.environ.get(env):
        return Path(os.environ[env])
    try:
        found = importlib.util.find_spec(package)
    except ModuleNotFoundError:  # a checkout run without installing: no mapping for the name
        found = None
    if found is not None and found.submodule_search_locations:
        return Path(next(iter(found.submodule_search_locations)))
    return Path(__file__).resolve().parents[2] / folder


def suite_dir() -> Path:
    """The attack suites' folder (:data:`SUITES`)."""
    return spec_dir(*SUITES)


def zoo_dir() -> Path:
    """The zoo specs' folder (:data:`ZOO`)."""
    return spec_dir(*ZOO)
