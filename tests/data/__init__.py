"""Tests of the data sources and their registry (``robustbench_wave.data``)."""
