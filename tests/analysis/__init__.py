"""Tests of the analysis: the masking diagnostics, the verdict and the source papers' claims."""
