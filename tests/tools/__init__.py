"""Tests of tools/: publishing a run's summary files, rendering and checking the pages."""
