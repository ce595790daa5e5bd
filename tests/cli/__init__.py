"""Tests of the three command lines end to end: inputs, run folders, file modes, tracking."""
