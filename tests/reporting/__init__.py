"""Tests of the reporting: tables, figures, the Markdown report and finalize."""
