"""Benchmarks of robustbench_wave: speed ratios measured side by side (``make bench``; see README.md)."""
