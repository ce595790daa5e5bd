"""robustbench_wave: train patch-, wavelet- and Token-Pooling ViTs on one loop and evaluate their robustness honestly.

``robustbench_wave.benchmark(model, ...)`` evaluates one model in one call (:mod:`robustbench_wave.api`, imported
on first use so that ``import robustbench_wave.data`` and the command lines stay light).
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"
__all__ = ["BenchmarkResult", "benchmark"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from robustbench_wave import api

        return getattr(api, name)
    raise AttributeError(f"module 'robustbench_wave' has no attribute {name!r}")
