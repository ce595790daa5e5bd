"""robustbench_wave: train patch-, wavelet- and Token-Pooling ViTs on one loop and evaluate their robustness honestly."""

__version__ = "0.1.0"
