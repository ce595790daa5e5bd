"""Optional compiled kernels for a built model: ``torch.compile`` behind one switch, off by default.

The zoo models are tiny ViTs (width 64, 64 tokens): matrix products are a quarter of a pass, attention over
heads of width 16 and element-wise work the rest; inductor fuses some of the latter. Measured on the 2-core
CPU machine (``python -m benchmarks.bench_forward --compile``: make demo's models, one thread, batch 128;
``results/published/bench-forward``): compiled/eager 0.90-0.99 forward, 0.96-0.97 forward+backward, after a
first call that compiles (seconds here, minutes on a loaded machine or a cold inductor cache). Compiled
kernels reorder float operations, so logits differ from eager ones in the last bits (7e-7 on the wavelet
model) and a compiled run's records are *not* bit-identical to an eager run's: the mode must go into the run's provenance, and comparisons of records
across runs must use the same mode. The switch is a :class:`CompileMode` value, given on the command line or
through the ``RBW_COMPILE`` environment variable (:func:`compile_mode_from_env`).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from enum import Enum

import torch
from torch import nn

from robustbench_wave.core.naming import parse_enum

log = logging.getLogger(__name__)

COMPILE_ENV = "RBW_COMPILE"


class CompileMode(str, Enum):
    """How a model's forward (and backward) is run."""

    OFF = "off"  # eager PyTorch: the reference numbers
    DEFAULT = "default"  # torch.compile with inductor's default mode
    MAX_AUTOTUNE = "max-autotune"  # inductor benchmarks kernel choices while compiling (slower to compile)

    @classmethod
    def parse(cls, value: str | CompileMode) -> CompileMode:
        return parse_enum(cls, value, "compile mode")


def compile_mode_from_env(environ: Mapping[str, str] = os.environ) -> CompileMode:
    """The mode named by ``RBW_COMPILE`` (unset or empty: off)."""
    return CompileMode.parse(environ.get(COMPILE_ENV, "") or CompileMode.OFF.value)


def compile_model(model: nn.Module, mode: str | CompileMode = CompileMode.OFF) -> nn.Module:
    """``model`` itself when ``mode`` is off, else its ``torch.compile`` wrapper (same parameters and modules).

    Gradient modes, ``attack_mode`` and grad/no-grad calls are guards of the compiled graph, so each
    combination compiles once on first use; batch sizes become dynamic after the first recompile.
    """
    mode = CompileMode.parse(mode)
    if mode is CompileMode.OFF:
        return model
    log.info("compiling the model with torch.compile(mode=%r); the first calls are slow", mode.value)
    return torch.compile(model, mode=mode.value)
