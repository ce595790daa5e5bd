"""Reporting: everything a reader sees, rendered from a saved run folder without re-running an attack.

:mod:`.runs` names the files of a run folder and reads one (:func:`load_run`), after :mod:`.completeness`
has checked that its records are complete, unedited and of its configuration; :mod:`.tables` lays the
numbers of :mod:`robustbench_wave.evaluation.metrics` out as CSV, LaTeX, terminal text and Markdown tables;
:mod:`.plots` draws the figures; :mod:`.markdown` writes ``report.md``, one function per section;
:mod:`.finalize` is the last step of an attack run (energy, diagnostics, then the report). The layer sits on
top of ``evaluation`` and ``analysis``; only the command lines (``python -m robustbench_wave.attack`` and
``python -m robustbench_wave.report``) import it.
"""
