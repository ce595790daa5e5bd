"""Tests of the benchmark harness's pure parts (no timings asserted)."""
